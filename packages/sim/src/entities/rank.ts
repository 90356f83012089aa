// One SGLang data-parallel rank: waiting queue, continuous batching with chunked prefill,
// a KV pool and a radix cache. Driven by an injected Scheduler, so the simulator runs it in
// simulated time and the mock worker in real time with the same code.
//
// A step takes prefill chunks up to `chunkedPrefillSize` tokens (the in-progress chunked
// request first, then newly admitted ones) plus one token for every running decode (mixed
// chunk). When there is nothing to prefill, the decode steps until the next completion are
// identical in shape, so they run as one event (`coalesceDecode`); a new arrival or abort
// cuts that run at the next step boundary, exactly where SGLang would pick the new request up.
import type { KeyStore } from '../cache/key-store.ts';
import { RadixCache, type RadixHandle } from '../cache/radix-cache.ts';
import type { CostModel } from '../cost/cost-model.ts';
import type { ScheduledEvent, Scheduler } from '../engine/event-queue.ts';
import { KeptMap } from '../engine/kept-tables.ts';
import { ActiveRequest, type RankRequest } from './request.ts';

export type { RankRequest } from './request.ts';

export interface RankModelOptions {
  rank: number;
  profile: CostModel;
  scheduler: Scheduler;
  kvCapacityTokens?: number;
  chunkedPrefillSize?: number;
  pageSize?: number;
  /**
   * Where the rank's radix keys are copied (see cache/key-store.ts): one store per simulation,
   * so its chunks go with the run. Default: none (each key its own buffer).
   */
  keys?: KeyStore | null;
  schedulePolicy?: 'fcfs' | 'lpm';
  /** Run identical decode steps as one event (default true). False: one event per step. */
  coalesceDecode?: boolean;
  /**
   * Requests admitted at once (SGLang --max-running-requests, vLLM --max-num-seqs); a
   * request waits while this many are prefilling or decoding. Default unbounded.
   */
  maxRunningRequests?: number;
  /**
   * How a request gets KV room (default 'optimistic', as SGLang):
   * - 'reserve': input + max new tokens are reserved at admission, so a running request never
   *   runs out of KV (the simulator's historical model; the most conservative admission).
   * - 'optimistic': SGLang. Admission reserves the input and an estimate of the output (max
   *   new tokens x a new-token ratio that starts at 0.7 and decays per decode step to 0.098);
   *   when decoding runs out of KV, requests are retracted (fewest generated tokens first,
   *   then longest input), their KV freed (the prefix stays cached) and re-queued at the end,
   *   to be re-prefilled (input + what they generated) later; the ratio resets to 0.7.
   * - 'preempt': vLLM. Admission needs room for the input only (plus a 1% watermark); when
   *   decoding runs out of blocks the most recently admitted running request is preempted,
   *   freed and put back at the front of the queue, to be recomputed.
   */
  admission?: AdmissionMode;
  /** A host-memory tier behind the GPU radix cache (SGLang HiCache, vLLM CPU offload). */
  hostKv?: HostKvOptions;
  /**
   * Drive this rank's steps from a shared group instead of its own loop (DP attention runs
   * every rank's forward pass in lockstep). Set by DpAttentionGroup.add, not by hand.
   */
  driver?: StepDriver;
  /** Called at the end of every step (a coalesced decode run reports once): metrics hooks. */
  onStep?(step: StepRecord): void;
}

export type AdmissionMode = 'reserve' | 'optimistic' | 'preempt';
export const ADMISSION_MODES: readonly AdmissionMode[] = ['reserve', 'optimistic', 'preempt'];

/**
 * Evicted GPU cache entries are written to host memory (write-back); a later request whose
 * prefix is found there loads it back at `loadTokensPerMs` instead of recomputing it. The
 * load is charged to the step that prefills the request's first chunk (not overlapped with
 * compute: an upper bound on its cost).
 */
export interface HostKvOptions {
  capacityTokens: number;
  /** Load-back rate, tokens per ms (host-to-device bandwidth / KV bytes per token). */
  loadTokensPerMs: number;
  /** The host tier's own eviction order (default 'lru'). */
  eviction?: 'lru' | 'fifo';
  /**
   * A tier several ranks share (an external KV store, as SGLang HiCache's storage backend:
   * Mooncake, 3FS) instead of one of this rank's own; `capacityTokens` and `eviction` are then
   * the shared cache's.
   */
  shared?: RadixCache;
}

