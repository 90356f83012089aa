// The simulator host: carries out a policy's decisions on simulated ranks. It owns the
// event queue, the load tracker and the ranks; the policy (from @kvroute/policy, used as is)
// only decides. Cluster events kill, revive and add ranks; requests in flight on a rank that
// goes away are re-dispatched and counted as retried; a rank that (re)joins starts cold.
import {
  createDispatcher,
  createLoadTracker,
  type DispatcherConfig,
  type DispatchTicket,
  NoHealthyRankError,
} from '@kvroute/policy';
import type { CostModel } from './cost/cost-model.ts';
import { EventQueue } from './engine/event-queue.ts';
import { DpAttentionGroup } from './entities/dp-attention-group.ts';
import { RankModel, type RankModelOptions, type RankStats } from './entities/rank.ts';
import { round3, summarize } from './metrics/summary.ts';
import type { PolicyRunResult, RankSummary, RequestRecord } from './metrics/types.ts';
import type { ClusterEvent, WorkloadPlan, WorkloadRequest } from './workloads/types.ts';

export type RankOverrides = Partial<
  Pick<
    RankModelOptions,
    'kvCapacityTokens' | 'chunkedPrefillSize' | 'pageSize' | 'schedulePolicy' | 'coalesceDecode'
  >
> & {
  /** Lockstep ranks (DP attention); defaults to the profile's dpAttention. */
  dpAttention?: boolean;
};

export interface SimulateOptions {
  policy: DispatcherConfig;
  /** Rank count; defaults to the plan's. */
  ranks?: number;
  profile: CostModel;
  seed: string | number;
  rank?: RankOverrides;
  /** Called with the fraction done (0..1), at most about 100 times a run. */
  onProgress?(fraction: number): void;
}

interface Flight {
  req: WorkloadRequest;
  inputIds: Uint32Array;
  arrivalMs: number;
  rank: number;
  reason: string;
  attempt: number;
  admitMs: number;
  retries: number;
  /** The open dispatch (holds the rank's load), or null before the first and between retries. */
  ticket: DispatchTicket | null;
}

interface RankSlot {
  model: RankModel | null;
  requests: number;
  /** Counters of models this slot had before (restarts), added to the live one's. */
  past: RankStats | null;
  flights: Set<Flight>;
}

function addStats(a: RankStats | null, b: RankStats): RankStats {
  if (a === null) return { ...b };
  const out = { ...a };
  for (const k of Object.keys(b) as (keyof RankStats)[]) out[k] += b[k];
  return out;
}

function checkRanks(n: unknown, what: string): number {
  if (typeof n !== 'number' || !Number.isInteger(n) || n < 1) {
    throw new RangeError(`${what} must be an integer >= 1, got ${JSON.stringify(n)}`);
  }
  return n;
}

