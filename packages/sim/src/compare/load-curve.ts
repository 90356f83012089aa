// Policies against offered load: the same requests sent open loop at several rates (Poisson,
// multiples of the scenario's own pace), TTFT p50/p99 and throughput per policy at each, and
// the loads between which the best policy changes. A recommendation holds for the load range
// it was measured over, and this names that range.
import type { CostModel } from '../cost/cost-model.ts';
import type { PolicyRunSummary, RequestRecord } from '../metrics/types.ts';
import { simulatePlan } from '../simulate.ts';
import type { WorkloadPlan } from '../workloads/types.ts';

export interface LoadPoint {
  /** Multiple of the scenario's own pace. */
  multiplier: number;
  /** Offered requests per second. */
  rateRps: number;
  rows: { policy: string; ttftP50: number; ttftP99: number; throughputRps: number }[];
}

export type LoadMetric = 'ttftP50' | 'ttftP99' | 'throughputRps';

export interface Crossover {
  metric: LoadMetric;
  /** The best policy changes between these two adjacent load multipliers. */
  from: number;
  to: number;
  before: string;
  after: string;
}

export interface LoadCurve {
  id: string;
  title: string;
  baseRateRps: number;
  points: LoadPoint[];
  crossovers: Crossover[];
  /** The best policy per metric and the multipliers it is best at. */
  best: { metric: LoadMetric; policy: string; multipliers: number[] }[];
}

const lowerIsBetter = (m: LoadMetric) => m !== 'throughputRps';

export function bestAt(point: LoadPoint, metric: LoadMetric): string {
  const sorted = [...point.rows].sort((a, b) =>
    lowerIsBetter(metric) ? a[metric] - b[metric] : b[metric] - a[metric],
  );
  return sorted[0]!.policy;
}

/** The scenario's own pace: requests over the span of their send times in a round_robin run. */
export function basePace(plan: WorkloadPlan, profile: CostModel, seed: string | number): number {
  const { records } = simulatePlan(plan, { policy: { method: 'round_robin' }, profile, seed });
  return paceOf(records);
}

/** Requests per second over the span of the records' send times (1 when they span nothing). */
export function paceOf(records: readonly Pick<RequestRecord, 'arrivalMs'>[]): number {
  let first = Number.POSITIVE_INFINITY;
  let last = 0;
  for (const r of records) {
    first = Math.min(first, r.arrivalMs);
    last = Math.max(last, r.arrivalMs);
  }
  return last > first ? ((records.length - 1) * 1000) / (last - first) : 1;
}

/** A rate as the curve reports it (the run itself uses the unrounded rate). */
export const loadRate = (base: number, multiplier: number): number => base * multiplier;

/**
 * The curve from its runs: `summaries[i][j]` is policy `methods[j]` at `multipliers[i]` times
 * the pace `base`. Names the crossovers and the best policy per metric.
 */
export function loadCurveFrom(o: {
  id: string;
  title: string;
  base: number;
  methods: readonly string[];
  multipliers: readonly number[];
  summaries: readonly (readonly PolicyRunSummary[])[];
}): LoadCurve {
  const base = o.base;
  const points: LoadPoint[] = o.multipliers.map((m, i) => ({
    multiplier: m,
    rateRps: Math.round(loadRate(base, m) * 1000) / 1000,
    rows: o.methods.map((method, j) => {
      const summary = o.summaries[i]?.[j] as PolicyRunSummary;
      return {
        policy: method,
        ttftP50: summary.ttftMs.p50,
        ttftP99: summary.ttftMs.p99,
        throughputRps: summary.throughputRps,
      };
    }),
  }));
  const crossovers: Crossover[] = [];
  const best: LoadCurve['best'] = [];
  for (const metric of ['ttftP50', 'ttftP99', 'throughputRps'] as const) {
    const winners = points.map((p) => bestAt(p, metric));
    for (let i = 1; i < points.length; i++) {
      if (winners[i] !== winners[i - 1]) {
        crossovers.push({
          metric,
          from: points[i - 1]!.multiplier,
          to: points[i]!.multiplier,
          before: winners[i - 1]!,
          after: winners[i]!,
        });
      }
    }
    for (const policy of new Set(winners)) {
      best.push({
        metric,
        policy,
        multipliers: points.filter((_, i) => winners[i] === policy).map((p) => p.multiplier),
      });
    }
  }
  return {
    id: o.id,
    title: o.title,
    baseRateRps: Math.round(base * 1000) / 1000,
    points,
    crossovers,
    best,
  };
}
