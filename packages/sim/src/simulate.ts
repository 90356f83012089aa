// The simulator host: carries out a policy's decisions on simulated ranks. Wiring over named
// parts: arrivals (host/arrivals.ts: when requests are sent; host/drive.ts records what
// completes, as every host does), the request host
// (host/requests.ts: dispatch, submit, records), the cluster (host/cluster.ts: ranks and
// cluster events). The policy (from @kvroute/policy, used as is) only decides.
import {
  createDispatcher,
  createLoadTracker,
  type DispatcherConfig,
  type PrefixDigests,
} from '@kvroute/policy';
import { KeyStore } from './cache/key-store.ts';
import type { CostModel } from './cost/cost-model.ts';
import { EventQueue } from './engine/event-queue.ts';
import type { RankModel, StepRecord } from './entities/rank.ts';
import { Cluster, checkRanks, type RankOverrides } from './host/cluster.ts';
import { driveRequests } from './host/drive.ts';
import { INDEX_SOURCES, type IndexSource, SimKvEvents } from './host/kv-events.ts';
import { createRequestHost } from './host/requests.ts';
import { RecordColumns } from './metrics/record-columns.ts';
import { summarize } from './metrics/summary.ts';
import type { PolicyRunResult, RequestRecord } from './metrics/types.ts';
import type { WorkloadPlan } from './workloads/types.ts';

export type { RankOverrides } from './host/cluster.ts';

export interface SimulateOptions {
  policy: DispatcherConfig;
  /** Rank count; defaults to the plan's. */
  ranks?: number;
  profile: CostModel;
  seed: string | number;
  rank?: RankOverrides;
  /** Client concurrency cap (benchmark clients' --max-concurrency); default none. */
  maxConcurrency?: number;
  /** Called with the fraction done (0..1), at most about 100 times a run. */
  onProgress?(fraction: number): void;
  /** Every rank step as it ends (invariant checks, step-level metrics). */
  onStep?(step: StepRecord): void;
  /**
   * Router replicas in front of the ranks (default 1): each its own dispatcher and in-flight
   * counts, requests spread over them round-robin. With the learned index each replica sees
   * only its own decisions (the replica penalty); with events they share one index.
   */
  replicas?: number;
  /** Where the cache index comes from: 'learned' (default), 'events' (after eventLagMs), 'oracle'. */
  indexSource?: IndexSource;
  /**
   * Delay from a rank's cache change to the router's index (events), ms: one constant
   * (default 5), or measured lags each batch draws one of (seeded; a rank's batches stay in
   * order).
   */
  eventLagMs?: number | readonly number[];
  /** Tokens per KV event block. Default 16. */
  eventBlockSize?: number;
  /**
   * Hot reloads: from `atMs` on, requests are routed with `policy` (a new dispatcher; requests
   * in flight keep their tickets, so load accounting carries over), as the router switches.
   */
  policySwitches?: readonly { atMs: number; policy: DispatcherConfig }[];
  /**
   * With replicas: each replica polls the ranks' request counts this often (ms) and adds the
   * requests the others sent, as of its last poll, to its own (the router's
   * --load-poll-interval); 0: always current. Default: no polling, a replica sees only its own
   * requests.
   */
  loadPollMs?: number;
  /**
   * Prefix digests shared with other simulations of the same plan (host/prefix-digests.ts):
   * a sweep's cells hash each request's prefix once instead of once a cell.
   */
  prefixDigests?: PrefixDigests;
}

