// One engine KV event stream (one DP rank of one worker): a ZMQ SUB socket on its PUB
// endpoint and, when the engine has one, a DEALER on its ROUTER replay endpoint.
//
// Sequence handling (frames: topic, 8-byte big-endian seq, msgpack EventBatch):
//   - on connecting, with a replay endpoint: replay from 0, so a router that joins engines
//     already warm knows what they hold before their next batch (an engine that only serves
//     full hits, or is idle, may publish nothing for long); a live batch the replay already
//     gave (same seq, same bytes) is skipped;
//   - first batch seen with seq s > 0: the engine ran before we connected; replay [0, s) to
//     learn what it already holds (what is older than its replay buffer stays unknown and is
//     counted as missed history);
//   - s = last + 1: apply;
//   - s > last + 1: a gap (the PUB socket dropped batches past its high-water mark, or the
//     connection blipped): replay [last + 1, s); batches the buffer no longer has are counted
//     as missed and the stream is reported out of sync for a grace period;
//   - s <= last: the publisher restarted (its sequence starts at 0 again): forget the rank's
//     blocks and start over as for a first batch.
// ZMQ reconnects by itself, backing off from reconnectInterval to reconnectMaxInterval. After
// a reconnect the subscriber asks the replay endpoint for its own last batch: the same bytes
// mean the same publisher (only a gap to fill), anything else a restart (clear, then replay
// from 0). Without a replay endpoint a reconnect is treated as a restart.
import {
  decodeKvEventBatch,
  decodeSeq,
  encodeSeq,
  type KvEventBatch,
  KvEventDecodeError,
} from '@kvroute/protocol/kv-events';
import type { Dealer, Subscriber } from 'zeromq';

/** zeromq is a native addon: loaded only when KV events are configured (see loadZmq). */
export type Zmq = typeof import('zeromq');

let zmqModule: Promise<Zmq> | undefined;
/** Loads the zeromq package once; the router's single-file bundle keeps it external. */
export function loadZmq(): Promise<Zmq> {
  zmqModule ??= import('zeromq');
  return zmqModule;
}

export interface StreamCounters {
  batches: number;
  replayedBatches: number;
  gaps: number;
  missedBatches: number;
  restarts: number;
  decodeErrors: number;
  reconnects: number;
}

export interface StreamSink {
  /** A batch in sequence order (live or replayed). */
  batch(batch: KvEventBatch, replayed: boolean): void;
  /** The engine restarted or can no longer be trusted: forget what it held. */
  reset(reason: 'restart' | 'reconnect'): void;
  /** For logs. */
  warn(message: string): void;
}

export interface StreamOptions {
  endpoint: string;
  replayEndpoint?: string | undefined;
  topic: string;
  /** Replay reply timeout per message. Default 2,000 ms. */
  replayTimeoutMs?: number;
  /** ZMQ reconnect backoff bounds. Defaults 100 ms and 5,000 ms. */
  reconnectIntervalMs?: number;
  reconnectMaxIntervalMs?: number;
}

/** Live batches that may repeat the end of the join replay (published while it ran). */
const JOIN_OVERLAP = 1024;

export class KvEventStream {
  readonly counters: StreamCounters = {
    batches: 0,
    replayedBatches: 0,
    gaps: 0,
    missedBatches: 0,
    restarts: 0,
    decodeErrors: 0,
    reconnects: 0,
  };
  /** Last sequence applied; undefined before the first batch (or after a restart). */
  lastSeq: number | undefined;
  connected = false;
  /** Wall ms of the last batch applied, and of the last unrecoverable loss. */
  lastBatchAt = 0;
  lastLossAt = 0;
  private lastPayload: Buffer | undefined;
  /** The join replay's last batches by seq, until the first live batch (see catchUpAtJoin). */
  private joinReplayed: Map<number, Buffer> | undefined;
  private readonly sub: Subscriber;
  private dealer: Dealer | undefined;
  private closed = false;
  private loop: Promise<void> | undefined;
  /** Messages, replays and reconnect checks run one at a time, in arrival order. */
  private work: Promise<void> = Promise.resolve();

  constructor(
    private readonly zmq: Zmq,
    readonly opts: StreamOptions,
    private readonly sink: StreamSink,
    private readonly now: () => number = Date.now,
  ) {
    this.sub = new zmq.Subscriber({
      linger: 0,
      receiveHighWaterMark: 100_000,
      reconnectInterval: opts.reconnectIntervalMs ?? 100,
      reconnectMaxInterval: opts.reconnectMaxIntervalMs ?? 5_000,
    });
  }

  start(): void {
    this.sub.events.on('connect', () => {
      this.connected = true;
      // A restarted engine may stay silent for long: check now, not at its next batch.
      if (this.lastSeq !== undefined) void this.enqueue(() => this.checkAfterReconnect());
      // A warm engine may stay silent for long too: learn its history now.
      else if (this.opts.replayEndpoint) void this.enqueue(() => this.catchUpAtJoin());
    });
    this.sub.events.on('disconnect', () => {
      this.connected = false;
      this.counters.reconnects++;
    });
    this.sub.connect(this.opts.endpoint);
    this.sub.subscribe(this.opts.topic);
    this.loop = this.run();
  }

  private async run(): Promise<void> {
    try {
      for await (const frames of this.sub) {
        if (this.closed) break;
        await this.enqueue(() => this.onMessage(frames as Buffer[]));
      }
    } catch (err) {
      if (!this.closed)
        this.sink.warn(`kv-events ${this.opts.endpoint}: ${(err as Error).message}`);
    }
  }

