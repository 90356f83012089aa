// A request inside one rank: what SGLang's scheduler tracks per request (Req), reduced to
// what timing and cache accounting need.
import type { RadixHandle } from '../cache/radix-cache.ts';
import type { ScheduledEvent } from '../engine/event-queue.ts';

export interface RankRequest {
  id: number | string;
  inputIds: ArrayLike<number>;
  maxNewTokens: number;
  /**
   * The tokens the model "generates", when the workload knows them (a multi-turn session
   * whose next turn carries this reply). They are inserted into the radix cache at the end,
   * as SGLang caches a finished request's input + output; without them only the input is.
   */
  outputIds?: ArrayLike<number>;
  /** Admission into a prefill batch: the prefix match happened, queueing ended. */
  onAdmit?(timeMs: number, cachedTokens: number): void;
  onFirstToken?(timeMs: number, cachedTokens: number): void;
  onToken?(index: number, timeMs: number): void;
  onFinish?(timeMs: number, info: { cachedTokens: number; outputTokens: number }): void;
}

export type RequestPhase = 'waiting' | 'prefill' | 'decode' | 'done' | 'aborted';

export class ActiveRequest {
  phase: RequestPhase = 'waiting';
  /** Prefix found in the cache at admission: SGLang's meta_info.cached_tokens. */
  cachedTokens = 0;
  /** Tokens whose KV exists (cached + prefilled so far). */
  prefilled = 0;
  /** Tokens of this request's path that are in the tree and locked by it. */
  inTree = 0;
  handle: RadixHandle | null = null;
  /** KV tokens reserved outside the tree: uncached input not yet inserted + max new tokens. */
  reserved = 0;
  generated = 0;
  /** Output tokens to recompute after a preemption (prefilled after the input). */
  recompute = 0;
  /** KV of generated or recomputed tokens held outside the tree (growing admission modes). */
  held = 0;
  /** Host-tier load-back time still to charge to this request's next prefill step. */
  loadMs = 0;
  /** Times admitted (> 1 after a preemption). */
  admissions = 0;
  /** The pending end of the per-request overhead, while the request is not yet queued. */
  entry: ScheduledEvent | null = null;
  readonly inputLen: number;
  readonly ids: Uint32Array;

  constructor(
    readonly spec: RankRequest,
    readonly submitMs: number,
  ) {
    const raw = spec.inputIds;
    this.ids = raw instanceof Uint32Array ? raw : Uint32Array.from(raw as ArrayLike<number>);
    this.inputLen = this.ids.length;
  }
}
