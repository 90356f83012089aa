// One decode server of a prefill/decode-disaggregated deployment, as SGLang's
// `--disaggregation-mode decode` runs it:
//
// - Preallocation: a request first needs KV room for its whole prompt (the prefill side will
//   write every prompt page into it) plus its output. Requests wait for that room in arrival
//   order (SGLang's DecodePreallocQueue); only once it is granted may the prefill server start
//   (the bootstrap handshake tells the prefill side where to write), so a full decode server
//   holds prefills back. The room is reserved in full, input + max new tokens, so a running
//   request never runs out and nothing is ever retracted (SGLang reserves the prompt plus a
//   per-request decode budget and retracts when that is exceeded; reserving the whole output
//   is the conservative end of that).
// - No prefix cache: the decode server keeps no radix tree of its own in PD mode, so every
//   request's prompt KV is its own (which is why the whole prompt is transferred).
// - Transfer done: the request joins the running batch at the next step boundary, where
//   SGLang's "prebuilt" batch takes it without a forward pass and emits the first token the
//   prefill server sampled; each decode step after that emits one token per running request.
// - Continuous decode batching: steps of `decodeStepMs(batch, context)`; identical steps up to
//   the next completion run as one event, cut at the next step boundary when a request joins.
import type { CostModel } from '../cost/cost-model.ts';
import type { ScheduledEvent, Scheduler } from '../engine/event-queue.ts';
import { type CoalescedRun, cutCoalescedRun, KvCapacityError } from '../entities/rank.ts';

export interface DecodeRequest {
  id: number | string;
  inputTokens: number;
  maxNewTokens: number;
  /** KV room granted: the prefill may start now. */
  onReserved(timeMs: number): void;
  /** The first token reached the client (the request joined the running batch). */
  onFirstToken(timeMs: number): void;
  onFinish(timeMs: number, info: { outputTokens: number }): void;
}

export interface DecodeRankOptions {
  rank: number;
  profile: CostModel;
  scheduler: Scheduler;
  /** KV pool in tokens; default the profile's. */
  kvCapacityTokens?: number;
  /** Requests decoding at once (SGLang --max-running-requests); default unbounded. */
  maxRunningRequests?: number;
  onStep?(step: DecodeStepRecord): void;
}

/** One decode step, or a run of identical ones. */
export interface DecodeStepRecord {
  rank: number;
  startMs: number;
  endMs: number;
  batch: number;
  steps: number;
}

export interface DecodeRankStats {
  requests: number;
  finished: number;
  decodeBusyMs: number;
  steps: number;
  /** Most KV tokens reserved at once. */
  peakReservedTokens: number;
}

type Phase = 'prealloc' | 'transfer' | 'joining' | 'running' | 'done';

interface Entry {
  spec: DecodeRequest;
  need: number;
  phase: Phase;
  generated: number;
}

interface Run extends CoalescedRun {
  batch: number;
  ctx0: number;
}

export class DecodeRankModel {
  readonly rank: number;
  readonly capacityTokens: number;
  private readonly profile: CostModel;
  private readonly scheduler: Scheduler;
  private readonly maxRunning: number;
  private readonly onStep: ((s: DecodeStepRecord) => void) | null;
  private readonly byId = new Map<number | string, Entry>();
  private prealloc: Entry[] = [];
  private joining: Entry[] = [];
  private running: Entry[] = [];
  private reserved = 0;
  private run: Run | null = null;
  private kick: ScheduledEvent | null = null;
  private readonly st: DecodeRankStats = {
    requests: 0,
    finished: 0,
    decodeBusyMs: 0,
    steps: 0,
    peakReservedTokens: 0,
  };

  constructor(o: DecodeRankOptions) {
    this.rank = o.rank;
    this.profile = o.profile;
    this.scheduler = o.scheduler;
    this.capacityTokens = o.kvCapacityTokens ?? o.profile.kvCapacityTokens;
    if (!Number.isInteger(this.capacityTokens) || this.capacityTokens < 1) {
      throw new RangeError(
        `decode rank ${o.rank}: kvCapacityTokens must be an integer >= 1, got ${this.capacityTokens}`,
      );
    }
    const maxRunning = o.maxRunningRequests ?? Number.POSITIVE_INFINITY;
    if (!(maxRunning >= 1) || (Number.isFinite(maxRunning) && !Number.isInteger(maxRunning))) {
      throw new RangeError(`maxRunningRequests must be an integer >= 1, got ${maxRunning}`);
    }
    this.maxRunning = maxRunning;
    this.onStep = o.onStep ?? null;
  }

