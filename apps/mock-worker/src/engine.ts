// The worker's engine without HTTP: one @kvroute/sim RankModel per internal DP rank, an
// internal @kvroute/policy dispatcher in front of them (as SGLang's DP controller), and the
// real-time scheduler that drives them. The HTTP layer (app.ts) only parses, calls start()
// and formats what the callbacks report.
import {
  createDispatcher,
  createLoadTracker,
  type Dispatcher,
  type LoadTracker,
} from '@kvroute/policy';
import {
  type CostModel,
  getProfile,
  loadProfileFile,
  RadixCache,
  RankModel,
} from '@kvroute/sim/model';
import type { ResolvedOptions } from './options.ts';
import { kvLoadTokensPerMs, profileKvBytesPerToken } from './pd/kv-transfer.ts';
import { RealtimeScheduler } from './scheduler.ts';

export interface EngineRequest {
  inputIds: Uint32Array;
  /** >= 1 (the RankModel always produces the first token with the prefill). */
  maxNewTokens: number;
  routingKey?: string;
  routedRank?: number;
  bootstrapRoom?: number;
  /**
   * The tokens this request will generate, when a client can send them back as the next turn's
   * prompt (token-id prompts): cached with the prompt when it finishes, as SGLang caches a
   * finished request's input + output.
   */
  outputIds?: ArrayLike<number>;
}

export interface EngineCallbacks {
  onFirstToken?(cachedTokens: number): void;
  onToken?(index: number): void;
  onFinish?(info: { cachedTokens: number; outputTokens: number }): void;
}

export interface EngineHandle {
  readonly id: string;
  readonly rank: number;
  readonly reason: string;
  /** Drops the request from its rank (frees its KV and load); false if it already finished. */
  abort(): boolean;
}

export interface RankLoadInfo {
  dp_rank: number;
  num_running_reqs: number;
  num_waiting_reqs: number;
  num_used_tokens: number;
  max_total_num_tokens: number;
}

export class MockEngine {
  readonly scheduler: RealtimeScheduler;
  readonly ranks: RankModel[];
  readonly dispatcher: Dispatcher;
  readonly tracker: LoadTracker;
  readonly profile: CostModel;
  readonly kvCapacity: number;
  readonly chunkedPrefillSize: number;
  /**
   * With a shared KV store (prefill role, --kv-store): what this worker knows the store holds,
   * the ranks' host tier. Loads from it are charged at --kv-store-gbps; the PD role fills it
   * from the store before a request starts.
   */
  readonly storeView: RadixCache | null;
  private nextId = 0;

  constructor(readonly opts: ResolvedOptions) {
    this.profile = opts.profileFile ? loadProfileFile(opts.profileFile) : getProfile(opts.profile);
    this.kvCapacity = opts.kvCapacity ?? this.profile.kvCapacityTokens;
    this.chunkedPrefillSize = opts.chunkedPrefillSize ?? this.profile.chunkedPrefillSize;
    this.scheduler = new RealtimeScheduler(opts.timeScale);
    this.storeView =
      opts.role === 'prefill' && opts.kvStore !== undefined
        ? new RadixCache({ capacityTokens: Number.MAX_SAFE_INTEGER, pageSize: opts.pageSize })
        : null;
    const storeView = this.storeView;
    const hostKv =
      storeView === null
        ? undefined
        : {
            capacityTokens: storeView.capacity,
            loadTokensPerMs: kvLoadTokensPerMs(
              opts.kvStoreGbps,
              profileKvBytesPerToken(this.profile),
            ),
            shared: storeView,
          };
    this.ranks = Array.from(
      { length: opts.dpSize },
      (_, rank) =>
        new RankModel({
          rank,
          profile: this.profile,
          scheduler: this.scheduler,
          kvCapacityTokens: this.kvCapacity,
          chunkedPrefillSize: this.chunkedPrefillSize,
          pageSize: opts.pageSize,
          // Instant mode needs no per-step events; in real time one event per decode step is
          // what makes a stream emit its tokens one by one instead of in bursts.
          coalesceDecode: opts.timeScale === 0,
          ...(hostKv !== undefined ? { hostKv } : {}),
        }),
    );
    this.dispatcher = createDispatcher({
      ...opts.policyOptions,
      method: opts.loadBalanceMethod,
    });
    this.tracker = createLoadTracker(opts.dpSize, { kvCapacityTokens: this.kvCapacity });
  }

  /** Requests submitted and not yet finished or aborted (the dispatcher's in-flight counts). */
  get activeRequests(): number {
    return this.tracker.ranks.reduce((n, r) => n + r.inFlightRequests, 0);
  }

  start(req: EngineRequest, cb: EngineCallbacks): EngineHandle {
    // An EngineRequest is a policy RouteRequest (absent hints are undefined) plus maxNewTokens.
    // The ticket holds the request's load on its rank until finish or abort.
    const ticket = this.dispatcher.begin(req, this.tracker, { nowMs: this.scheduler.now() });
    const rank = ticket.rank;
    const model = this.ranks[rank] as RankModel;
    const id = `mock-${this.nextId++}`;
    const complete = (outcome?: 'aborted' | 'failed') => ticket.done(outcome);
    try {
      model.submit({
        id,
        inputIds: req.inputIds,
        maxNewTokens: req.maxNewTokens,
        ...(req.outputIds !== undefined ? { outputIds: req.outputIds } : {}),
        onFirstToken: (_t, cached) => cb.onFirstToken?.(cached),
        onToken: (index) => cb.onToken?.(index),
        onFinish: (_t, info) => {
          complete();
          cb.onFinish?.(info);
        },
      });
    } catch (err) {
      complete('failed');
      throw err;
    }
    return {
      id,
      rank,
      reason: ticket.reason,
      abort: () => {
        if (!ticket.open) return false;
        model.abort(id);
        return complete('aborted');
      },
    };
  }

  loads(): RankLoadInfo[] {
    return this.ranks.map((r, i) => {
      const l = r.load();
      return {
        dp_rank: i,
        num_running_reqs: l.runningRequests,
        num_waiting_reqs: l.waitingRequests,
        num_used_tokens: l.usedTokens,
        max_total_num_tokens: l.capacityTokens,
      };
    });
  }

  /** Empties every rank's radix cache (SGLang's /flush_cache); false, and nothing done, while busy. */
  flushCache(): boolean {
    if (this.activeRequests > 0) return false;
    for (const r of this.ranks) r.cache.reset();
    this.storeView?.reset();
    return true;
  }

  close(): void {
    this.scheduler.close();
  }
}
