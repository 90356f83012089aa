// rank-failure: the agentic workload (multi-turn sessions over Zipf tenants' system + tools
// prefixes) on 16 ranks, where one rank dies mid-run and returns later with an empty cache
//. Shows how many sessions each method moves when a rank disappears (ideally only
// the dead rank's, ~1/N, spread over the survivors) and when it returns, and what that costs
// in hit rate and TTFT. Event times are fractions of the span over which sessions start, so
// they stay mid-run whatever the sizes.
import { agentic } from './agentic.ts';
import { optInt, optNum, WorkloadOptionError } from './options.ts';
import type { ClusterEvent, ScenarioDefinition, WorkloadPlan } from './types.ts';

/** Time the last session starts (closed loop: its first request's delay from t=0). */
export function lastSessionStartMs(plan: WorkloadPlan): number {
  let last = 0;
  for (const c of plan.clients) last = Math.max(last, c[0]?.thinkMs ?? 0);
  for (const r of plan.requests) last = Math.max(last, r.arrivalMs ?? 0);
  return last;
}

/** The agentic options this scenario and scale-out pass through. */
export function agenticOptions(o: Record<string, unknown>): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const key of Object.keys(agentic.defaults)) if (key in o) out[key] = o[key];
  return out;
}

/**
 * agentic's defaults with more, longer-lived sessions (longer think times, same request rate
 * order), so ~100 sessions are live across a cluster change and keys-moved is not a handful.
 * Shared by rank-failure and scale-out.
 */
export const CLUSTER_CHANGE_SESSIONS: Readonly<Record<string, unknown>> = {
  ...agentic.defaults,
  sessions: 400,
  sessionsPerS: 1.5,
  thinkMinMs: 3000,
  thinkMaxMs: 12000,
};

export const rankFailure: ScenarioDefinition = {
  name: 'rank-failure',
  description:
    'agentic sessions on 16 ranks; one rank dies mid-run (its requests retried) and returns later with an empty cache',
  defaults: {
    ...CLUSTER_CHANGE_SESSIONS,
    failRank: 3,
    /** Fractions of the session-arrival span. */
    downAt: 0.35,
    upAt: 0.7,
  },
  build(o, seed) {
    const name = 'rank-failure';
    const plan = agentic.build(agenticOptions(o), seed);
    const failRank = optInt(name, o, 'failRank', 0);
    const downAt = optNum(name, o, 'downAt', 0);
    const upAt = optNum(name, o, 'upAt', 0);
    if (failRank >= plan.ranks) {
      throw new WorkloadOptionError(
        `${name}: failRank must be < ranks (${plan.ranks}), got ${failRank}`,
      );
    }
    if (upAt < downAt) throw new WorkloadOptionError(`${name}: upAt must be >= downAt`);
    const span = lastSessionStartMs(plan);
    const events: ClusterEvent[] = [
      { atMs: Math.round(span * downAt), kind: 'rank-down', rank: failRank },
      { atMs: Math.round(span * upAt), kind: 'rank-up', rank: failRank },
    ];
    return { ...plan, scenario: name, events };
  },
};