/** SGLang's new-token ratio schedule (SGLANG_INIT_NEW_TOKEN_RATIO and its decay). */
const INIT_NEW_TOKEN_RATIO = 0.7;
const MIN_NEW_TOKEN_RATIO = INIT_NEW_TOKEN_RATIO * 0.14;
const NEW_TOKEN_RATIO_DECAY = (INIT_NEW_TOKEN_RATIO - MIN_NEW_TOKEN_RATIO) / 600;
/** vLLM keeps this fraction of blocks free when admitting (watermark). */
const PREEMPT_WATERMARK = 0.01;

/** One finished step (or run of `decodeSteps` identical decode steps) of one rank. */
export interface StepRecord {
  rank: number;
  startMs: number;
  endMs: number;
  /** Input tokens prefilled in this step, over all chunks. */
  prefillTokens: number;
  prefillChunks: number;
  /** The prefill part of the step's cost (0 for decode-only steps). */
  prefillMs: number;
  decodeBatch: number;
  decodeSteps: number;
}

export interface RankLoad {
  runningRequests: number;
  waitingRequests: number;
  usedTokens: number;
  capacityTokens: number;
}

export interface RankStats {
  /** Input tokens computed by prefill (not served from cache). */
  prefillTokens: number;
  /** Input tokens served from cache at admission. */
  cachedTokens: number;
  prefillBusyMs: number;
  decodeBusyMs: number;
  steps: number;
  events: number;
  evictedTokens: number;
  evictedNodes: number;
  admitted: number;
  finished: number;
  aborted: number;
  /** Running requests retracted (SGLang) or preempted (vLLM) for lack of KV room. */
  preempted: number;
  /** Tokens a host tier loaded back into the GPU cache. */
  hostLoadedTokens: number;
}

/** SGLang falls back from lpm to fcfs past this queue length (the sort is O(n) matches). */
const LPM_MAX_QUEUE = 128;

/** @internal */
export interface PrefillPlan {
  startMs: number;
  items: { r: ActiveRequest; n: number }[];
  decoders: ActiveRequest[];
  prefillMs: number;
  decodeMs: number;
}

/** @internal */
export interface DecodeState {
  batch: number;
  ctx0: number;
  steps: number;
}

/** A run of decode-only steps coalesced into one event: started at t0, `steps` long. */
export interface CoalescedRun {
  t0: number;
  steps: number;
  event: ScheduledEvent;
}

interface DecodeRun extends CoalescedRun {
  state: DecodeState;
}

/**
 * Shortens a coalesced run to the first step boundary at or after now (where SGLang would
 * pick a new request up) and reschedules its end there; `stepMs(j)` is step j's duration.
 * Shared by RankModel and DpAttentionGroup. @internal
 */
export function cutCoalescedRun(
  run: CoalescedRun,
  scheduler: Scheduler,
  stepMs: (j: number) => number,
  onEnd: () => void,
): void {
  if (run.steps <= 1) return;
  const now = scheduler.now();
  let t = run.t0;
  let j = 0;
  while (j < run.steps) {
    t += stepMs(j);
    j++;
    if (t >= now) break;
  }
  if (j >= run.steps) return;
  run.event.cancel();
  run.steps = j;
  run.event = scheduler.at(t, onEnd);
}

/**
 * A request larger than the whole KV pool: it could never be admitted, however long it waited.
 * Bad input (a profile too small for the workload), so it carries a code hosts can map.
 */
export class KvCapacityError extends RangeError {
  readonly code = 'KV_CAPACITY';
  override name = 'KvCapacityError';
}

/** What a rank needs from a lockstep driver (DpAttentionGroup). */
export interface StepDriver {
  wake(): void;
}

export class RankModel {
  readonly rank: number;
  readonly cache: RadixCache;
  readonly capacityTokens: number;
  readonly chunkedPrefillSize: number;
  private readonly profile: CostModel;
  private readonly scheduler: Scheduler;
  private readonly lpm: boolean;
  private readonly coalesce: boolean;
  private readonly maxRunning: number;
  private readonly admission: AdmissionMode;
  /** KV grows with decoding outside any reservation (every mode but 'reserve'). */
  private readonly growsKv: boolean;
  private newTokenRatio = INIT_NEW_TOKEN_RATIO;
  readonly host: RadixCache | null;
  private readonly hostLoadTokensPerMs: number;
  private readonly overheadMs: number;
  private readonly onStep: ((step: StepRecord) => void) | null;

