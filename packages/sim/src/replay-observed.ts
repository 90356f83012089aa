// Predicted vs observed on a trace the router recorded: replays the traffic under the setting it
// was recorded with (method, options and rank count from the trace's start line, policy
// switches where the router switched) and compares each request's prediction with what the
// router observed, through the same summaries and comparison rows as `kvroute-validate` uses
// for live runs. What the router did not observe is left out of both sides, never read as 0:
// requests without a reported cached-token count leave the hit rate, non-streamed requests
// (their first byte is the whole response) leave TTFT.
import type { DispatcherConfig } from '@kvroute/policy';
import type { CostModel } from './cost/cost-model.ts';
import type { RequestRecord } from './metrics/types.ts';
import {
  type ComparisonRow,
  compareSummaries,
  type OutcomeRecord,
  type RunSummary,
  rankAgreement,
  relativeError,
  summarizeOutcomes,
} from './report/observed-comparison.ts';
import { type RankOverrides, simulatePlan } from './simulate.ts';
import type { RecordedTrace, WorkloadPlan } from './workloads/types.ts';

export class ObservedReplayError extends Error {
  readonly code = 'REPLAY_OBSERVED';
}

export interface ObservedReplayOptions {
  profile: CostModel;
  seed: string | number;
  /** The policy to predict with; default the recorded one (with its switches). */
  policy?: DispatcherConfig;
  ranks?: number;
  rank?: RankOverrides;
}

export interface ObservedRequestRow {
  id: number;
  /** Line of the trace file. */
  line: number;
  predicted?: { rank: number; ttftMs: number; e2eMs: number; cachedTokens: number };
  observed: { rank?: number; ttftMs?: number; e2eMs?: number; cachedTokens?: number; ok: boolean };
}

export interface ObservedReplayResult {
  /** The setting predicted with, e.g. `cache_aware {"window":64}` (+ switches). */
  policyLabel: string;
  policy: DispatcherConfig;
  switches: { atMs: number; policy: DispatcherConfig }[];
  ranks: number;
  predicted: RunSummary;
  observed: RunSummary;
  comparison: ComparisonRow[];
  rankAgreement: { compared: number; same: number };
  /** Requests whose hit rate / TTFT could be compared (observed cached tokens / a streamed first byte). */
  compared: { hitRate: number; ttft: number; requests: number; failedLive: number };
  notes: string[];
  perRequest: ObservedRequestRow[];
}

export function recordedPolicy(trace: RecordedTrace): DispatcherConfig {
  const { method, options } = trace.start;
  if (method === undefined) {
    throw new ObservedReplayError(
      "the trace's start line names no method: give the policy it was recorded with (--policies NAME)",
    );
  }
  return options !== undefined && Object.keys(options).length > 0
    ? { method, options: { ...options } }
    : { method };
}

export function policyText(p: DispatcherConfig): string {
  const { method, ...rest } = p;
  const opts = { ...((rest.options as Record<string, unknown>) ?? {}) };
  for (const [k, v] of Object.entries(rest)) if (k !== 'options') opts[k] = v;
  return Object.keys(opts).length > 0 ? `${method} ${JSON.stringify(opts)}` : String(method);
}

const ok = (status: number | undefined) => status === undefined || (status >= 200 && status < 300);

