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
// Two ways the previous reply can reach the next turn's prefill (a prefill server never
// generates it, so without them it is a miss there that colocated serving would have hit):
// - kvStore with decodeOffload (SGLang: HiCache with a storage backend on the prefill servers,
//   --disaggregation-decode-enable-offload-kvcache on the decode servers): prefill ranks write
//   each prompt through to a store they share and load from it what their GPU cache lacks
//   (charged at the store's bandwidth, before the first chunk); decode ranks write each
//   finished request's prompt + reply path to it. Written when the request finishes (SGLang
//   offloads by stride during decode and backs up to storage asynchronously: the next turn
//   comes after the agent's tool time, long after).
// - localPrefillTokens (NVIDIA Dynamo's conditional disaggregation; vLLM decode instances):
//   the router picks the decode rank first, cache-aware; when the prompt's part not matched
//   on it is short, the decode rank prefills it itself (it is a full engine: radix cache,
//   chunked prefill mixed into its decode steps) and no prefill rank is involved. Otherwise
//   vLLM's two steps: the prefill rank runs the prompt, the KV crosses the link and lands in
//   the decode rank's cache, which computes the last prompt token itself, then decodes.
//   Decode ranks keep pulled prompts and generated replies cached, which is what local
//   prefills hit.
//
// Ranks are independent servers here (no DP-attention lockstep across them), and the plan's
// cluster events (rank failures, scale-out) are not modelled for this layout: such a plan is
// refused with an error rather than run without its events.
import {
  createDispatcher,
  createLoadTracker,
  type DispatcherConfig,
  type DispatchTicket,
} from '@kvroute/policy';
import { KeyStore } from '../cache/key-store.ts';
import { RadixCache } from '../cache/radix-cache.ts';
import type { CostModel } from '../cost/cost-model.ts';
import {
  checkKvLink,
  DEFAULT_KV_LINK_GBPS,
  type KvLink,
  kvLoadTokensPerMs,
  kvTransferMs,
  profileKvBytesPerToken,
} from '../cost/kv-transfer.ts';
import { EventQueue } from '../engine/event-queue.ts';
import { finishedPath, type HostKvOptions, type StepRecord, writeBack } from '../entities/rank.ts';
import { Cluster, checkRanks, type RankOverrides } from '../host/cluster.ts';
import { driveRequests } from '../host/drive.ts';
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
  /**
   * Conditional disaggregation (NVIDIA Dynamo's): a request whose part not cached on its
   * decode rank is at most this many tokens is prefilled there, not sent to a prefill rank.
   * The decode ranks are then full engines with a prefix cache (vLLM decode instances, see the
   * file header); needs the cache_aware decode method, whose match on the decode rank is the
   * router's estimate of what is cached there. Default: off (every request is disaggregated).
   */
  localPrefillTokens?: number;
  /**
   * A KV store every prefill rank shares (SGLang HiCache with a storage backend on the prefill
   * servers): a prefill rank writes each prompt's KV through to it and loads from it what its
   * own cache lacks, at `gbps`. With `decodeOffload` the decode ranks write every finished
   * request's generated tokens to it too (SGLang's --disaggregation-decode-enable-offload-kvcache),
   * so the next turn's prefill finds the previous reply. Default: no store.
   */
  kvStore?: KvStoreOptions;
  onProgress?(fraction: number): void;
  /** Every prefill rank step (invariant checks). */
  onStep?(step: StepRecord): void;
  /** Every decode run (invariant checks). */
  onDecodeStep?(step: DecodeStepRecord): void;
}

export interface KvStoreOptions {
  /** Store-to-GPU load bandwidth of one prefill rank, Gb/s. */
  gbps: number;
  /** The store's size in tokens (default: unbounded). */
  capacityTokens?: number;
  /** Decode ranks offload what they generated (prompt + reply paths) into the store. */
  decodeOffload: boolean;
}