  private waiting: ActiveRequest[] = [];
  /** Submitted, still in the per-request overhead (HTTP, tokenization) before the queue. */
  private entering = 0;
  private chunked: ActiveRequest | null = null;
  private decoding: ActiveRequest[] = [];
  private readonly byId = new KeptMap<number | string, ActiveRequest>();
  private reservedTotal = 0;
  /** Generated (or recomputed output) tokens' KV outside the tree, growing modes only. */
  private heldTotal = 0;
  private busy = false;
  private kick: ScheduledEvent | null = null;
  private run: DecodeRun | null = null;
  private readonly group: StepDriver | null;
  /** The cache keeps the eviction counters; stats() adds them. */
  private readonly statsData: Omit<RankStats, 'evictedTokens' | 'evictedNodes'> = {
    prefillTokens: 0,
    cachedTokens: 0,
    prefillBusyMs: 0,
    decodeBusyMs: 0,
    steps: 0,
    events: 0,
    admitted: 0,
    finished: 0,
    aborted: 0,
    preempted: 0,
    hostLoadedTokens: 0,
  };

  constructor(opts: RankModelOptions) {
    this.rank = opts.rank;
    this.profile = opts.profile;
    this.scheduler = opts.scheduler;
    this.capacityTokens = opts.kvCapacityTokens ?? opts.profile.kvCapacityTokens;
    this.chunkedPrefillSize = opts.chunkedPrefillSize ?? opts.profile.chunkedPrefillSize;
    if (!Number.isInteger(this.chunkedPrefillSize) || this.chunkedPrefillSize < 1) {
      throw new RangeError(
        `chunkedPrefillSize must be an integer >= 1, got ${this.chunkedPrefillSize}`,
      );
    }
    const policy = opts.schedulePolicy ?? 'fcfs';
    if (policy !== 'fcfs' && policy !== 'lpm') {
      throw new RangeError(`schedulePolicy must be 'fcfs' or 'lpm', got '${String(policy)}'`);
    }
    this.lpm = policy === 'lpm';
    this.coalesce = opts.coalesceDecode ?? true;
    const admission = opts.admission ?? 'optimistic';
    if (!ADMISSION_MODES.includes(admission)) {
      throw new RangeError(
        `admission must be one of ${ADMISSION_MODES.join(', ')}, got '${String(admission)}'`,
      );
    }
    this.admission = admission;
    this.growsKv = admission !== 'reserve';
    const hostKv = opts.hostKv;
    const keys = opts.keys ?? null;
    let host: RadixCache | null = null;
    this.hostLoadTokensPerMs = 0;
    if (hostKv !== undefined) {
      if (!(hostKv.loadTokensPerMs > 0) || !Number.isFinite(hostKv.loadTokensPerMs)) {
        throw new RangeError(
          `hostKv.loadTokensPerMs must be a finite number > 0, got ${hostKv.loadTokensPerMs}`,
        );
      }
      host =
        hostKv.shared ??
        new RadixCache({
          capacityTokens: hostKv.capacityTokens,
          pageSize: opts.pageSize ?? 1,
          eviction: hostKv.eviction ?? 'lru',
          keys,
        });
      this.hostLoadTokensPerMs = hostKv.loadTokensPerMs;
    }
    this.host = host;
    this.cache = new RadixCache({
      capacityTokens: this.capacityTokens,
      pageSize: opts.pageSize ?? 1,
      keys,
      ...(host !== null ? { onEvict: (path: Uint32Array) => writeBack(host, path) } : {}),
    });
    const maxRunning = opts.maxRunningRequests ?? Number.POSITIVE_INFINITY;
    if (!(maxRunning >= 1) || (Number.isFinite(maxRunning) && !Number.isInteger(maxRunning))) {
      throw new RangeError(`maxRunningRequests must be an integer >= 1, got ${maxRunning}`);
    }
    this.maxRunning = maxRunning;
    this.overheadMs = this.profile.overheadMs ?? 0;
    if (!(this.overheadMs >= 0) || !Number.isFinite(this.overheadMs)) {
      throw new RangeError(`the profile's overheadMs must be a finite number >= 0`);
    }
    this.onStep = opts.onStep ?? null;
    this.group = opts.driver ?? null;
  }