/** Replays a recorded trace's plan and compares the prediction with the observations. */
export function replayObserved(
  plan: WorkloadPlan,
  opts: ObservedReplayOptions,
): ObservedReplayResult {
  const trace = plan.recorded;
  if (trace === undefined) {
    throw new ObservedReplayError(
      'not a recorded trace (no start event line): it holds no observations to compare with; record one with kvroute-router --record-trace',
    );
  }
  const notes: string[] = [];
  const g = trace.group;
  if (g !== undefined) {
    notes.push(
      `worker group ${g.name}: ${g.requests} of ${g.of} requests, on ranks ${g.ranks.join(',')} of the recording (replayed as ranks 0..${g.ranks.length - 1}; a rank of the group that served none of them is not known)${g.unassigned > 0 ? `; ${g.unassigned} request(s) of no known group left out` : ''}`,
    );
  }
  const overridden = opts.policy !== undefined;
  const policy = opts.policy ?? recordedPolicy(trace);
  const switches = overridden
    ? []
    : trace.switches.map((s) => ({
        atMs: s.timestamp,
        policy: (Object.keys(s.options).length > 0
          ? { method: s.method, options: { ...s.options } }
          : { method: s.method }) as DispatcherConfig,
      }));
  if (overridden && trace.switches.length > 0) {
    notes.push(
      `${trace.switches.length} recorded policy switch(es) ignored: the whole trace is predicted with the given policy`,
    );
  }
  for (const s of switches) notes.push(`policy switch at ${s.atMs} ms: ${policyText(s.policy)}`);
  if (trace.closedLoop > 0) {
    notes.push(
      `${trace.closedLoop} of ${trace.lines.length} requests replayed closed loop: each sent its recorded think gap after the predicted end of its session's previous turn (openLoop: at recorded times)`,
    );
  }
  if (trace.speedup !== 1) {
    notes.push(
      `arrivals sped up ${trace.speedup}x: the prediction is for more load than was observed, so TTFT and throughput errors are not the model's alone`,
    );
  }
  if (trace.start.sampleRate !== undefined && trace.start.sampleRate < 1) {
    notes.push(
      `the recording kept ${trace.start.sampleRate * 100}% of requests: the replay sees that share of the load and of the cache reuse`,
    );
  }
  const ranks = opts.ranks ?? plan.ranks;
  const run = simulatePlan(plan, {
    policy,
    ranks,
    profile: opts.profile,
    seed: opts.seed,
    ...(opts.rank ? { rank: opts.rank } : {}),
    ...(switches.length > 0 ? { policySwitches: switches } : {}),
  });
  const byId = new Map<number, RequestRecord>(run.records.map((r) => [r.id, r]));

  const predicted: OutcomeRecord[] = [];
  const observed: OutcomeRecord[] = [];
  const perRequest: ObservedRequestRow[] = [];
  // Hit rate over requests whose cached tokens the worker reported, on both sides.
  const hitPred: OutcomeRecord[] = [];
  const hitObs: OutcomeRecord[] = [];
  let ttftCompared = 0;
  let nonStream = 0;
  let failedLive = 0;
  plan.requests.forEach((req, i) => {
    const line = trace.lines[i]!;
    const o = line.observed ?? {};
    const startMs = req.arrivalMs ?? 0;
    const p = byId.get(req.id);
    const pr: OutcomeRecord = p
      ? {
          id: req.id,
          ok: true,
          startMs: p.arrivalMs,
          endMs: p.endMs,
          promptTokens: p.inputTokens,
          cachedTokens: p.cachedTokens,
          rank: p.rank,
        }
      : { id: req.id, ok: false, startMs, endMs: startMs, promptTokens: 0, cachedTokens: 0 };
    const streamed = o.stream !== false;
    if (p && streamed) pr.ttftMs = p.ttftMs;
    const or: OutcomeRecord = {
      id: req.id,
      ok: ok(o.status) && o.e2eMs !== undefined,
      startMs,
      endMs: startMs + (o.e2eMs ?? 0),
      promptTokens: line.inputLength,
      cachedTokens: o.cachedTokens ?? 0,
      ...(o.rank !== undefined ? { rank: o.rank } : {}),
    };
    if (o.ttftMs !== undefined && streamed) {
      or.ttftMs = o.ttftMs;
      if (pr.ttftMs !== undefined && or.ok) ttftCompared++;
    }
    if (!or.ok) {
      // Failed or abandoned live (a 5xx, a 499): the simulation completes every request, so
      // counted on the predicted side alone it would read as throughput, TTFT and e2e the
      // router never saw. Left out of both columns, as the hit rate leaves out what was not
      // reported; the simulation still runs it (it held its rank live too).
      failedLive++;
    } else {
      predicted.push(pr);
      observed.push(or);
      if (!streamed) nonStream++;
    }
    if (o.cachedTokens !== undefined && or.ok) {
      hitPred.push(pr);
      hitObs.push(or);
    }
    perRequest.push({
      id: req.id,
      line: line.line,
      ...(p
        ? {
            predicted: {
              rank: p.rank,
              ttftMs: p.ttftMs,
              e2eMs: p.endMs - p.arrivalMs,
              cachedTokens: p.cachedTokens,
            },
          }
        : {}),
      observed: {
        ok: or.ok,
        ...(o.rank !== undefined ? { rank: o.rank } : {}),
        ...(o.ttftMs !== undefined ? { ttftMs: o.ttftMs } : {}),
        ...(o.e2eMs !== undefined ? { e2eMs: o.e2eMs } : {}),
        ...(o.cachedTokens !== undefined ? { cachedTokens: o.cachedTokens } : {}),
      },
    });
  });
  if (plan.requests.length === 0) throw new ObservedReplayError('the trace has no request lines');
  if (failedLive > 0) {
    notes.push(
      `${failedLive} of ${plan.requests.length} request(s) failed or were abandoned live (status not 2xx, e.g. 499, 5xx) and are left out of both columns`,
    );
  }
  if (observed.length === 0) {
    throw new ObservedReplayError(
      `none of the trace's ${plan.requests.length} requests succeeded live: nothing to compare`,
    );
  }
  const predSummary = summarizeOutcomes(predicted);
  const obsSummary = summarizeOutcomes(observed);
  const comparison = compareSummaries(predSummary, obsSummary);
  const hitRow = comparison.find((r) => r.key === 'hitRate')!;
  if (hitObs.length < observed.length) {
    const hp = summarizeOutcomes(hitPred).hitRate;
    const ho = summarizeOutcomes(hitObs).hitRate;
    Object.assign(hitRow, {
      predicted: hp,
      observed: ho,
      relError: relativeError(hp, ho),
      absError: (hp - ho) * 100,
    });
    notes.push(
      `hit rate over the ${hitObs.length} of ${observed.length} requests whose worker reported cached tokens`,
    );
  }
  if (hitObs.length === 0) {
    hitRow.observed = Number.NaN;
    hitRow.relError = Number.NaN;
    hitRow.absError = Number.NaN;
  }
  if (nonStream > 0) {
    notes.push(
      `${nonStream} non-streamed request(s) left out of TTFT: their first byte is the whole response`,
    );
  }
  const failedPred = predicted.filter((r) => !r.ok).length;
  if (failedPred > 0) notes.push(`${failedPred} request(s) did not complete in the simulation`);
  const switchText = switches.length > 0 ? ` (+${switches.length} switch)` : '';
  return {
    policyLabel: `${policyText(policy)}${switchText}`,
    policy,
    switches,
    ranks,
    predicted: predSummary,
    observed: obsSummary,
    comparison,
    rankAgreement: rankAgreement(predicted, observed),
    compared: {
      hitRate: hitObs.length,
      ttft: ttftCompared,
      requests: observed.length,
      failedLive,
    },
    notes,
    perRequest,
  };
}