export function simulatePlan(plan: WorkloadPlan, opts: SimulateOptions): PolicyRunResult {
  const numRanks = checkRanks(opts.ranks ?? plan.ranks, 'ranks');
  const dispatcher = createDispatcher(opts.policy);
  const q = new EventQueue();
  const capacity = opts.rank?.kvCapacityTokens ?? opts.profile.kvCapacityTokens;
  const tracker = createLoadTracker(numRanks, { kvCapacityTokens: capacity });
  const replicaCount = checkRanks(opts.replicas ?? 1, 'replicas');
  const source = opts.indexSource ?? 'learned';
  if (!INDEX_SOURCES.includes(source)) {
    throw new RangeError(
      `indexSource must be one of ${INDEX_SOURCES.join(', ')}, got ${JSON.stringify(source)}`,
    );
  }
  const replicas =
    replicaCount === 1
      ? [{ dispatcher, tracker }]
      : Array.from({ length: replicaCount }, () => ({
          dispatcher: createDispatcher(opts.policy),
          tracker: createLoadTracker(numRanks, { kvCapacityTokens: capacity }),
        }));
  const retiredReasons: Record<string, number> = {};
  // The plan's policy-switch events (--switch-policy, a recorded trace's switches) are hot
  // reloads as policySwitches are.
  const planSwitches = plan.events
    .filter((e) => e.kind === 'policy-switch')
    .map((e) => {
      if (!e.policy || typeof e.policy.method !== 'string') {
        throw new RangeError(`policy-switch event at ${e.atMs} ms: needs a policy with a method`);
      }
      return { atMs: e.atMs, policy: e.policy as DispatcherConfig };
    });
  for (const sw of [...(opts.policySwitches ?? []), ...planSwitches]) {
    const next = createDispatcher(sw.policy);
    q.at(sw.atMs, () => {
      for (const r of replicas) {
        for (const [k, v] of Object.entries(r.dispatcher.stats().reasons)) {
          retiredReasons[k] = (retiredReasons[k] ?? 0) + v;
        }
        r.dispatcher = replicas.length === 1 ? next : createDispatcher(sw.policy);
      }
    });
  }
  const kvEvents =
    source === 'learned'
      ? undefined
      : new SimKvEvents(
          q,
          source === 'oracle' ? 0 : (opts.eventLagMs ?? 5),
          opts.eventBlockSize,
          opts.seed,
        );

  const requests = createRequestHost({
    q,
    dispatcher,
    tracker,
    cluster: () => cluster,
    replicas,
    ...(kvEvents ? { kvIndex: kvEvents.index } : {}),
    ...(opts.loadPollMs !== undefined ? { loadPollMs: opts.loadPollMs } : {}),
    ...(opts.prefixDigests ? { prefixDigests: opts.prefixDigests } : {}),
    onDone: (record, req) => driver.complete(req, record),
  });
  // The run's own key store: its chunks are sized to this run and go with it.
  const rankOptions = { ...(opts.rank ?? {}), keys: new KeyStore() };
  const cluster = new Cluster(q, opts.profile, rankOptions, numRanks, tracker, {
    redispatch: (moved) => requests.redispatch(moved),
    drainPending: () => requests.drainPending(),
    ...(opts.onStep ? { onStep: opts.onStep } : {}),
    ...(kvEvents
      ? { onModel: (rank: number, model: RankModel) => kvEvents.attach(rank, model) }
      : {}),
  });
  const driver = driveRequests<RequestRecord, RecordColumns>(
    plan,
    q,
    (req) => requests.send(req),
    opts,
    new RecordColumns(),
  );
  cluster.schedule(plan.events);

  const failed = driver.run();
  const records = driver.records;

  const { perRank, evictedNodes } = cluster.summaries();
  const reasons: Record<string, number> = { ...retiredReasons };
  for (const r of replicas) {
    for (const [k, v] of Object.entries(r.dispatcher.stats().reasons)) {
      reasons[k] = (reasons[k] ?? 0) + v;
    }
  }
  const { method: _m, ...options } = opts.policy as Record<string, unknown>;
  const summary = summarize({
    policy: dispatcher.method,
    options,
    records,
    failed,
    ranks: numRanks,
    perRank,
    reasons,
    evictedNodes,
    events: q.executed,
    mode: plan.mode,
    durationMs: plan.durationMs,
    warmupMs: plan.warmupMs,
  });
  return withRecords(summary, records, driver.meanInSystem());
}

/**
 * The result with `records` made from the run's columns on first read (then kept as a plain
 * property): a caller that wants only the summary never builds one object per request. The
 * property is own and enumerable, so a spread, JSON or a message to another thread carries
 * the records as before.
 */
function withRecords(
  summary: PolicyRunResult['summary'],
  columns: RecordColumns,
  meanInSystem: number,
): PolicyRunResult {
  // Keys in the order they always had (summary, records, meanInSystem).
  const result = { summary, records: [] as RequestRecord[], meanInSystem };
  const keep = (value: RequestRecord[]) =>
    Object.defineProperty(result, 'records', {
      value,
      enumerable: true,
      configurable: true,
      writable: true,
    });
  return Object.defineProperty(result, 'records', {
    enumerable: true,
    configurable: true,
    get: () => keep(columns.toArray()).records,
    set: keep,
  });
}
