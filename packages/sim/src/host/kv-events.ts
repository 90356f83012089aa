// Where a simulated router's cache index comes from: its own decisions (learned, the
// default), the ranks' KV events delivered after a lag, or the ranks' caches exactly (oracle,
// lag 0). Events are produced from each rank's radix cache (its store/evict/reset hooks) in
// blocks of `blockSize` tokens, as vLLM/SGLang publish them, and applied to one
// @kvroute/policy KvBlockIndex that every simulated router replica reads: replicas
// subscribing to the same streams build the same index. Engine block hashes are stood in for
// by the content keys themselves (the router never interprets them). The lag is one constant,
// or drawn per batch from measured samples (a seeded stream); either way a rank's events
// apply in the order they happened, as a stream's sequence numbers make a subscriber do.
import { chainedBlockKeys, KvBlockIndex } from '@kvroute/policy';
import type { Scheduler } from '../engine/event-queue.ts';
import type { RankModel } from '../entities/rank.ts';
import { type Rng, stream } from '../workloads/random.ts';

export type IndexSource = 'learned' | 'events' | 'oracle';
export const INDEX_SOURCES: readonly IndexSource[] = ['learned', 'events', 'oracle'];

export class SimKvEvents {
  readonly index: KvBlockIndex;
  private readonly refs: Map<number, number>[] = [];
  private readonly keys: number[] = [];
  /** Block events produced (stored + removed blocks). */
  blockEvents = 0;

  private readonly lagMs: number;
  private readonly lagSamples: readonly number[] | undefined;
  private readonly rng: Rng | undefined;
  /** Per rank: when its latest batch applies (a later batch never overtakes it). */
  private readonly appliesAt: number[] = [];

  constructor(
    private readonly q: Scheduler,
    lag: number | readonly number[],
    readonly blockSize = 16,
    seed: string | number = 1,
  ) {
    // The block size is known up front, as the router's --kv-events-block-size makes it.
    this.index = new KvBlockIndex({ blockSize });
    const bad = (x: number) => !Number.isFinite(x) || x < 0;
    if (typeof lag === 'number') {
      if (bad(lag)) throw new RangeError(`eventLagMs must be a number >= 0, got ${lag}`);
      this.lagMs = lag;
    } else {
      if (lag.length === 0 || lag.some(bad)) {
        throw new RangeError(
          `eventLagMs samples must be a non-empty list of numbers >= 0, got ${JSON.stringify(lag)}`,
        );
      }
      this.lagMs = -1;
      this.lagSamples = lag;
      this.rng = stream(seed, 'kv-event-lag');
    }
  }

  /** Publishes `model`'s cache as rank `rank`'s event stream (a new model: a restart). */
  attach(rank: number, model: RankModel): void {
    while (this.refs.length <= rank) this.refs.push(new Map());
    this.index.resize(Math.max(this.index.numRanks, rank + 1));
    this.index.setLive(rank, true);
    (this.refs[rank] as Map<number, number>).clear();
    this.deliver(rank, () => this.index.clearRank(rank));
    model.cache.hooks = {
      stored: (path, start) => this.stored(rank, path, start),
      evicted: (path, start) => this.evicted(rank, path, start),
      cleared: () => {
        (this.refs[rank] as Map<number, number>).clear();
        this.deliver(rank, () => this.index.clearRank(rank));
      },
    };
  }

  private deliver(rank: number, apply: () => void): void {
    if (this.lagMs === 0) apply();
    else if (this.lagMs > 0) this.q.at(this.q.now() + this.lagMs, apply);
    else {
      const samples = this.lagSamples as readonly number[];
      const lag = samples[Math.floor((this.rng as Rng)() * samples.length)] as number;
      const at = Math.max(this.appliesAt[rank] ?? 0, this.q.now() + lag);
      this.appliesAt[rank] = at;
      this.q.at(at, apply);
    }
  }

  /**
   * The chained keys of the whole blocks of `path` from the one holding token `start` on
   * (`first` is that block's index, `count` the path's whole blocks); undefined when none.
   * `this.keys` is left holding every block's key, parents included.
   */
  private blocksFrom(
    path: Uint32Array,
    start: number,
  ): { keys: number[]; first: number; count: number } | undefined {
    const B = this.blockSize;
    const first = Math.floor(start / B);
    const count = Math.floor(path.length / B);
    if (count <= first) return undefined;
    return { keys: chainedBlockKeys(path, B, count * B, this.keys).slice(first), first, count };
  }

  private stored(rank: number, path: Uint32Array, start: number): void {
    const blocks = this.blocksFrom(path, start);
    if (!blocks) return;
    const { keys, first, count } = blocks;
    const B = this.blockSize;
    const refs = this.refs[rank] as Map<number, number>;
    const fresh: number[] = [];
    for (const k of keys) {
      const n = refs.get(k) ?? 0;
      refs.set(k, n + 1);
      if (n === 0) fresh.push(k);
    }
    if (fresh.length === 0) return;
    this.blockEvents += fresh.length;
    const tokens = path.slice(first * B, count * B);
    const parent = first > 0 ? (this.keys[first - 1] as number) : null;
    // Blocks a sibling path already stored keep their place; re-storing is a no-op.
    this.deliver(rank, () => this.index.store(rank, keys, parent, tokens, B));
  }

  private evicted(rank: number, path: Uint32Array, start: number): void {
    const keys = this.blocksFrom(path, start)?.keys;
    if (!keys) return;
    const refs = this.refs[rank] as Map<number, number>;
    const gone: number[] = [];
    for (const k of keys) {
      const n = refs.get(k) ?? 0;
      if (n <= 1) {
        if (n === 1) gone.push(k);
        refs.delete(k);
      } else refs.set(k, n - 1);
    }
    if (gone.length === 0) return;
    this.blockEvents += gone.length;
    this.deliver(rank, () => this.index.remove(rank, gone));
  }
}