export function simulatePlan(plan: WorkloadPlan, opts: SimulateOptions): PolicyRunResult {
  const numRanks = checkRanks(opts.ranks ?? plan.ranks, 'ranks');
  const dispatcher = createDispatcher(opts.policy);
  const q = new EventQueue();
  const profile = opts.profile;
  const overrides = opts.rank ?? {};
  const capacity = overrides.kvCapacityTokens ?? profile.kvCapacityTokens;
  const tracker = createLoadTracker(numRanks, { kvCapacityTokens: capacity });
  const slots: RankSlot[] = [];
  const { dpAttention = profile.dpAttention === true, ...rankOptions } = overrides;
  const group = dpAttention ? new DpAttentionGroup(q) : null;
  const newModel = (rank: number) =>
    group !== null
      ? group.add({ ...rankOptions, rank, profile })
      : new RankModel({ ...rankOptions, rank, profile, scheduler: q });
  const addSlot = () => {
    const rank = slots.length;
    slots.push({ model: newModel(rank), requests: 0, past: null, flights: new Set() });
  };
  for (let i = 0; i < numRanks; i++) addSlot();

  const records: RequestRecord[] = [];
  const pending: Flight[] = []; // no healthy rank when they arrived
  let attempts = 0;
  let issued = 0;
  const total =
    plan.mode === 'open' ? plan.requests.length : plan.clients.reduce((a, c) => a + c.length, 0);
  let finished = 0;
  let lastProgress = -1;
  const progress = () => {
    if (!opts.onProgress) return;
    let f = total === 0 ? 1 : finished / total;
    if (plan.mode === 'closed' && plan.durationMs !== undefined) {
      f = Math.max(f, Math.min(1, q.now() / plan.durationMs));
    }
    const pct = Math.floor(f * 100);
    if (pct > lastProgress) {
      lastProgress = pct;
      opts.onProgress(f);
    }
  };

  const dispatch = (f: Flight) => {
    let decision: DispatchTicket;
    try {
      decision = dispatcher.begin(
        { inputIds: f.inputIds, routingKey: f.req.routingKey, maxNewTokens: f.req.outputTokens },
        tracker,
        { nowMs: q.now() },
      );
    } catch (err) {
      if (err instanceof NoHealthyRankError) {
        pending.push(f);
        return;
      }
      throw err;
    }
    const slot = slots[decision.rank];
    if (slot?.model == null) {
      throw new Error(`policy chose rank ${decision.rank}, which is not running`);
    }
    f.rank = decision.rank;
    f.reason = decision.reason;
    f.attempt = attempts++;
    f.admitMs = -1;
    f.ticket = decision;
    slot.flights.add(f);
    slot.requests++;
    const attempt = f.attempt;
    let cachedAtFirst = 0;
    let firstMs = 0;
    slot.model.submit({
      id: attempt,
      inputIds: f.inputIds,
      maxNewTokens: f.req.outputTokens,
      outputIds: f.req.outputIds,
      onAdmit: (t) => {
        f.admitMs = t;
      },
      onFirstToken: (t, c) => {
        firstMs = t;
        cachedAtFirst = c;
      },
      onFinish: (t, info) => {
        slot.flights.delete(f);
        f.ticket?.done();
        records.push({
          id: f.req.id,
          clientId: f.req.clientId,
          sessionKey: f.req.sessionKey,
          ...(f.req.tenant !== undefined ? { tenant: f.req.tenant } : {}),
          arrivalMs: f.arrivalMs,
          rank: f.rank,
          reason: f.reason,
          inputTokens: f.inputIds.length,
          cachedTokens: cachedAtFirst,
          outputTokens: info.outputTokens,
          queueMs: f.admitMs - f.arrivalMs,
          ttftMs: firstMs - f.arrivalMs,
          endMs: t,
          retries: f.retries,
        });
        finished++;
        progress();
        onComplete(f.req, t);
      },
    });
  };

  const issue = (req: WorkloadRequest) => {
    issued++;
    const inputIds = req.inputIds; // may be built on read (replay): read once
    dispatch({
      req,
      inputIds,
      arrivalMs: q.now(),
      rank: -1,
      reason: '',
      attempt: -1,
      admitMs: -1,
      retries: 0,
      ticket: null,
    });
  };

  // Closed loop: each client sends its next request think time after the previous completes.
  const nextIndex = new Map<number, number>();
  const clientOf = new Map<WorkloadRequest, number>();
  const startClient = (c: number, idx: number, after: number) => {
    const list = plan.clients[c]!;
    const req = list[idx];
    if (req === undefined) return;
    const at = after + (req.thinkMs ?? 0);
    if (plan.durationMs !== undefined && at > plan.durationMs) return;
    nextIndex.set(c, idx + 1);
    q.at(at, () => issue(req));
  };
  const onComplete = (req: WorkloadRequest, t: number) => {
    if (plan.mode !== 'closed') return;
    const c = clientOf.get(req);
    if (c === undefined) return;
    startClient(c, nextIndex.get(c) ?? 0, t);
  };

  if (plan.mode === 'closed') {
    plan.clients.forEach((list, c) => {
      for (const r of list) clientOf.set(r, c);
      startClient(c, 0, 0);
    });
  } else {
    // One pending arrival at a time keeps the heap small for 10k+ request traces.
    let i = 0;
    const arrive = () => {
      const req = plan.requests[i++]!;
      issue(req);
      const next = plan.requests[i];
      if (next !== undefined) q.at(Math.max(q.now(), next.arrivalMs ?? 0), arrive);
    };
    const first = plan.requests[0];
    if (first !== undefined) q.at(first.arrivalMs ?? 0, arrive);
  }

  // Cluster events.
  const evacuate = (slot: RankSlot): Flight[] => {
    const model = slot.model;
    if (model === null) return [];
    slot.past = addStats(slot.past, model.stats());
    slot.model = null;
    group?.remove(model);
    const moved = [...slot.flights];
    slot.flights.clear();
    for (const f of moved) {
      model.abort(f.attempt);
      f.ticket?.done('aborted');
    }
    return moved;
  };
  const redispatch = (moved: Flight[]) => {
    for (const f of moved) {
      f.retries++;
      dispatch(f);
    }
  };
  const drainPending = () => {
    const waiting = pending.splice(0);
    for (const f of waiting) dispatch(f);
  };
  const applyEvent = (e: ClusterEvent) => {
    if (e.kind === 'set-ranks') {
      const n = checkRanks(e.ranks, `set-ranks event at ${e.atMs} ms: ranks`);
      if (n > slots.length) {
        tracker.resize(n);
        while (slots.length < n) addSlot();
        drainPending();
      } else {
        const removed = slots.splice(n);
        tracker.resize(n);
        const moved: Flight[] = [];
        for (const s of removed) moved.push(...evacuate(s));
        redispatch(moved);
      }
      return;
    }
    const r = e.rank;
    if (typeof r !== 'number' || !Number.isInteger(r) || r < 0 || r >= slots.length) {
      throw new RangeError(
        `${e.kind} event at ${e.atMs} ms: rank must be an integer in [0, ${slots.length}), got ${JSON.stringify(r)}`,
      );
    }
    const slot = slots[r]!;
    if (e.kind === 'rank-down') {
      if (slot.model === null) return;
      tracker.setHealthy(r, false);
      redispatch(evacuate(slot));
    } else if (e.kind === 'rank-up') {
      if (slot.model !== null) return;
      slot.model = newModel(r);
      tracker.setHealthy(r, true);
      drainPending();
    } else {
      throw new RangeError(`unknown cluster event kind '${String((e as ClusterEvent).kind)}'`);
    }
  };
  const events = [...plan.events].sort((a, b) => a.atMs - b.atMs);
  for (const e of events) q.at(e.atMs, () => applyEvent(e));

  q.run();
  // Closed-loop requests never sent (past durationMs) are not failures; sent and unfinished are.
  const failed = issued - finished;
  progress();

  const perRank: RankSummary[] = [];
  let evictedNodes = 0;
  slots.forEach((slot, rank) => {
    let st = slot.past;
    if (slot.model) st = addStats(st, slot.model.stats());
    perRank.push({
      rank,
      requests: slot.requests,
      prefillTokens: st?.prefillTokens ?? 0,
      cachedTokens: st?.cachedTokens ?? 0,
      prefillBusyMs: round3(st?.prefillBusyMs ?? 0),
      decodeBusyMs: round3(st?.decodeBusyMs ?? 0),
      evictedTokens: st?.evictedTokens ?? 0,
    });
    evictedNodes += st?.evictedNodes ?? 0;
  });
  const stats = dispatcher.stats();
  const { method: _m, ...options } = opts.policy as Record<string, unknown>;
  const summary = summarize({
    policy: dispatcher.method,
    options,
    records,
    failed,
    ranks: numRanks,
    perRank,
    reasons: { ...stats.reasons },
    evictedNodes,
    events: q.executed,
    mode: plan.mode,
    durationMs: plan.durationMs,
    warmupMs: plan.warmupMs,
  });
  return { summary, records };
}
