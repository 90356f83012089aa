// The prefill/decode-disaggregated layout: P prefill servers, D decode servers, one router.
//
// A request's path, as SGLang's PD router and servers run it:
// 1. The router picks a prefill rank with the prefill method (cache-aware: the prefix cache
//    lives on the prefill side) and a decode rank with the decode method (load), both at
//    arrival, from two independent dispatchers (the same @kvroute/policy code the router runs).
// 2. The decode rank preallocates KV for the whole prompt and the output (queueing in arrival
//    order while full); only then may the prefill start (bootstrap handshake).
// 3. The prefill rank (a RankModel: radix cache, continuous batching, chunked prefill) prefills
//    the prompt and samples the first token; it caches the prompt only, since the reply is
//    generated on the decode side and never reaches the prefill server's tree.
// 4. The KV of every prompt token (cached prefix included) goes over the prefill rank's link:
//    kvTransferMs, transfers from one prefill rank queueing first-in first-out on its link.
// 5. The decode rank takes the request in at its next step boundary and emits the first
//    token; the client sees every token from the decode side (SGLang's router streams the
//    decode server's response), so TTFT = prefill wait + prefill + transfer + decode join.
//
// Ranks are independent servers here (no DP-attention lockstep across them), and the plan's
// cluster events (rank failures, scale-out) are not modelled for this layout: such a plan is
// refused with an error rather than run without its events.
import { createDispatcher, createLoadTracker, type DispatcherConfig } from '@kvroute/policy';
import type { CostModel } from '../cost/cost-model.ts';
import {
  checkKvLink,
  DEFAULT_KV_LINK_GBPS,
  type KvLink,
  kvTransferMs,
  profileKvBytesPerToken,
} from '../cost/kv-transfer.ts';
import { EventQueue } from '../engine/event-queue.ts';
import type { StepRecord } from '../entities/rank.ts';
import { progressReporter, scheduleArrivals } from '../host/arrivals.ts';
import { Cluster, checkRanks, type RankOverrides } from '../host/cluster.ts';
import { latencyStats, round3, summarize } from '../metrics/summary.ts';
import type { LatencyStats, PolicyRunSummary, RequestRecord } from '../metrics/types.ts';
import type { WorkloadPlan, WorkloadRequest } from '../workloads/types.ts';
import { DecodeRankModel, type DecodeRankStats, type DecodeStepRecord } from './decode-rank.ts';

export interface PdSimulateOptions {
  /** Method picking the prefill rank (a cache-aware one, e.g. cache_aware or prefix_match). */
  prefillPolicy: DispatcherConfig;
  /** Method picking the decode rank (a load one, e.g. total_tokens or round_robin). */
  decodePolicy: DispatcherConfig;
  prefillRanks: number;
  decodeRanks: number;
  profile: CostModel;
  /** Prefill-to-decode link; default DEFAULT_KV_LINK_GBPS and the default setup. */
  link?: KvLink;
  seed: string | number;
  /** Prefill ranks' settings (admission, KV pool, ...); dpAttention is refused. */
  rank?: RankOverrides;
  /** Decode ranks' KV pool in tokens; default the prefill ranks' (the same GPUs). */
  decodeKvCapacityTokens?: number;
  /** Decode ranks' --max-running-requests; default the prefill ranks' or unbounded. */
  decodeMaxRunningRequests?: number;
  maxConcurrency?: number;
  onProgress?(fraction: number): void;
  /** Every prefill rank step (invariant checks). */
  onStep?(step: StepRecord): void;
  /** Every decode run (invariant checks). */
  onDecodeStep?(step: DecodeStepRecord): void;
}

/** One completed request of a PD run: `rank` is its prefill rank. */
export interface PdRequestRecord extends RequestRecord {
  decodeRank: number;
  /** Arrival to the decode rank's KV room being granted (0 when there was room). */
  decodeWaitMs: number;
  /** When the prefill rank sampled the first token. */
  prefillDoneMs: number;
  /** Prefill done to KV arrived on the decode rank (link queueing + transfer). */
  transferMs: number;
  /** Mean time between the request's tokens after the first (0 for one-token replies). */
  itlMs: number;
}

export interface DecodeRankSummary {
  rank: number;
  requests: number;
  decodeBusyMs: number;
  steps: number;
  peakReservedTokens: number;
}