  submit(req: RankRequest): void {
    if (this.byId.has(req.id))
      throw new Error(`rank ${this.rank}: request id ${req.id} is already active`);
    if (!Number.isInteger(req.maxNewTokens) || req.maxNewTokens < 1) {
      throw new RangeError(
        `rank ${this.rank}: maxNewTokens must be an integer >= 1, got ${req.maxNewTokens}`,
      );
    }
    const r = new ActiveRequest(req, this.scheduler.now());
    if (r.inputLen < 1)
      throw new RangeError(`rank ${this.rank}: request ${req.id} has no input tokens`);
    if (r.inputLen + req.maxNewTokens > this.capacityTokens) {
      throw new KvCapacityError(
        `rank ${this.rank}: request ${req.id} needs ${r.inputLen + req.maxNewTokens} KV tokens (input + max new tokens), more than the pool's ${this.capacityTokens} (per rank: the cost profile's kvCapacityTokens, or what --kv-capacity or --mem-fraction set): it could never be admitted`,
      );
    }
    this.byId.set(req.id, r);
    if (this.overheadMs > 0) {
      this.entering++;
      r.entry = this.scheduler.at(this.scheduler.now() + this.overheadMs, () => {
        r.entry = null;
        this.entering--;
        this.waiting.push(r);
        this.wake();
      });
      return;
    }
    this.waiting.push(r);
    this.wake();
  }

  /**
   * KV computed elsewhere lands in this rank's pool, as on a disaggregated decode instance that
   * pulled a prompt's KV from its prefill server: the tokens enter the radix cache (so the
   * request's own admission finds them) and stay locked until `releaseKv`, making room by
   * evicting unlocked cache as an admission does. Null when the pool cannot hold them.
   */
  landKv(ids: ArrayLike<number>): RadixHandle | null {
    const { matchedTokens, handle } = this.cache.match(ids);
    this.cache.lock(handle);
    if (!this.room(ids.length - matchedTokens)) {
      this.cache.unlock(handle);
      return null;
    }
    const landed = this.cache.insertFrom(handle, matchedTokens, ids);
    this.cache.lock(landed);
    this.cache.unlock(handle);
    return landed;
  }

  /** The landed KV is its request's now (admitted) or no longer needed: evictable again. */
  releaseKv(handle: RadixHandle): void {
    this.cache.unlock(handle);
  }

  /** Drops a request wherever it is; its callbacks are not called again. */
  abort(id: number | string): boolean {
    const r = this.byId.get(id);
    if (r === undefined) return false;
    this.byId.delete(id);
    this.statsData.aborted++;
    if (r.entry !== null) {
      r.entry.cancel();
      r.entry = null;
      this.entering--;
    } else if (r.phase === 'waiting') {
      this.waiting.splice(this.waiting.indexOf(r), 1);
    } else {
      this.cutRun();
      if (this.chunked === r) this.chunked = null;
      const i = this.decoding.indexOf(r);
      if (i >= 0) this.decoding.splice(i, 1);
      this.release(r);
    }
    r.phase = 'aborted';
    this.wake();
    return true;
  }

  load(): RankLoad {
    return {
      runningRequests: this.byId.size - this.waiting.length - this.entering,
      waitingRequests: this.waiting.length + this.entering,
      usedTokens: this.cache.protectedSize + this.reservedTotal + this.heldTotal,
      capacityTokens: this.capacityTokens,
    };
  }

  stats(): RankStats {
    return {
      ...this.statsData,
      evictedTokens: this.cache.evictedTokens,
      evictedNodes: this.cache.evictedNodes,
    };
  }

  /** Requests submitted and not finished or aborted, by id. */
  activeIds(): (number | string)[] {
    return this.byId.keys();
  }

  // --- scheduling -------------------------------------------------------------------------
  // Planning (which requests run in the next step, and its cost) is separate from driving
  // (when steps start and end), so a DpAttentionGroup can drive several ranks in lockstep.

  /** Something changed: make the driver look at the next step boundary. */
  private wake(): void {
    if (this.group !== null) {
      this.group.wake();
      return;
    }
    if (this.run !== null) {
      this.cutRun();
      return;
    }
    if (this.busy || this.kick !== null) return;
    // Same-time arrivals join the same step, as SGLang drains its input queue per iteration.
    this.kick = this.scheduler.at(this.scheduler.now(), () => {
      this.kick = null;
      this.step();
    });
  }