/** One completed request of a PD run: `rank` is its prefill rank (-1: prefilled locally). */
export interface PdRequestRecord extends RequestRecord {
  decodeRank: number;
  /** Prefilled on its decode rank (conditional disaggregation), not on a prefill rank. */
  local: boolean;
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
  /** Conditional disaggregation's threshold (null: off). */
  localPrefillTokens: number | null;
  /** Requests prefilled on their decode rank, and the prefill-side hit rate of the others. */
  localRequests: number;
  remoteHitRate: number;
  /** The shared KV store, if any, and the prompt tokens prefill ranks loaded from it. */
  kvStore: (Required<KvStoreOptions> & { loadedTokens: number }) | null;
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

const toU32 = (ids: ArrayLike<number>): Uint32Array =>
  ids instanceof Uint32Array ? ids : Uint32Array.from(ids);

/** One request's times, filled in as its events happen. */
interface RequestTimes {
  arrivalMs: number;
  /** Granted KV room on the decode rank. */
  reservedMs: number;
  /** Admitted to the batch that prefills it. */
  admitMs: number;
  prefillDoneMs: number;
  cachedTokens: number;
  kvArrivedMs: number;
  firstMs: number;
}

/** A request prefilled on its decode rank keeps them: no wait for room, no transfer. */
const startTimes = (arrivalMs: number): RequestTimes => ({
  arrivalMs,
  reservedMs: arrivalMs,
  admitMs: arrivalMs,
  prefillDoneMs: arrivalMs,
  cachedTokens: 0,
  kvArrivedMs: arrivalMs,
  firstMs: 0,
});

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
  const refuse = () => {
    throw new Error('the pd layout has no cluster events, so no request is ever moved');
  };
  // The run's own key store: its chunks are sized to this run and go with it.
  const keys = new KeyStore();
  const storeOpts = opts.kvStore;
  let store: RadixCache | null = null;
  let storeHostKv: HostKvOptions | undefined;
  if (storeOpts !== undefined) {
    if (!(storeOpts.gbps > 0) || !Number.isFinite(storeOpts.gbps)) {
      throw new RangeError(`kvStore.gbps must be a finite number > 0, got ${storeOpts.gbps}`);
    }
    const cap = storeOpts.capacityTokens ?? Number.MAX_SAFE_INTEGER;
    if (!Number.isInteger(cap) || cap < 1) {
      throw new RangeError(`kvStore.capacityTokens must be an integer >= 1, got ${cap}`);
    }
    if (opts.rank?.hostKv !== undefined) {
      throw new RangeError(
        'a shared KV store and a per-rank host tier together are not modelled: give one',
      );
    }
    if (opts.localPrefillTokens !== undefined) {
      throw new RangeError(
        'a shared KV store with local prefill on the decode side is not modelled',
      );
    }
    store = new RadixCache({ capacityTokens: cap, pageSize: opts.rank?.pageSize ?? 1, keys });
    storeHostKv = {
      capacityTokens: cap,
      loadTokensPerMs: kvLoadTokensPerMs(storeOpts.gbps, kvBytes),
      shared: store,
    };
  }
  const prefill = new Cluster(
    q,
    opts.profile,
    {
      ...(opts.rank ?? {}),
      keys,
      dpAttention: false,
      ...(storeHostKv !== undefined ? { hostKv: storeHostKv } : {}),
    },
    P,
    prefillTracker,
    {
      redispatch: refuse,
      drainPending: refuse,
      ...(opts.onStep ? { onStep: opts.onStep } : {}),
    },
  );
  const decodeMaxRunning = opts.decodeMaxRunningRequests ?? opts.rank?.maxRunningRequests;
  const localMax = opts.localPrefillTokens;
  if (localMax !== undefined) {
    if (!Number.isInteger(localMax) || localMax < 0) {
      throw new RangeError(`localPrefillTokens must be an integer >= 0, got ${localMax}`);
    }
    if (decodeDispatcher.method !== 'cache_aware') {
      throw new RangeError(
        `local prefill on the decode side needs the cache_aware decode method (its match on the decode rank is what decides), got '${decodeDispatcher.method}'`,
      );
    }
  }
  // With local prefill the decode ranks are full engines (radix cache, chunked prefill,
  // continuous batching): vLLM decode instances, which serve a plain request as any engine
  // and keep pulled KV and generated replies in their prefix cache.
  const engines =
    localMax === undefined
      ? null
      : new Cluster(
          q,
          opts.profile,
          {
            ...(opts.rank ?? {}),
            keys,
            dpAttention: false,
            kvCapacityTokens: decodeCapacity,
            ...(decodeMaxRunning !== undefined ? { maxRunningRequests: decodeMaxRunning } : {}),
          },
          D,
          decodeTracker,
          { redispatch: refuse, drainPending: refuse },
        );
  const decoders = Array.from(
    { length: localMax === undefined ? D : 0 },
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

  let localRequests = 0;

  /**
   * The prefill rank's part of a disaggregated request: the prompt alone (one token), then its
   * KV over that rank's link, transfers queueing first-in first-out; `onKvArrived` once it has
   * crossed.
   */
  const prefillAndTransfer = (
    id: number,
    inputIds: WorkloadRequest['inputIds'],
    pTicket: DispatchTicket,
    times: RequestTimes,
    onKvArrived: () => void,
  ) => {
    prefill.slots[pTicket.rank]!.model!.submit({
      id,
      inputIds,
      maxNewTokens: 1,
      onAdmit: (ta) => {
        times.admitMs = ta;
      },
      onFirstToken: (tf, c) => {
        times.prefillDoneMs = tf;
        times.cachedTokens = c;
      },
      onFinish: (tf) => {
        // HiCache with a storage backend backs the computed prompt up to the store.
        if (store !== null) writeBack(store, toU32(inputIds));
        const p = pTicket.rank;
        const start = Math.max(tf, linkFree[p]!);
        times.kvArrivedMs = start + kvTransferMs(inputIds.length, kvBytes, link);
        linkFree[p] = times.kvArrivedMs;
        q.at(times.kvArrivedMs, () => {
          pTicket.done();
          onKvArrived();
        });
      },
    });
  };

  /** A request's last token: its record (`pTicket` null: prefilled on its decode rank). */
  const finish = (
    req: WorkloadRequest,
    endMs: number,
    outputTokens: number,
    pTicket: DispatchTicket | null,
    dTicket: DispatchTicket,
    local: boolean,
    times: RequestTimes,
  ) => {
    const { arrivalMs } = times;
    const rec: PdRequestRecord = {
      id: req.id,
      clientId: req.clientId,
      sessionKey: req.sessionKey,
      ...(req.tenant !== undefined ? { tenant: req.tenant } : {}),
      arrivalMs,
      rank: pTicket?.rank ?? -1,
      reason: pTicket?.reason ?? `local-${dTicket.reason}`,
      inputTokens: req.inputIds.length,
      cachedTokens: times.cachedTokens,
      outputTokens,
      queueMs: times.admitMs - arrivalMs,
      ttftMs: times.firstMs - arrivalMs,
      endMs,
      retries: 0,
      decodeRank: dTicket.rank,
      local,
      decodeWaitMs: times.reservedMs - arrivalMs,
      prefillDoneMs: times.prefillDoneMs,
      transferMs: times.kvArrivedMs - times.prefillDoneMs,
      itlMs: 0,
    };
    rec.itlMs = recordItlMs(rec);
    driver.complete(req, rec);
  };

  /** Conditional disaggregation: the decode rank first, then where the prefill runs. */
  const sendConditional = (req: WorkloadRequest, engines: Cluster, localMax: number) => {
    const inputIds = req.inputIds;
    const arrivalMs = q.now();
    const route = { inputIds, routingKey: req.routingKey, maxNewTokens: req.outputTokens };
    const dTicket = decodeDispatcher.begin(route, decodeTracker, { nowMs: arrivalMs });
    const dslot = engines.slots[dTicket.rank]!;
    const engine = dslot.model!;
    dslot.requests++;
    decodeRequests[dTicket.rank]!++;
    const id = attempts++;
    const local = inputIds.length - (dTicket.matchedTokens ?? 0) <= localMax;
    const pTicket = local
      ? null
      : prefillDispatcher.begin(route, prefillTracker, { nowMs: arrivalMs });
    const times = startTimes(arrivalMs);
    let landed: ReturnType<typeof engine.landKv> = null;
    const decodeRun = () =>
      engine.submit({
        id,
        inputIds,
        maxNewTokens: req.outputTokens,
        ...(req.outputIds !== undefined ? { outputIds: req.outputIds } : {}),
        onAdmit: (t, c) => {
          if (landed !== null) engine.releaseKv(landed);
          landed = null;
          if (local) {
            times.admitMs = t;
            times.cachedTokens = c;
          }
        },
        onFirstToken: (t) => {
          times.firstMs = t;
        },
        onFinish: (t, info) => {
          dTicket.done();
          if (local) localRequests++;
          finish(req, t, info.outputTokens, pTicket, dTicket, local, times);
        },
      });
    if (pTicket === null) {
      decodeRun();
      return;
    }
    prefill.slots[pTicket.rank]!.requests++;
    // vLLM's two steps: the prefill runs alone (one token); with its answer the decode
    // instance takes the request, pulls the prompt's KV, computes the last prompt token itself
    // and decodes.
    prefillAndTransfer(id, inputIds, pTicket, times, () => {
      landed = engine.landKv(inputIds);
      decodeRun();
    });
  };

  const send = (req: WorkloadRequest) => {
    if (engines !== null) {
      sendConditional(req, engines, localMax as number);
      return;
    }
    const inputIds = req.inputIds;
    const arrivalMs = q.now();
    const route = { inputIds, routingKey: req.routingKey, maxNewTokens: req.outputTokens };
    const pTicket = prefillDispatcher.begin(route, prefillTracker, { nowMs: arrivalMs });
    const dTicket = decodeDispatcher.begin(route, decodeTracker, { nowMs: arrivalMs });
    const decoder = decoders[dTicket.rank]!;
    prefill.slots[pTicket.rank]!.requests++;
    decodeRequests[dTicket.rank]!++;
    const id = attempts++;
    const times = startTimes(arrivalMs);
    decoder.reserve({
      id,
      inputTokens: inputIds.length,
      maxNewTokens: req.outputTokens,
      onReserved: (t) => {
        times.reservedMs = t;
        prefillAndTransfer(id, inputIds, pTicket, times, () => decoder.arrive(id));
      },
      onFirstToken: (t) => {
        times.firstMs = t;
      },
      onFinish: (t, info) => {
        dTicket.done();
        const out = req.outputIds;
        if (store !== null && storeOpts?.decodeOffload === true && out !== undefined) {
          // The decode side offloads the prompt + reply path: the prompt part is already in
          // the store.
          const path = finishedPath(inputIds, out, info.outputTokens);
          if (path !== null) writeBack(store, path);
        }
        finish(req, t, info.outputTokens, pTicket, dTicket, false, times);
      },
    });
  };

  const driver = driveRequests<PdRequestRecord>(plan, q, send, opts);
  const failed = driver.run();
  const records = driver.records;

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
  const decodePerRank =
    engines === null
      ? decoders.map((d, rank) => {
          const s: DecodeRankStats = d.stats();
          return {
            rank,
            requests: decodeRequests[rank]!,
            decodeBusyMs: round3(s.decodeBusyMs),
            steps: s.steps,
            peakReservedTokens: s.peakReservedTokens,
          };
        })
      : engines.slots.map((slot, rank) => {
          const s = slot.model!.stats();
          return {
            rank,
            requests: decodeRequests[rank]!,
            // A full engine: its local prefills are busy time on the decode GPU too.
            decodeBusyMs: round3(s.decodeBusyMs + s.prefillBusyMs),
            steps: s.steps,
            peakReservedTokens: 0,
          };
        });
  const remote = records.filter((r) => !r.local);
  const remoteInput = remote.reduce((a, r) => a + r.inputTokens, 0);
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
    localPrefillTokens: localMax ?? null,
    kvStore:
      storeOpts === undefined
        ? null
        : {
            gbps: storeOpts.gbps,
            capacityTokens: storeOpts.capacityTokens ?? Number.MAX_SAFE_INTEGER,
            decodeOffload: storeOpts.decodeOffload,
            loadedTokens: prefill.slots.reduce(
              (a, sl) => a + (sl.model?.stats().hostLoadedTokens ?? 0),
              0,
            ),
          },
    localRequests,
    remoteHitRate:
      remoteInput === 0
        ? 0
        : Math.round((remote.reduce((a, r) => a + r.cachedTokens, 0) / remoteInput) * 1e4) / 1e4,
  };
  return { summary, pd, records, meanInSystem: driver.meanInSystem() };
}