  /** A request for this decode server: queued until its KV room is free. */
  reserve(spec: DecodeRequest): void {
    if (this.byId.has(spec.id)) {
      throw new Error(`decode rank ${this.rank}: request id ${spec.id} is already active`);
    }
    if (!Number.isInteger(spec.maxNewTokens) || spec.maxNewTokens < 1) {
      throw new RangeError(
        `decode rank ${this.rank}: maxNewTokens must be an integer >= 1, got ${spec.maxNewTokens}`,
      );
    }
    const need = spec.inputTokens + spec.maxNewTokens;
    if (need > this.capacityTokens) {
      throw new KvCapacityError(
        `decode rank ${this.rank}: request ${spec.id} needs ${need} KV tokens (input + max new tokens), more than the pool's ${this.capacityTokens}: it could never be admitted`,
      );
    }
    const e: Entry = { spec, need, phase: 'prealloc', generated: 0 };
    this.byId.set(spec.id, e);
    this.st.requests++;
    this.prealloc.push(e);
    this.grant();
  }

  /** The prompt's KV has arrived: the request joins the batch at the next step boundary. */
  arrive(id: number | string): void {
    const e = this.byId.get(id);
    if (e === undefined || e.phase !== 'transfer') {
      throw new Error(
        `decode rank ${this.rank}: KV arrived for request ${id}, which is not waiting for it`,
      );
    }
    e.phase = 'joining';
    this.joining.push(e);
    this.wake();
  }

  load(): { runningRequests: number; waitingRequests: number; usedTokens: number } {
    return {
      runningRequests: this.running.length + this.joining.length,
      waitingRequests: this.prealloc.length,
      usedTokens: this.reserved,
    };
  }

  stats(): DecodeRankStats {
    return { ...this.st };
  }

  /** FIFO preallocation: the head waits for room, and everything behind it waits too. */
  private grant(): void {
    const now = this.scheduler.now();
    while (this.prealloc.length > 0) {
      const e = this.prealloc[0]!;
      if (this.reserved + e.need > this.capacityTokens) break;
      this.prealloc.shift();
      this.reserved += e.need;
      if (this.reserved > this.st.peakReservedTokens) this.st.peakReservedTokens = this.reserved;
      e.phase = 'transfer';
      e.spec.onReserved(now);
    }
  }

  private wake(): void {
    if (this.run !== null) {
      const run = this.run;
      cutCoalescedRun(
        run,
        this.scheduler,
        (j) => this.stepMs(run, j),
        () => this.endRun(),
      );
      return;
    }
    if (this.kick !== null) return;
    // Same-time arrivals join one step.
    this.kick = this.scheduler.at(this.scheduler.now(), () => {
      this.kick = null;
      this.next();
    });
  }

  private stepMs(run: { batch: number; ctx0: number }, j: number): number {
    return this.profile.decodeStepMs(run.batch, run.ctx0 + j * run.batch);
  }

  /** At a step boundary: take joiners in (their first token), then start the next run. */
  private next(): void {
    const now = this.scheduler.now();
    let w = 0;
    for (const e of this.joining) {
      if (this.running.length >= this.maxRunning) {
        this.joining[w++] = e;
        continue;
      }
      e.phase = 'running';
      e.generated = 1;
      e.spec.onFirstToken(now);
      if (e.generated >= e.spec.maxNewTokens) this.finish(e, now);
      else this.running.push(e);
    }
    this.joining.length = w;
    if (this.running.length === 0) return;
    let steps = Number.POSITIVE_INFINITY;
    let ctx0 = 0;
    for (const e of this.running) {
      steps = Math.min(steps, e.spec.maxNewTokens - e.generated);
      ctx0 += e.spec.inputTokens + e.generated;
    }
    const shape = { batch: this.running.length, ctx0 };
    let ms = 0;
    for (let j = 0; j < steps; j++) ms += this.stepMs(shape, j);
    const event = this.scheduler.at(now + ms, () => this.endRun());
    this.run = { t0: now, steps, event, ...shape };
  }

  private endRun(): void {
    const run = this.run!;
    this.run = null;
    const now = this.scheduler.now();
    this.st.decodeBusyMs += now - run.t0;
    this.st.steps += run.steps;
    this.onStep?.({
      rank: this.rank,
      startMs: run.t0,
      endMs: now,
      batch: run.batch,
      steps: run.steps,
    });
    let w = 0;
    for (const e of this.running) {
      e.generated += run.steps;
      if (e.generated >= e.spec.maxNewTokens) this.finish(e, now);
      else this.running[w++] = e;
    }
    this.running.length = w;
    this.next();
  }

  private finish(e: Entry, now: number): void {
    e.phase = 'done';
    this.byId.delete(e.spec.id);
    this.reserved -= e.need;
    this.st.finished++;
    e.spec.onFinish(now, { outputTokens: e.generated });
    this.grant();
  }
}