  private free(): number {
    return this.capacityTokens - this.cache.used - this.reservedTotal - this.heldTotal;
  }

  /** Frees `need` tokens of room by evicting unlocked cache; true when there is room. */
  private room(need: number): boolean {
    const free = this.free();
    if (need > free) this.cache.evict(need - free);
    return need <= this.free();
  }

  /**
   * KV the running requests are expected to still need, which optimistic admission keeps
   * free (SGLang's PrefillAdder subtracts it from the room it admits into).
   */
  private expectedGrowth(): number {
    if (this.admission !== 'optimistic') return 0;
    let left = 0;
    this.byId.forEachValue((r) => {
      if (r.phase === 'prefill' || r.phase === 'decode') left += r.spec.maxNewTokens - r.generated;
    });
    return left * this.newTokenRatio;
  }

  /**
   * Matches, locks and reserves for `r`; false (and nothing held) when the pool has no room.
   * `keep` is room to leave free beyond the request's own need.
   */
  private admit(r: ActiveRequest, keep: number): boolean {
    // SGLang matches at most input-1 tokens: the last token must run to produce logits.
    const prompt = r.ids.subarray(0, r.inputLen - 1);
    let { matchedTokens, handle } = this.cache.match(prompt);
    this.cache.lock(handle);
    const hostMatched = this.host !== null ? this.host.match(prompt).matchedTokens : 0;
    const load = Math.max(0, hostMatched - matchedTokens);
    const target = r.inputLen + r.recompute;
    // Host-tier tokens come back into the GPU pool, so they need room like prefilled ones.
    const own = target - matchedTokens + (this.growsKv ? 0 : r.spec.maxNewTokens);
    const estimate = this.admission === 'optimistic' ? r.spec.maxNewTokens * this.newTokenRatio : 0;
    if (!this.room(own + estimate + keep)) {
      this.cache.unlock(handle);
      return false;
    }
    if (load > 0) {
      const loaded = this.cache.insertFrom(handle, matchedTokens, r.ids, hostMatched);
      this.cache.lock(loaded);
      this.cache.unlock(handle);
      handle = loaded;
      matchedTokens = hostMatched;
      r.loadMs += load / this.hostLoadTokensPerMs;
      this.statsData.hostLoadedTokens += load;
    }
    const need = own - load;
    r.handle = handle;
    r.prefilled = matchedTokens;
    r.inTree = matchedTokens;
    r.reserved = need;
    this.reservedTotal += need;
    r.phase = 'prefill';
    if (r.admissions++ === 0) {
      r.cachedTokens = matchedTokens;
      this.statsData.admitted++;
      this.statsData.cachedTokens += matchedTokens;
      r.spec.onAdmit?.(this.scheduler.now(), matchedTokens);
    }
    return true;
  }

  /**
   * Makes room for one more token per running decode (the next step's KV), retracting or
   * preempting running requests when evicting the cache is not enough.
   */
  private makeDecodeRoom(): void {
    if (!this.growsKv) return;
    while (this.decoding.length > 0 && !this.room(this.decoding.length)) {
      this.preemptOne();
    }
  }

  private preemptOne(): void {
    let i = this.decoding.length - 1; // vLLM: the most recently scheduled
    if (this.admission === 'optimistic') {
      // SGLang's retract_decode: fewest output tokens first, then the longest input.
      i = 0;
      for (let j = 1; j < this.decoding.length; j++) {
        const a = this.decoding[j]!;
        const b = this.decoding[i]!;
        if (a.generated < b.generated || (a.generated === b.generated && a.inputLen > b.inputLen)) {
          i = j;
        }
      }
      this.newTokenRatio = INIT_NEW_TOKEN_RATIO;
    }
    const r = this.decoding.splice(i, 1)[0]!;
    this.release(r);
    r.phase = 'waiting';
    r.recompute = r.generated;
    r.prefilled = 0;
    r.inTree = 0;
    this.statsData.preempted++;
    if (this.admission === 'optimistic') this.waiting.push(r);
    else this.waiting.unshift(r);
  }