  private enqueue(task: () => Promise<void>): Promise<void> {
    this.work = this.work.then(task).catch((err: unknown) => {
      if (!this.closed)
        this.sink.warn(`kv-events ${this.opts.endpoint}: ${(err as Error).message}`);
    });
    return this.work;
  }

  private async onMessage(frames: Buffer[]): Promise<void> {
    if (frames.length !== 3) {
      this.counters.decodeErrors++;
      return;
    }
    let seq: number;
    try {
      seq = decodeSeq(frames[1] as Buffer);
    } catch {
      this.counters.decodeErrors++;
      return;
    }
    const payload = frames[2] as Buffer;
    const last = this.lastSeq;
    // Published while the join replay ran: the replay gave it already.
    if (this.joinReplayed?.get(seq)?.equals(payload)) return;
    this.joinReplayed = undefined;
    if (last !== undefined && seq <= last) {
      this.counters.restarts++;
      this.restart('restart');
    }
    if (this.lastSeq === undefined) {
      if (seq > 0) await this.catchUp(0, seq - 1, true);
    } else if (seq > this.lastSeq + 1) {
      this.counters.gaps++;
      await this.catchUp(this.lastSeq + 1, seq - 1, false);
    }
    this.apply(seq, payload, false);
  }

  private restart(reason: 'restart' | 'reconnect'): void {
    this.lastSeq = undefined;
    this.lastPayload = undefined;
    this.sink.reset(reason);
  }

  private apply(seq: number, payload: Buffer, replayed: boolean): void {
    let batch: KvEventBatch;
    try {
      batch = decodeKvEventBatch(payload);
    } catch (err) {
      this.counters.decodeErrors++;
      if (!(err instanceof KvEventDecodeError)) throw err;
      this.sink.warn(`kv-events ${this.opts.endpoint} seq ${seq}: ${err.message}`);
      this.lastSeq = seq;
      return;
    }
    this.sink.batch(batch, replayed);
    this.lastSeq = seq;
    this.lastPayload = payload;
    this.lastBatchAt = this.now();
    if (replayed) this.counters.replayedBatches++;
    else this.counters.batches++;
  }

  /**
   * Everything the engine's replay buffer holds, applied before any live batch: at the first
   * connection, before the engine's next batch says it ran before we came. The last batches'
   * bytes are kept until the first live batch, which may repeat them.
   */
  private async catchUpAtJoin(): Promise<void> {
    if (this.lastSeq !== undefined) return;
    const seen = new Map<number, Buffer>();
    await this.catchUp(0, Number.POSITIVE_INFINITY, true, seen);
    if (seen.size > 0) this.joinReplayed = seen;
  }

  /**
   * Fills [from, to] from the replay endpoint; what it cannot give is counted as missed (to
   * Infinity: whatever the buffer holds, nothing missed past its end). `keep` collects the
   * last JOIN_OVERLAP batches applied, by seq.
   */
  private async catchUp(
    from: number,
    to: number,
    history: boolean,
    keep?: Map<number, Buffer>,
  ): Promise<void> {
    let expected = from;
    if (this.opts.replayEndpoint) {
      await this.replay(from, (seq, payload) => {
        if (seq < expected || seq > to) return;
        if (seq > expected) this.loss(seq - expected, history);
        this.apply(seq, payload, true);
        if (keep) {
          keep.set(seq, payload);
          if (keep.size > JOIN_OVERLAP) keep.delete(seq - JOIN_OVERLAP);
        }
        expected = seq + 1;
      });
    }
    if (expected <= to && Number.isFinite(to)) this.loss(to - expected + 1, history);
  }

  private loss(batches: number, history: boolean): void {
    this.counters.missedBatches += batches;
    // Missing history (the engine ran before we came and its buffer rolled over) leaves
    // blocks unknown but the stream in sync; a lost live batch may have been a removal.
    if (!history) this.lastLossAt = this.now();
  }

  private async replay(
    from: number,
    onBatch: (seq: number, payload: Buffer) => void,
  ): Promise<void> {
    const endpoint = this.opts.replayEndpoint as string;
    if (!this.dealer) {
      this.dealer = new this.zmq.Dealer({
        linger: 0,
        receiveTimeout: this.opts.replayTimeoutMs ?? 2_000,
      });
      this.dealer.connect(endpoint);
    }
    const dealer = this.dealer;
    try {
      await dealer.send([Buffer.alloc(0), encodeSeq(from)]);
      for (;;) {
        const msg = (await dealer.receive()) as Buffer[];
        // [empty delimiter, seq, payload]
        const seq = decodeSeq(msg[1] as Buffer);
        if (seq === -1) return;
        onBatch(seq, msg[2] as Buffer);
      }
    } catch (err) {
      // A timeout leaves replies in flight that would confuse the next replay: new socket.
      this.dealer = undefined;
      dealer.close();
      if (!this.closed) this.sink.warn(`kv-events replay ${endpoint}: ${(err as Error).message}`);
    }
  }

  private async checkAfterReconnect(): Promise<void> {
    const last = this.lastSeq;
    if (last === undefined) return;
    if (!this.opts.replayEndpoint) {
      this.restart('reconnect');
      return;
    }
    let same = false;
    await this.replay(last, (seq, payload) => {
      if (seq === last && this.lastPayload !== undefined) same = payload.equals(this.lastPayload);
    });
    if (!same) {
      this.counters.restarts++;
      this.restart('restart');
    }
  }

  async close(): Promise<void> {
    this.closed = true;
    this.sub.close();
    this.dealer?.close();
    await this.loop;
  }
}