export interface PdSummary {
  layout: 'pd';
  prefillRanks: number;
  decodeRanks: number;
  gpus: number;
  link: Required<KvLink>;
  prefillPolicy: string;
  decodePolicy: string;
  /** Per-request mean inter-token latency, over requests with more than one output token. */
  itlMs: LatencyStats;
  /** Link queueing + transfer time per request. */
  transferMs: LatencyStats;
  /** Wait for decode KV room per request. */
  decodeWaitMs: LatencyStats;
  decodePerRank: DecodeRankSummary[];
}

export interface PdRunResult {
  /** The usual run summary; `perRank`, `imbalance` and `ranks` are the prefill side's. */
  summary: PolicyRunSummary;
  pd: PdSummary;
  records: PdRequestRecord[];
  meanInSystem: number;
}

/** Mean inter-token latency of one record: the decode span over its tokens after the first. */
export function recordItlMs(r: RequestRecord): number {
  if (r.outputTokens <= 1) return 0;
  return (r.endMs - r.arrivalMs - r.ttftMs) / (r.outputTokens - 1);
}

/** Requests in the system (sent, not completed), integrated over time: Little's L. */
class Occupancy {
  private n = 0;
  private last = 0;
  private area = 0;
  private first = Number.NaN;
  constructor(private readonly now: () => number) {}
  change(delta: number): void {
    const t = this.now();
    if (Number.isNaN(this.first)) this.first = t;
    this.area += this.n * (t - this.last);
    this.last = t;
    this.n += delta;
  }
  mean(): number {
    const span = this.last - this.first;
    return span > 0 ? this.area / span : 0;
  }
}

