// Predicted vs observed, one request at a time: the summaries of both sides are computed by one
// function from the same per-request form, so a difference between the columns is a
// difference in behaviour and never a difference in how two reports define a percentile or a
// time window. `kvroute-validate` (live runs) and `kvroute-sim replay --observed` (recorded
// traces) both compare through this file.
//
// The error column is relative, (predicted - observed) / observed, except for the hit rate,
// where percentage points are what acceptance bounds speak in, so both are shown.
import { percentile as sortedPercentile } from '../metrics/summary.ts';
import { renderTable } from './format.ts';

/** One request's outcome in the common form both sides are summarised from. */
export interface OutcomeRecord {
  id: number;
  ok: boolean;
  startMs: number;
  ttftMs?: number;
  endMs: number;
  promptTokens: number;
  cachedTokens: number;
  rank?: number;
}

export interface Distribution {
  p50: number;
  p90: number;
  p99: number;
  mean: number;
}

export interface RunSummary {
  requests: number;
  ok: number;
  errors: number;
  /** Cached prompt tokens / prompt tokens over successful requests (0..1). */
  hitRate: number;
  promptTokens: number;
  cachedTokens: number;
  /** Over successful requests that produced content; NaN fields when there are none. */
  ttftMs: Distribution;
  e2eMs: Distribution;
  /** Successful requests per second between the first send and the last completion. */
  throughputRps: number;
  durationS: number;
}

/** `p` in 0..100; NaN for no values. The same interpolation as the simulator's summaries. */
export function percentile(values: readonly number[], p: number): number {
  if (values.length === 0) return Number.NaN;
  return sortedPercentile(
    [...values].sort((a, b) => a - b),
    p / 100,
  );
}

export function distribution(values: readonly number[]): Distribution {
  if (values.length === 0)
    return { p50: Number.NaN, p90: Number.NaN, p99: Number.NaN, mean: Number.NaN };
  const s = [...values].sort((a, b) => a - b);
  let sum = 0;
  for (const v of values) sum += v;
  return {
    p50: sortedPercentile(s, 0.5),
    p90: sortedPercentile(s, 0.9),
    p99: sortedPercentile(s, 0.99),
    mean: sum / values.length,
  };
}

export function summarizeOutcomes(records: readonly OutcomeRecord[]): RunSummary {
  const ok = records.filter((r) => r.ok);
  let prompt = 0;
  let cached = 0;
  for (const r of ok) {
    prompt += r.promptTokens;
    cached += Math.min(r.cachedTokens, r.promptTokens);
  }
  const ttfts = ok.filter((r) => r.ttftMs !== undefined).map((r) => r.ttftMs!);
  const e2es = ok.map((r) => r.endMs - r.startMs);
  let first = Number.POSITIVE_INFINITY;
  let last = Number.NEGATIVE_INFINITY;
  for (const r of records) {
    first = Math.min(first, r.startMs);
    last = Math.max(last, r.endMs);
  }
  const durationS = records.length > 0 ? Math.max(0, last - first) / 1000 : 0;
  return {
    requests: records.length,
    ok: ok.length,
    errors: records.length - ok.length,
    hitRate: prompt > 0 ? cached / prompt : 0,
    promptTokens: prompt,
    cachedTokens: cached,
    ttftMs: distribution(ttfts),
    e2eMs: distribution(e2es),
    throughputRps: durationS > 0 ? ok.length / durationS : 0,
    durationS,
  };
}

export interface ComparisonRow {
  key: string;
  label: string;
  unit: 'ratio' | 'ms' | 'rps' | 'count';
  predicted: number;
  observed: number;
  /** (predicted - observed) / observed; NaN when observed is 0 and predicted is not. */
  relError: number;
  /** predicted - observed (for the hit rate: in percentage points). */
  absError: number;
}

export function relativeError(predicted: number, observed: number): number {
  if (observed === predicted) return 0;
  if (observed === 0 || !Number.isFinite(observed)) return Number.NaN;
  return (predicted - observed) / Math.abs(observed);
}

export function compareSummaries(predicted: RunSummary, observed: RunSummary): ComparisonRow[] {
  const row = (
    key: string,
    label: string,
    unit: ComparisonRow['unit'],
    p: number,
    o: number,
  ): ComparisonRow => ({
    key,
    label,
    unit,
    predicted: p,
    observed: o,
    relError: relativeError(p, o),
    absError: unit === 'ratio' ? (p - o) * 100 : p - o,
  });
  return [
    row('hitRate', 'hit rate', 'ratio', predicted.hitRate, observed.hitRate),
    row('ttftP50', 'TTFT p50', 'ms', predicted.ttftMs.p50, observed.ttftMs.p50),
    row('ttftP90', 'TTFT p90', 'ms', predicted.ttftMs.p90, observed.ttftMs.p90),
    row('ttftP99', 'TTFT p99', 'ms', predicted.ttftMs.p99, observed.ttftMs.p99),
    row('ttftMean', 'TTFT mean', 'ms', predicted.ttftMs.mean, observed.ttftMs.mean),
    row('e2eP50', 'e2e latency p50', 'ms', predicted.e2eMs.p50, observed.e2eMs.p50),
    row('throughput', 'throughput', 'rps', predicted.throughputRps, observed.throughputRps),
    row('errors', 'errors', 'count', predicted.errors, observed.errors),
  ];
}

/** Share of requests both sides placed on the same rank, over those where the target said. */
export function rankAgreement(
  predicted: readonly OutcomeRecord[],
  observed: readonly OutcomeRecord[],
): { compared: number; same: number } {
  const byId = new Map<number, number | undefined>();
  for (const r of predicted) byId.set(r.id, r.rank);
  let compared = 0;
  let same = 0;
  for (const o of observed) {
    if (o.rank === undefined) continue;
    const p = byId.get(o.id);
    if (p === undefined) continue;
    compared++;
    if (p === o.rank) same++;
  }
  return { compared, same };
}

export function formatValue(v: number, unit: ComparisonRow['unit']): string {
  if (!Number.isFinite(v)) return '-';
  switch (unit) {
    case 'ratio':
      return `${(v * 100).toFixed(1)}%`;
    case 'ms':
      return Math.abs(v) < 10 ? `${v.toFixed(2)} ms` : `${v.toFixed(0)} ms`;
    case 'rps':
      return `${v.toFixed(3)} req/s`;
    case 'count':
      return String(Math.round(v));
  }
}

function signed(v: number, digits: number): string {
  const s = v.toFixed(digits);
  return v > 0 ? `+${s}` : s;
}

export function formatError(row: ComparisonRow): string {
  if (row.unit === 'count') return row.absError === 0 ? '0' : signed(row.absError, 0);
  const rel = Number.isFinite(row.relError) ? `${signed(row.relError * 100, 1)}%` : '-';
  if (row.unit === 'ratio') {
    if (!Number.isFinite(row.absError)) return '-';
    return `${signed(row.absError, 1)} pt (${rel})`;
  }
  return rel;
}

export function renderComparison(rows: readonly ComparisonRow[], policyLabel: string): string {
  return renderTable(
    ['metric', `predicted (${policyLabel})`, 'observed', 'error'],
    rows.map((r) => [
      r.label,
      formatValue(r.predicted, r.unit),
      formatValue(r.observed, r.unit),
      formatError(r),
    ]),
  );
}
