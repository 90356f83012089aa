// Publishes each rank's radix cache as vLLM/SGLang KV events (BlockStored, BlockRemoved,
// AllBlocksCleared) on a ZMQ PUB socket, with the ROUTER replay endpoint, in their exact wire
// format (@kvroute/protocol/kv-events): routers subscribe to the mock worker as to a real
// engine. One publisher per DP rank, on the configured port plus the rank, as the engines do.
//
// Blocks: the radix cache holds token segments; the engines report fixed-size blocks. Block j
// of a cached path is tokens [j*B, (j+1)*B); it is stored when an insertion completes it and
// removed when an eviction takes any of its tokens. Block hashes are the engine's business:
// here, as vLLM does by default, the first 8 bytes of a sha256 chained over the parent's hash
// and the block's tokens (so hashes above 2^53 occur, as in production). A block stored twice
// (pages that share tokens but not a radix node) is reference-counted and reported once.
//
// Batching: events of one event-loop turn (one scheduler step) go out as one EventBatch.
import { createHash } from 'node:crypto';
import {
  DEFAULT_EVENTS_PORT,
  encodeKvEventBatch,
  encodeSeq,
  type KvCacheEvent,
  offsetEndpointPort,
} from '@kvroute/protocol/kv-events';
import type { RadixCache } from '@kvroute/sim/model';
import type { Publisher, Router } from 'zeromq';

type Zmq = typeof import('zeromq');

export interface KvEventsOptions {
  /** PUB endpoint to bind, e.g. tcp://127.0.0.1:5557 (rank r binds port + r); port 0 or * picks one per rank. */
  endpoint: string;
  /** ROUTER replay endpoint to bind (same port rules); none: no replays. */
  replayEndpoint?: string;
  /** Engine block size in tokens. Default 16 (vLLM's default). */
  blockSize?: number;
  /** Batches kept for replay. Default 10,000 (vLLM's buffer_steps). */
  bufferSteps?: number;
  /** Topic frame. Default '' (vLLM's default). */
  topic?: string;
}

export const KV_EVENTS_DEFAULT_ENDPOINT = `tcp://127.0.0.1:${DEFAULT_EVENTS_PORT}`;

const END_SEQ = encodeSeq(-1);
const EMPTY = Buffer.alloc(0);

function bindable(endpoint: string, rank: number): string {
  // Ephemeral ports cannot be offset: every rank asks for its own.
  const m = /^(tcp:\/\/.+):(0|\*)$/.exec(endpoint);
  if (m) return `${m[1]}:*`;
  return offsetEndpointPort(endpoint, rank);
}

/** Block hashing over one path, remembering the last path's chain (chunked prefill re-walks it). */
class BlockChain {
  private tokens = new Uint32Array(0);
  private hashes: string[] = [];

  constructor(private readonly blockSize: number) {}

  /** Hashes of blocks 0..count-1 of `path`. */
  of(path: Uint32Array, count: number): readonly string[] {
    const B = this.blockSize;
    let same = 0;
    const known = Math.min(this.hashes.length, count);
    outer: for (; same < known; same++) {
      for (let t = same * B; t < (same + 1) * B; t++) {
        if (this.tokens[t] !== path[t]) break outer;
      }
    }
    this.hashes.length = same;
    for (let j = same; j < count; j++) {
      const h = createHash('sha256');
      if (j > 0) h.update(this.hashes[j - 1] as string);
      h.update(new Uint8Array(path.buffer, path.byteOffset + j * B * 4, B * 4));
      this.hashes.push(h.digest().readBigUInt64BE(0).toString());
    }
    if (count > same) this.tokens = path.slice(0, count * B);
    return this.hashes;
  }
}

export class RankEventPublisher {
  private readonly pub: Publisher;
  private readonly replay: Router | undefined;
  private readonly chain: BlockChain;
  private readonly refs = new Map<string, number>();
  private pending: KvCacheEvent[] = [];
  private scheduled = false;
  private seq = 0;
  private readonly buffer: { seq: number; payload: Buffer }[] = [];
  private sending: Promise<void> = Promise.resolve();
  private closed = false;
  readonly blockSize: number;
  readonly bufferSteps: number;
  readonly topic: Buffer;
  /** Bound endpoints (ports resolved). */
  endpoint = '';
  replayEndpoint: string | undefined;
  batchesPublished = 0;

  constructor(
    zmq: Zmq,
    readonly dpRank: number,
    private readonly opts: KvEventsOptions,
    /** Ranks of a DP server annotate batches with their rank, as vLLM does. */
    private readonly annotateRank: boolean,
  ) {
    this.blockSize = opts.blockSize ?? 16;
    this.bufferSteps = opts.bufferSteps ?? 10_000;
    this.topic = Buffer.from(opts.topic ?? '', 'utf8');
    this.chain = new BlockChain(this.blockSize);
    this.pub = new zmq.Publisher({ sendHighWaterMark: 100_000, linger: 0 });
    this.replay = opts.replayEndpoint ? new zmq.Router({ linger: 0 }) : undefined;
  }

  async bind(): Promise<void> {
    await this.pub.bind(bindable(this.opts.endpoint, this.dpRank));
    this.endpoint = this.pub.lastEndpoint ?? this.opts.endpoint;
    if (this.replay && this.opts.replayEndpoint) {
      await this.replay.bind(bindable(this.opts.replayEndpoint, this.dpRank));
      this.replayEndpoint = this.replay.lastEndpoint ?? this.opts.replayEndpoint;
      void this.serveReplays(this.replay);
    }
  }