export function simulatePd(plan: WorkloadPlan, opts: PdSimulateOptions): PdRunResult {
  const P = checkRanks(opts.prefillRanks, 'prefill ranks');
  const D = checkRanks(opts.decodeRanks, 'decode ranks');
  if (plan.events.length > 0) {
    throw new RangeError(
      `the pd layout does not model cluster events (rank failures, scale-out); scenario '${plan.scenario}' has ${plan.events.length}`,
    );
  }
  if (opts.rank?.dpAttention === true) {
    throw new RangeError('the pd layout models independent servers: dpAttention is not supported');
  }
  const link = checkKvLink({ gbps: DEFAULT_KV_LINK_GBPS, ...(opts.link ?? {}) });
  const kvBytes = profileKvBytesPerToken(opts.profile);
  const q = new EventQueue();
  const prefillDispatcher = createDispatcher(opts.prefillPolicy);
  const decodeDispatcher = createDispatcher(opts.decodePolicy);
  const prefillCapacity = opts.rank?.kvCapacityTokens ?? opts.profile.kvCapacityTokens;
  const decodeCapacity = opts.decodeKvCapacityTokens ?? prefillCapacity;
  const prefillTracker = createLoadTracker(P, { kvCapacityTokens: prefillCapacity });
  const decodeTracker = createLoadTracker(D, { kvCapacityTokens: decodeCapacity });
  const occupancy = new Occupancy(() => q.now());
  const records: PdRequestRecord[] = [];
  const refuse = () => {
    throw new Error('the pd layout has no cluster events, so no request is ever moved');
  };
  const prefill = new Cluster(
    q,
    opts.profile,
    { ...(opts.rank ?? {}), dpAttention: false },
    P,
    prefillTracker,
    {
      redispatch: refuse,
      drainPending: refuse,
      ...(opts.onStep ? { onStep: opts.onStep } : {}),
    },
  );
  const decodeMaxRunning = opts.decodeMaxRunningRequests ?? opts.rank?.maxRunningRequests;
  const decoders = Array.from(
    { length: D },
    (_, rank) =>
      new DecodeRankModel({
        rank,
        profile: opts.profile,
        scheduler: q,
        kvCapacityTokens: decodeCapacity,
        ...(decodeMaxRunning !== undefined ? { maxRunningRequests: decodeMaxRunning } : {}),
        ...(opts.onDecodeStep ? { onStep: opts.onDecodeStep } : {}),
      }),
  );
  const linkFree = new Array<number>(P).fill(0);
  const decodeRequests = new Array<number>(D).fill(0);
  let attempts = 0;

  const send = (req: WorkloadRequest) => {
    const inputIds = req.inputIds;
    const arrivalMs = q.now();
    const route = { inputIds, routingKey: req.routingKey, maxNewTokens: req.outputTokens };
    const pTicket = prefillDispatcher.begin(route, prefillTracker, { nowMs: arrivalMs });
    const dTicket = decodeDispatcher.begin(route, decodeTracker, { nowMs: arrivalMs });
    const slot = prefill.slots[pTicket.rank]!;
    const model = slot.model!;
    const decoder = decoders[dTicket.rank]!;
    slot.requests++;
    decodeRequests[dTicket.rank]!++;
    const id = attempts++;
    let reservedMs = arrivalMs;
    let admitMs = arrivalMs;
    let prefillDoneMs = 0;
    let cached = 0;
    let kvArrivedMs = 0;
    let firstMs = 0;
    decoder.reserve({
      id,
      inputTokens: inputIds.length,
      maxNewTokens: req.outputTokens,
      onReserved: (t) => {
        reservedMs = t;
        model.submit({
          id,
          inputIds,
          maxNewTokens: 1,
          onAdmit: (ta) => {
            admitMs = ta;
          },
          onFirstToken: (tf, c) => {
            prefillDoneMs = tf;
            cached = c;
          },
          onFinish: (tf) => {
            const p = pTicket.rank;
            const start = Math.max(tf, linkFree[p]!);
            kvArrivedMs = start + kvTransferMs(inputIds.length, kvBytes, link);
            linkFree[p] = kvArrivedMs;
            q.at(kvArrivedMs, () => {
              pTicket.done();
              decoder.arrive(id);
            });
          },
        });
      },
      onFirstToken: (t) => {
        firstMs = t;
      },
      onFinish: (t, info) => {
        dTicket.done();
        const rec: PdRequestRecord = {
          id: req.id,
          clientId: req.clientId,
          sessionKey: req.sessionKey,
          ...(req.tenant !== undefined ? { tenant: req.tenant } : {}),
          arrivalMs,
          rank: pTicket.rank,
          reason: pTicket.reason,
          inputTokens: inputIds.length,
          cachedTokens: cached,
          outputTokens: info.outputTokens,
          queueMs: admitMs - arrivalMs,
          ttftMs: firstMs - arrivalMs,
          endMs: t,
          retries: 0,
          decodeRank: dTicket.rank,
          decodeWaitMs: reservedMs - arrivalMs,
          prefillDoneMs,
          transferMs: kvArrivedMs - prefillDoneMs,
          itlMs: 0,
        };
        rec.itlMs = recordItlMs(rec);
        records.push(rec);
        occupancy.change(-1);
        progress();
        arrivals.complete(req, t);
      },
    });
  };

  const arrivals = scheduleArrivals(
    plan,
    q,
    (req) => {
      occupancy.change(1);
      send(req);
    },
    { maxConcurrency: opts.maxConcurrency },
  );
  const progress = progressReporter(plan, q, arrivals, () => records.length, opts.onProgress);
  q.run();
  const failed = arrivals.issued + arrivals.held + arrivals.stranded - records.length;
  progress();

  const { perRank, evictedNodes } = prefill.summaries();
  const reasons = { ...prefillDispatcher.stats().reasons };
  const { method: _m, ...options } = opts.prefillPolicy as Record<string, unknown>;
  const summary = summarize({
    policy: prefillDispatcher.method,
    options,
    records,
    failed,
    ranks: P,
    perRank,
    reasons,
    evictedNodes,
    events: q.executed,
    mode: plan.mode,
    durationMs: plan.durationMs,
    warmupMs: plan.warmupMs,
  });
  // A decode rank's busy time includes nothing of prefill: add it to the prefill side's
  // perRank would mix two GPUs' clocks, so the decode side has its own table.
  const decodePerRank = decoders.map((d, rank) => {
    const s: DecodeRankStats = d.stats();
    return {
      rank,
      requests: decodeRequests[rank]!,
      decodeBusyMs: round3(s.decodeBusyMs),
      steps: s.steps,
      peakReservedTokens: s.peakReservedTokens,
    };
  });
  const pd: PdSummary = {
    layout: 'pd',
    prefillRanks: P,
    decodeRanks: D,
    gpus: P + D,
    link,
    prefillPolicy: prefillDispatcher.method,
    decodePolicy: decodeDispatcher.method,
    itlMs: latencyStats(records.filter((r) => r.outputTokens > 1).map((r) => r.itlMs)),
    transferMs: latencyStats(records.map((r) => r.transferMs)),
    decodeWaitMs: latencyStats(records.map((r) => r.decodeWaitMs)),
    decodePerRank,
  };
  return { summary, pd, records, meanInSystem: occupancy.mean() };
}