  private orderWaiting(): void {
    if (!this.lpm || this.waiting.length < 2 || this.waiting.length > LPM_MAX_QUEUE) return;
    const keyed = this.waiting.map((r, i) => ({
      r,
      i,
      m: this.cache.match(r.ids.subarray(0, r.inputLen - 1)).matchedTokens,
    }));
    keyed.sort((a, b) => b.m - a.m || a.i - b.i);
    this.waiting = keyed.map((k) => k.r);
  }

  /**
   * Admits what fits and returns the next prefill step (with the running decodes riding
   * along), or null when there is nothing to prefill. Admission happens here, at the step
   * boundary, as in SGLang's get_next_batch_to_run.
   * @internal used by the standalone driver and DpAttentionGroup
   */
  planPrefill(): PrefillPlan | null {
    this.makeDecodeRoom();
    const items: { r: ActiveRequest; n: number }[] = [];
    let budget = this.chunkedPrefillSize;
    if (this.chunked !== null) {
      const r = this.chunked;
      const n = Math.min(r.inputLen + r.recompute - r.prefilled, budget);
      items.push({ r, n });
      budget -= n;
    }
    if (budget > 0 && this.waiting.length > 0) {
      this.orderWaiting();
      let taken = 0;
      let running = this.byId.size - this.waiting.length - this.entering;
      // Room the next step's decodes need, and what optimistic admission keeps for growth.
      let keep = this.growsKv ? this.decoding.length : 0;
      if (this.admission === 'optimistic') keep += this.expectedGrowth();
      if (this.admission === 'preempt') keep += this.capacityTokens * PREEMPT_WATERMARK;
      while (budget > 0 && taken < this.waiting.length && running < this.maxRunning) {
        const r = this.waiting[taken]!;
        if (!this.admit(r, keep)) break;
        taken++;
        running++;
        if (this.admission === 'optimistic') {
          keep += (r.spec.maxNewTokens - r.generated) * this.newTokenRatio;
        }
        const n = Math.min(r.inputLen + r.recompute - r.prefilled, budget);
        items.push({ r, n });
        budget -= n;
      }
      if (taken > 0) this.waiting.splice(0, taken);
    }
    if (items.length === 0) return null;
    // One forward pass: its fixed cost is paid once, each chunk adds its own terms.
    let prefillMs = this.profile.prefillBatchMs(
      items.map((it) => ({ newTokens: it.n, cachedTokens: it.r.prefilled })),
    );
    for (const it of items) {
      prefillMs += it.r.loadMs;
      it.r.loadMs = 0;
    }
    const batch = this.decoding.length;
    let decodeMs = 0;
    if (batch > 0) {
      let ctx = 0;
      for (const r of this.decoding) ctx += r.inputLen + r.generated;
      decodeMs = this.profile.decodeStepMs(batch, ctx);
    }
    const last = items[items.length - 1]!;
    this.chunked = last.r.prefilled + last.n < last.r.inputLen + last.r.recompute ? last.r : null;
    return {
      startMs: this.scheduler.now(),
      items,
      decoders: this.decoding.slice(),
      prefillMs,
      decodeMs,
    };
  }

  /**
   * The running decode batch: size, total context, and steps until its first request ends.
   * @internal
   */
  decodeState(): DecodeState | null {
    const batch = this.decoding.length;
    if (batch === 0) return null;
    let steps = Number.POSITIVE_INFINITY;
    let ctx0 = 0;
    for (const r of this.decoding) {
      const left = r.spec.maxNewTokens - r.generated;
      if (left < steps) steps = left;
      ctx0 += r.inputLen + r.generated;
    }
    if (this.growsKv) steps = Math.min(steps, Math.floor(this.free() / batch));
    return { batch, ctx0, steps: this.coalesce ? Math.max(1, steps) : 1 };
  }

  /** @internal */
  decodeStepMs(state: DecodeState, j: number): number {
    return this.profile.decodeStepMs(state.batch, state.ctx0 + j * state.batch);
  }

  private step(): void {
    const now = this.scheduler.now();
    const plan = this.planPrefill();
    if (plan !== null) {
      this.busy = true;
      this.scheduler.at(now + plan.prefillMs + plan.decodeMs, () => {
        this.applyPrefill(plan);
        this.busy = false;
        this.step();
      });
      return;
    }
    const state = this.decodeState();
    if (state !== null) {
      let ms = 0;
      for (let j = 0; j < state.steps; j++) ms += this.decodeStepMs(state, j);
      this.busy = true;
      const event = this.scheduler.at(now + ms, () => this.endDecodeRun());
      this.run = { t0: now, state, steps: state.steps, event };
      return;
    }
    this.busy = false;
  }

