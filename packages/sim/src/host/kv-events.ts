// Where a simulated router's cache index comes from: its own decisions (learned, the
// default), the ranks' KV events delivered after a lag, or the ranks' caches exactly (oracle,
// lag 0). Events are produced from each rank's radix cache (its store/evict/reset hooks) in
// blocks of `blockSize` tokens, as vLLM/SGLang publish them, and applied to one
// @kvroute/policy KvBlockIndex that every simulated router replica reads: replicas
// subscribing to the same streams build the same index. Engine block hashes are stood in for
// by the content keys themselves (the router never interprets them).
import { chainedBlockKeys, KvBlockIndex } from '@kvroute/policy';
import type { Scheduler } from '../engine/event-queue.ts';
import type { RankModel } from '../entities/rank.ts';

export type IndexSource = 'learned' | 'events' | 'oracle';
export const INDEX_SOURCES: readonly IndexSource[] = ['learned', 'events', 'oracle'];

export class SimKvEvents {
  readonly index = new KvBlockIndex();
  private readonly refs: Map<number, number>[] = [];
  private readonly keys: number[] = [];
  /** Block events produced (stored + removed blocks). */
  blockEvents = 0;

  constructor(
    private readonly q: Scheduler,
    private readonly lagMs: number,
    readonly blockSize = 16,
  ) {
    if (!Number.isFinite(lagMs) || lagMs < 0) {
      throw new RangeError(`eventLagMs must be a number >= 0, got ${lagMs}`);
    }
  }

  /** Publishes `model`'s cache as rank `rank`'s event stream (a new model: a restart). */
  attach(rank: number, model: RankModel): void {
    while (this.refs.length <= rank) this.refs.push(new Map());
    this.index.resize(Math.max(this.index.numRanks, rank + 1));
    this.index.setLive(rank, true);
    (this.refs[rank] as Map<number, number>).clear();
    this.deliver(() => this.index.clearRank(rank));
    model.cache.hooks = {
      stored: (path, start) => this.stored(rank, path, start),
      evicted: (path, start) => this.evicted(rank, path, start),
      cleared: () => {
        (this.refs[rank] as Map<number, number>).clear();
        this.deliver(() => this.index.clearRank(rank));
      },
    };
  }

  private deliver(apply: () => void): void {
    if (this.lagMs === 0) apply();
    else this.q.at(this.q.now() + this.lagMs, apply);
  }

  private stored(rank: number, path: Uint32Array, start: number): void {
    const B = this.blockSize;
    const first = Math.floor(start / B);
    const count = Math.floor(path.length / B);
    if (count <= first) return;
    const keys = chainedBlockKeys(path, B, count * B, this.keys).slice(first);
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
    this.deliver(() => this.index.store(rank, keys, parent, tokens, B));
  }

  private evicted(rank: number, path: Uint32Array, start: number): void {
    const B = this.blockSize;
    const first = Math.floor(start / B);
    const count = Math.floor(path.length / B);
    if (count <= first) return;
    const keys = chainedBlockKeys(path, B, count * B, this.keys).slice(first);
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
    this.deliver(() => this.index.remove(rank, gone));
  }
}