  /** Wires this publisher to a rank's radix cache. */
  attach(cache: RadixCache): void {
    cache.hooks = {
      stored: (path, start) => this.stored(path, start),
      evicted: (path, start) => this.evicted(path, start),
      cleared: () => this.cleared(),
    };
  }

  stored(path: Uint32Array, start: number): void {
    const B = this.blockSize;
    const first = Math.floor(start / B);
    const count = Math.floor(path.length / B);
    if (count <= first) return;
    const hashes = this.chain.of(path, count);
    // One BlockStored per run of blocks new to this rank (usually one run: blocks shared with
    // a sibling path sit at the front).
    let run: string[] = [];
    let from = first;
    for (let j = first; j <= count; j++) {
      const h = j < count ? (hashes[j] as string) : undefined;
      const n = h === undefined ? 1 : (this.refs.get(h) ?? 0);
      if (h !== undefined) this.refs.set(h, n + 1);
      if (n === 0 && h !== undefined) {
        if (run.length === 0) from = j;
        run.push(h);
        continue;
      }
      if (run.length > 0) {
        this.push({
          type: 'BlockStored',
          blockHashes: run,
          parentBlockHash: from === 0 ? null : (hashes[from - 1] as string),
          tokenIds: Array.from(path.subarray(from * B, (from + run.length) * B)),
          blockSize: B,
          loraId: null,
          medium: 'GPU',
        });
        run = [];
      }
    }
  }

  evicted(path: Uint32Array, start: number): void {
    const B = this.blockSize;
    const first = Math.floor(start / B);
    const count = Math.floor(path.length / B);
    if (count <= first) return;
    const hashes = this.chain.of(path, count);
    const gone: string[] = [];
    for (let j = first; j < count; j++) {
      const h = hashes[j] as string;
      const n = this.refs.get(h) ?? 0;
      if (n <= 1) {
        if (n === 1) gone.push(h);
        this.refs.delete(h);
      } else this.refs.set(h, n - 1);
    }
    if (gone.length > 0) this.push({ type: 'BlockRemoved', blockHashes: gone, medium: 'GPU' });
  }

  cleared(): void {
    this.refs.clear();
    this.push({ type: 'AllBlocksCleared' });
  }

  private push(ev: KvCacheEvent): void {
    if (this.closed) return;
    this.pending.push(ev);
    if (!this.scheduled) {
      this.scheduled = true;
      setImmediate(() => this.flush());
    }
  }

  private flush(): void {
    this.scheduled = false;
    if (this.pending.length === 0 || this.closed) return;
    const events = this.pending;
    this.pending = [];
    const payload = encodeKvEventBatch({
      ts: Date.now() / 1000,
      events,
      ...(this.annotateRank ? { dataParallelRank: this.dpRank } : {}),
    });
    const seq = this.seq++;
    this.buffer.push({ seq, payload });
    if (this.buffer.length > this.bufferSteps) this.buffer.shift();
    const frames = [this.topic, encodeSeq(seq), payload];
    this.sending = this.sending
      .then(() => (this.closed ? undefined : this.pub.send(frames)))
      .then(() => {
        this.batchesPublished++;
      })
      .catch(() => {
        // A PUB socket drops for slow subscribers (past the high-water mark); a closed one
        // only while shutting down. Subscribers find the gap by sequence and replay.
      });
  }

  private async serveReplays(router: Router): Promise<void> {
    try {
      for await (const frames of router) {
        // [identity, empty delimiter, 8-byte start seq]; anything else is ignored, as vLLM does.
        if (frames.length !== 3) continue;
        const [id, , startFrame] = frames as [Buffer, Buffer, Buffer];
        if (startFrame.length !== 8) continue;
        const start = Number(startFrame.readBigUInt64BE(0));
        for (const b of this.buffer.slice()) {
          if (b.seq >= start) await router.send([id, EMPTY, encodeSeq(b.seq), b.payload]);
        }
        await router.send([id, EMPTY, END_SEQ, EMPTY]);
      }
    } catch {
      // Closed.
    }
  }

  /** For tests: publishes whatever is pending now instead of at the end of this turn. */
  flushNow(): Promise<void> {
    this.flush();
    return this.sending;
  }

  async close(): Promise<void> {
    this.flush();
    await this.sending;
    this.closed = true;
    this.pub.close();
    this.replay?.close();
  }
}

/** One publisher per DP rank of the worker, bound and attached to the rank caches. */
export async function startKvEventPublishers(
  caches: readonly RadixCache[],
  opts: KvEventsOptions,
): Promise<RankEventPublisher[]> {
  // A native addon, loaded only when events are on (the router's bundle keeps it external).
  const zmq = await import('zeromq');
  const out: RankEventPublisher[] = [];
  try {
    for (let r = 0; r < caches.length; r++) {
      const p = new RankEventPublisher(zmq, r, opts, caches.length > 1);
      out.push(p);
      await p.bind();
      p.attach(caches[r] as RadixCache);
    }
  } catch (err) {
    await Promise.all(out.map((p) => p.close()));
    throw err;
  }
  return out;
}