  /** Ends a prefill step: chunks go into the tree, finished prefills emit their first token. @internal */
  applyPrefill(plan: PrefillPlan): void {
    const now = this.scheduler.now();
    this.statsData.events++;
    this.statsData.steps++;
    this.statsData.prefillBusyMs += plan.prefillMs;
    this.statsData.decodeBusyMs += plan.decodeMs;
    if (this.onStep !== null) {
      let tokens = 0;
      for (const it of plan.items) tokens += it.n;
      this.onStep({
        rank: this.rank,
        startMs: plan.startMs,
        endMs: now,
        prefillTokens: tokens,
        prefillChunks: plan.items.length,
        prefillMs: plan.prefillMs,
        decodeBatch: plan.decoders.length,
        decodeSteps: plan.decoders.length > 0 ? 1 : 0,
      });
    }
    for (const { r, n } of plan.items) {
      if (r.phase !== 'prefill') continue;
      const before = r.prefilled;
      r.prefilled += n;
      this.statsData.prefillTokens += n;
      this.moveIntoTree(r, r.ids, Math.min(r.prefilled, r.inputLen));
      // Recomputed output tokens (after a preemption) have no ids to cache: held outside.
      const beyond = r.prefilled - Math.max(r.inputLen, before);
      if (beyond > 0) {
        const k = Math.min(beyond, r.reserved);
        r.reserved -= k;
        this.reservedTotal -= k;
        this.hold(r, beyond);
      }
      if (r.prefilled >= r.inputLen + r.recompute) {
        const first = r.generated === 0;
        if (first) r.spec.onFirstToken?.(now, r.cachedTokens);
        r.spec.onToken?.(r.generated, now);
        this.generate(r, 1);
        if (r.generated >= r.spec.maxNewTokens) this.finish(r, now);
        else {
          r.phase = 'decode';
          this.decoding.push(r);
        }
      }
    }
    if (plan.decoders.length > 0) this.decayRatio(1);
    for (const r of plan.decoders) {
      if (r.phase !== 'decode') continue;
      r.spec.onToken?.(r.generated, now);
      this.generate(r, 1);
      if (r.generated >= r.spec.maxNewTokens) this.finish(r, now);
    }
    this.compactDecoding();
  }

  /** `r` generated `k` tokens: their KV is held outside the tree where KV grows. */
  private generate(r: ActiveRequest, k: number): void {
    r.generated += k;
    if (this.growsKv) this.hold(r, k);
  }

  /** SGLang lowers its output estimate a little with every decode step. */
  private decayRatio(steps: number): void {
    if (this.admission !== 'optimistic' || steps === 0) return;
    this.newTokenRatio = Math.max(
      MIN_NEW_TOKEN_RATIO,
      this.newTokenRatio - NEW_TOKEN_RATIO_DECAY * steps,
    );
  }

  private hold(r: ActiveRequest, k: number): void {
    r.held += k;
    this.heldTotal += k;
  }

  private compactDecoding(): void {
    let w = 0;
    for (const r of this.decoding) if (r.phase === 'decode') this.decoding[w++] = r;
    this.decoding.length = w;
  }

  private cutRun(): void {
    const run = this.run;
    if (run === null) return;
    cutCoalescedRun(
      run,
      this.scheduler,
      (j) => this.decodeStepMs(run.state, j),
      () => this.endDecodeRun(),
    );
  }

  private endDecodeRun(): void {
    const run = this.run!;
    this.run = null;
    this.applyDecode(run.steps, run.t0, (j) => this.decodeStepMs(run.state, j));
    this.busy = false;
    this.step();
  }

