// One engine KV event stream (one DP rank of one worker): a ZMQ SUB socket on its PUB
// endpoint and, when the engine has one, a DEALER on its ROUTER replay endpoint.
//
// Sequence handling (frames: topic, 8-byte big-endian seq, msgpack EventBatch). vLLM's and
// SGLang's publishers number batches from 0, one per batch, and start again from 0 when the
// engine restarts; their replay endpoint serves the last buffer_steps batches (10,000 by
// default) from the thread that publishes.
//   - on connecting, with a replay endpoint: replay from 0, so a router that joins engines
//     already warm knows what they hold before their next batch (an engine that only serves
//     full hits, or is idle, may publish nothing for long); a live batch the replay already
//     gave (same seq, same bytes) is skipped;
//   - first batch seen with seq s > 0: the engine ran before we connected; replay [0, s) to
//     learn what it already holds (what is older than its replay buffer stays unknown and is
//     counted as missed history);
//   - s = last + 1: apply;
//   - last + 1 < s <= last + MAX_GAP: a gap (the PUB socket dropped batches past its
//     high-water mark, or the connection blipped): replay [last + 1, s); batches the buffer no
//     longer has are counted as missed and the stream is reported out of sync for a grace
//     period;
//   - s = last with the bytes applied last: a duplicate, skipped;
//   - any other s <= last, or s > last + MAX_GAP: out of sequence. Wiping the rank on the
//     word of one batch would lose its index for good (later blocks chain from the wiped
//     ones), so the publisher is asked first: replay from `last`. If it still holds our last
//     batch with the same bytes it is the same publisher and the batch a stray (skipped);
//     if it does not, it restarted (forget the rank's blocks, start over as for a first
//     batch). With no replay endpoint, or no answer, only a sequence back near 0 (below
//     RESTART_SEQ_MAX) is taken for a restart; anything else is skipped, unless the next
//     batch continues from it (the stream really moved there).
// ZMQ reconnects by itself, backing off from reconnectInterval to reconnectMaxInterval. After
// a reconnect the subscriber asks the replay endpoint for its own last batch: the same bytes
// mean the same publisher (only a gap to fill), anything else a restart (clear, then replay
// from 0). Without a replay endpoint a reconnect is treated as a restart.
//
// Hearing from the publisher (`lastHeardAt`): any batch, live or replayed, and any replay
// answered to its end. The feed probes a quiet stream (`probe`: the same last-batch check),
// so an idle engine is heard from as often as a busy one, and a silent publisher thread is
// told from an idle engine without looking at the requests this router sent.
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
  /** Live batches skipped: duplicates of the last one, strays out of sequence. */
  skippedBatches: number;
}