/** How far a prediction on the recorded setting was from what was observed: a sweep's confidence. */
export interface Confidence {
  /** The recorded setting it was measured on. */
  setting: string;
  requests: number;
  /** predicted - observed, percentage points (NaN when no cached tokens were observed). */
  hitRatePt: number;
  /** (predicted - observed) / observed. */
  ttftP50: number;
  ttftP99: number;
  text: string;
}

export function confidenceOf(r: ObservedReplayResult): Confidence {
  const row = (k: string) => r.comparison.find((c) => c.key === k)!;
  const hit = row('hitRate').absError;
  const p50 = row('ttftP50').relError;
  const p99 = row('ttftP99').relError;
  const sign = (v: number, d: number) => (v > 0 ? '+' : '') + v.toFixed(d);
  const pt = Number.isFinite(hit) ? `${sign(hit, 1)} pt` : 'not observed';
  const rel = (v: number) => (Number.isFinite(v) ? `${sign(v * 100, 1)}%` : 'not observed');
  return {
    setting: r.policyLabel,
    requests: r.compared.requests,
    hitRatePt: hit,
    ttftP50: p50,
    ttftP99: p99,
    text: `Confidence: on the setting the trace was recorded with (${r.policyLabel}, ${r.compared.requests} requests) the prediction was off by ${pt} hit rate, ${rel(p50)} TTFT p50, ${rel(p99)} TTFT p99. These errors are over what the router measured (hit rate: ${r.compared.hitRate} requests whose worker reported cached tokens; TTFT: ${r.compared.ttft} streamed requests), as replay --observed compares them; the grid's and the router config's predictions are over all ${r.compared.requests + r.compared.failedLive} requests, first-token times of non-streamed ones included, so they differ from replay --observed's predicted column for the same setting.`,
  };
}