  /**
   * Ends `steps` decode steps that started at `t0`; `stepMs(j)` is step j's duration (the
   * group's, under DP attention), used only to time tokens for onToken listeners. @internal
   */
  applyDecode(steps: number, t0: number, stepMs: (j: number) => number): void {
    const now = this.scheduler.now();
    this.statsData.events++;
    this.statsData.steps += steps;
    this.decayRatio(steps);
    this.statsData.decodeBusyMs += now - t0;
    this.onStep?.({
      rank: this.rank,
      startMs: t0,
      endMs: now,
      prefillTokens: 0,
      prefillChunks: 0,
      prefillMs: 0,
      decodeBatch: this.decoding.length,
      decodeSteps: steps,
    });
    let times: number[] | null = null;
    if (this.decoding.some((r) => r.spec.onToken !== undefined)) {
      times = [];
      let t = t0;
      for (let j = 0; j < steps; j++) {
        t += stepMs(j);
        times.push(t);
      }
    }
    for (const r of this.decoding) {
      if (r.phase !== 'decode') continue;
      if (times !== null && r.spec.onToken) {
        for (let j = 0; j < steps; j++) r.spec.onToken(r.generated + j, times[j]!);
      }
      this.generate(r, steps);
      if (r.generated >= r.spec.maxNewTokens) this.finish(r, now);
    }
    this.compactDecoding();
  }

  /** Inserts `ids[0:len]` and moves the request's lock to the new end; frees its reservation. */
  private moveIntoTree(r: ActiveRequest, ids: ArrayLike<number>, len: number): void {
    // Resume from the request's locked node: its path is exactly ids[0:inTree].
    this.holdAt(r, this.cache.insertFrom(r.handle, r.inTree, ids, len), len);
  }

  /** Moves the request's lock to `handle`, which spells its first `len` tokens. */
  private holdAt(r: ActiveRequest, handle: RadixHandle, len: number): void {
    this.cache.lock(handle);
    if (r.handle !== null) this.cache.unlock(r.handle);
    r.handle = handle;
    const inTree = len - (len % this.cache.pageSize);
    const moved = Math.max(0, Math.min(inTree - r.inTree, r.reserved));
    r.inTree = Math.max(r.inTree, inTree);
    r.reserved -= moved;
    this.reservedTotal -= moved;
  }

  private finish(r: ActiveRequest, now: number): void {
    const out = r.spec.outputIds;
    if (out !== undefined) {
      // The request's node already spells ids[0:inTree]: copy only what follows it, so a
      // long prompt with a short reply costs the reply, not the prompt.
      const tail = finishedPath(r.ids, out, r.generated, r.inTree);
      if (tail !== null) {
        this.holdAt(r, this.cache.extend(r.handle, r.inTree, tail), r.inTree + tail.length);
      }
    }
    r.phase = 'done';
    this.release(r);
    this.byId.delete(r.spec.id);
    this.statsData.finished++;
    r.spec.onFinish?.(now, { cachedTokens: r.cachedTokens, outputTokens: r.generated });
  }

  private release(r: ActiveRequest): void {
    if (r.handle !== null) {
      this.cache.unlock(r.handle);
      r.handle = null;
    }
    this.reservedTotal -= r.reserved;
    r.reserved = 0;
    this.heldTotal -= r.held;
    r.held = 0;
  }
}

/**
 * What SGLang caches of a finished request: its input, then its output up to the last
 * sampled token (whose KV was never written); null when the output adds nothing. The rank's
 * own tree, the PD layout's decode offload and the mock worker's all cache this path.
 * `from` > 0 returns only the path's positions from `from` on.
 */
export function finishedPath(
  input: ArrayLike<number>,
  output: ArrayLike<number>,
  generated: number,
  from = 0,
): Uint32Array | null {
  const n = Math.min(output.length, generated - 1);
  if (n <= 0) return null;
  const head = Math.max(0, input.length - from);
  const all = new Uint32Array(head + n);
  if (input instanceof Uint32Array) all.set(input.subarray(from), 0);
  else for (let i = 0; i < head; i++) all[i] = input[from + i]!;
  for (let i = 0; i < n; i++) all[head + i] = output[i]!;
  return all;
}

/** Writes a path into a host or storage tier, making room there first (evicted GPU paths). */
export function writeBack(host: RadixCache, path: Uint32Array): void {
  if (path.length > host.capacity) return;
  // Only the part the host lacks is new; the part it has is kept while making room.
  const { matchedTokens, handle } = host.match(path);
  const over = host.used + path.length - matchedTokens - host.capacity;
  if (over > 0) {
    host.lock(handle);
    host.evict(over);
    host.unlock(handle);
  }
  if (matchedTokens < path.length) host.insertFrom(handle, matchedTokens, path);
}