export interface StreamSink {
  /** A batch in sequence order (live or replayed). */
  batch(batch: KvEventBatch, replayed: boolean): void;
  /** The engine restarted or can no longer be trusted: forget what it held. */
  reset(reason: 'restart' | 'reconnect'): void;
  /** For logs; `cause` names the kind of problem (the host rate-limits per stream and cause). */
  warn(cause: string, message: string): void;
  info(cause: string, message: string): void;
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
/**
 * The largest forward jump taken for a gap: more than a publisher's high-water mark (vLLM:
 * 100,000) ever drops, far more than its replay buffer holds. Past it the seq is checked.
 */
export const MAX_GAP = 1 << 20;
/** Unverifiable sequences below this one that go back are a publisher that started over. */
export const RESTART_SEQ_MAX = 1024;

/** ZMTP heartbeat interval on the SUB socket (the connection drops after 3 unanswered). */
const HEARTBEAT_MS = 2_000;

/** What the replay endpoint says of the last batch applied. */
type LastCheck = 'same' | 'other' | 'unknown';

export class KvEventStream {
  readonly counters: StreamCounters = {
    batches: 0,
    replayedBatches: 0,
    gaps: 0,
    missedBatches: 0,
    restarts: 0,
    decodeErrors: 0,
    reconnects: 0,
    skippedBatches: 0,
  };
  /** Last sequence applied; undefined before the first batch (or after a restart). */
  lastSeq: number | undefined;
  connected = false;
  /** Wall ms of the last batch applied, and of the last unrecoverable loss. */
  lastBatchAt = 0;
  lastLossAt = 0;
  /** Wall ms the publisher was last heard from: a batch, or a replay answered to its end. */
  lastHeardAt = 0;
  /** Wall ms of the last connect and disconnect of the SUB socket (0: never). */
  connectedAt = 0;
  disconnectedAt = 0;
  private lastPayload: Buffer | undefined;
  /** The seq of the last live batch skipped as out of sequence (see onMessage). */
  private strayAt: number | undefined;
  private probing = false;
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
      // ZMTP heartbeats (answered by the engine's libzmq I/O thread): a host that vanished
      // without closing its TCP connection is seen as a disconnect in seconds, not hours.
      heartbeatInterval: HEARTBEAT_MS,
      heartbeatTimeout: 3 * HEARTBEAT_MS,
    });
  }

  start(): void {
    this.sub.events.on('connect', () => {
      this.connected = true;
      const again = this.connectedAt > 0;
      this.connectedAt = this.now();
      this.sink.info(
        'connect',
        `kv-events ${this.opts.endpoint}: ${again ? 'reconnected' : 'connected'}`,
      );
      // A restarted engine may stay silent for long: check now, not at its next batch.
      if (this.lastSeq !== undefined) void this.enqueue(() => this.checkAfterReconnect());
      // A warm engine may stay silent for long too: learn its history now.
      else if (this.opts.replayEndpoint) void this.enqueue(() => this.catchUpAtJoin());
    });
    this.sub.events.on('disconnect', () => {
      this.connected = false;
      this.disconnectedAt = this.now();
      this.counters.reconnects++;
      this.sink.warn(
        'disconnect',
        `kv-events ${this.opts.endpoint}: disconnected (reconnecting with backoff); the rank is scored by the learned index until then`,
      );
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
        this.sink.warn('socket', `kv-events ${this.opts.endpoint}: ${(err as Error).message}`);
    }
  }

  private enqueue(task: () => Promise<void>): Promise<void> {
    // A task queued before close() runs after it: once closed, nothing more is done (no
    // socket opened, no batch handed on for a rank that may now be another worker's).
    this.work = this.work
      .then(() => (this.closed ? undefined : task()))
      .catch((err: unknown) => {
        if (!this.closed)
          this.sink.warn('internal', `kv-events ${this.opts.endpoint}: ${(err as Error).message}`);
      });
    return this.work;
  }

  private async onMessage(frames: Buffer[]): Promise<void> {
    if (frames.length !== 3) {
      this.badFrame(`a message of ${frames.length} frames (expected topic, seq, payload)`);
      return;
    }
    let seq: number;
    try {
      seq = decodeSeq(frames[1] as Buffer);
    } catch (err) {
      this.badFrame((err as Error).message);
      return;
    }
    if (seq < 0) {
      this.badFrame(`negative sequence ${seq}`);
      return;
    }
    const payload = frames[2] as Buffer;
    const last = this.lastSeq;
    // Published while the join replay ran: the replay gave it already.
    if (this.joinReplayed?.get(seq)?.equals(payload)) return;
    this.joinReplayed = undefined;
    if (last !== undefined && seq !== last + 1 && !(seq > last && seq - last <= MAX_GAP)) {
      if (!(await this.outOfSequence(seq, last, payload))) return;
    }
    this.strayAt = undefined;
    if (this.lastSeq === undefined) {
      if (seq > 0) await this.catchUp(0, seq - 1, true);
    } else if (seq > this.lastSeq + 1) {
      this.counters.gaps++;
      await this.catchUp(this.lastSeq + 1, seq - 1, false);
    }
    this.apply(seq, payload, false);
  }

  /**
   * A live `seq` that neither follows `last` nor is a plausible gap. Returns whether to apply
   * it (after a restart was handled), false to skip it.
   */
  private async outOfSequence(seq: number, last: number, payload: Buffer): Promise<boolean> {
    if (seq === last && this.lastPayload?.equals(payload)) {
      this.counters.skippedBatches++;
      return false;
    }
    const verdict = await this.checkLast();
    const continues = this.strayAt !== undefined && seq === this.strayAt + 1;
    const restarted =
      verdict === 'other' ||
      (verdict === 'unknown' && ((seq < last && seq < RESTART_SEQ_MAX) || continues));
    if (!restarted) {
      this.strayAt = seq;
      this.counters.skippedBatches++;
      this.sink.warn(
        'sequence',
        `kv-events ${this.opts.endpoint}: batch seq ${seq} after ${last} skipped as out of sequence (${
          verdict === 'same'
            ? `the publisher's replay still holds seq ${last} unchanged`
            : 'not verifiable: no replay answer'
        })`,
      );
      return false;
    }
    this.counters.restarts++;
    this.sink.warn(
      'restart',
      `kv-events ${this.opts.endpoint}: publisher restarted (batch seq ${seq} after ${last}${
        verdict === 'other' ? `, and its replay no longer holds seq ${last} as applied` : ''
      }): the rank's blocks are forgotten and relearned from its replay`,
    );
    this.restart('restart');
    return true;
  }

  private badFrame(what: string): void {
    this.counters.decodeErrors++;
    this.sink.warn('frame', `kv-events ${this.opts.endpoint}: ${what}: skipped`);
  }

  private restart(reason: 'restart' | 'reconnect'): void {
    // Closed: the rank may be another worker's now (the feed dropped this stream).
    if (this.closed) return;
    this.lastSeq = undefined;
    this.lastPayload = undefined;
    this.sink.reset(reason);
  }

  private apply(seq: number, payload: Buffer, replayed: boolean): void {
    // A batch a task in flight at close() still received goes nowhere (see restart).
    if (this.closed) return;
    let batch: KvEventBatch;
    try {
      batch = decodeKvEventBatch(payload);
    } catch (err) {
      this.counters.decodeErrors++;
      if (!(err instanceof KvEventDecodeError)) throw err;
      this.sink.warn('decode', `kv-events ${this.opts.endpoint} seq ${seq}: ${err.message}`);
      this.lastSeq = seq;
      this.lastPayload = payload;
      this.lastHeardAt = this.now();
      return;
    }
    this.sink.batch(batch, replayed);
    this.lastSeq = seq;
    this.lastPayload = payload;
    this.lastBatchAt = this.now();
    this.lastHeardAt = this.lastBatchAt;
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
    if (history) return;
    this.lastLossAt = this.now();
    this.sink.warn(
      'loss',
      `kv-events ${this.opts.endpoint}: ${batches} batches lost for good (dropped, and not in the publisher's replay buffer); the rank is scored by the learned index for a while`,
    );
  }

  /** Whether the replay answered to its end marker (false: no endpoint, timeout, error). */
  private async replay(
    from: number,
    onBatch: (seq: number, payload: Buffer) => void,
  ): Promise<boolean> {
    if (!this.opts.replayEndpoint || this.closed) return false;
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
        if (seq === -1) {
          this.lastHeardAt = this.now();
          return true;
        }
        onBatch(seq, msg[2] as Buffer);
      }
    } catch (err) {
      // A timeout leaves replies in flight that would confuse the next replay: new socket.
      this.dealer = undefined;
      dealer.close();
      if (!this.closed) {
        this.sink.warn(
          'replay',
          `kv-events replay ${endpoint}: ${(err as Error).message} (no answer: gaps cannot be filled, and the rank is not live while its publisher stays silent)`,
        );
      }
      return false;
    }
  }

  /** Asks the replay endpoint for the last batch applied: the same bytes, the same publisher. */
  private async checkLast(): Promise<LastCheck> {
    const last = this.lastSeq;
    const bytes = this.lastPayload;
    if (last === undefined || bytes === undefined) return 'unknown';
    let same = false;
    const answered = await this.replay(last, (seq, payload) => {
      if (seq === last) same = payload.equals(bytes);
    });
    if (!answered) return 'unknown';
    return same ? 'same' : 'other';
  }

  private async checkAfterReconnect(): Promise<void> {
    const last = this.lastSeq;
    if (last === undefined) return;
    if (!this.opts.replayEndpoint) {
      this.sink.warn(
        'restart',
        `kv-events ${this.opts.endpoint}: reconnected without a replay endpoint to tell a restart from a blip: the rank's blocks are forgotten`,
      );
      this.restart('reconnect');
      return;
    }
    const verdict = await this.checkLast();
    if (verdict !== 'same') this.restartedWhileQuiet(last, verdict);
  }

  private restartedWhileQuiet(last: number, verdict: LastCheck): void {
    this.counters.restarts++;
    this.sink.warn(
      'restart',
      `kv-events ${this.opts.endpoint}: publisher restarted (${
        verdict === 'other'
          ? `its replay no longer holds seq ${last} as applied`
          : 'its replay did not answer after a reconnect'
      }): the rank's blocks are forgotten and relearned from its replay`,
    );
    this.restart('restart');
    // What the new publisher already stored: before its next batch, which may come late.
    void this.enqueue(() => this.catchUpAtJoin());
  }

  /**
   * Hears from a quiet publisher (the feed calls this when the stream has said nothing for a
   * while): the last-batch check of a reconnect, or the join replay if nothing was applied
   * yet. A publisher that answers is heard from; one that restarted is caught now. No-op
   * without a replay endpoint, while disconnected, or while a probe is queued.
   */
  probe(): void {
    if (this.probing || this.closed || !this.connected || !this.opts.replayEndpoint) return;
    this.probing = true;
    void this.enqueue(async () => {
      try {
        const last = this.lastSeq;
        if (last === undefined) {
          await this.catchUpAtJoin();
          return;
        }
        const verdict = await this.checkLast();
        if (verdict === 'other') this.restartedWhileQuiet(last, verdict);
      } finally {
        this.probing = false;
      }
    });
  }

  async close(): Promise<void> {
    this.closed = true;
    this.sub.close();
    this.dealer?.close();
    await this.loop;
  }
}
