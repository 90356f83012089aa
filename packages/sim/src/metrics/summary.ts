// Turns request records and per-rank counters into a PolicyRunSummary. Knows nothing of the
// engine: it works on plain records, so other hosts (validate) can reuse it.
import type {
  LatencyStats,
  PolicyRunSummary,
  RankSummary,
  RequestRecord,
  SubsetLatency,
} from './types.ts';

/** Linear interpolation between closest ranks (numpy's default); NaN-free for empty input. */
export function percentile(sorted: ArrayLike<number>, q: number): number {
  if (sorted.length === 0) return 0;
  const pos = (sorted.length - 1) * q;
  const lo = Math.floor(pos);
  const hi = Math.ceil(pos);
  const a = sorted[lo]!;
  return a + (sorted[hi]! - a) * (pos - lo);
}

/** Rounds to 1e-3 so JSON stays readable; deterministic because inputs are. */
export function round3(v: number): number {
  return Math.round(v * 1000) / 1000;
}

export function latencyStats(values: ArrayLike<number>): LatencyStats {
  // A typed array sorts numerically in place: an array sorted with a comparator is copied
  // into a work array of boxed numbers (~24 bytes a value, at the end of a run when the
  // heap is at its largest).
  const s = Float64Array.from(values).sort();
  let sum = 0;
  for (let i = 0; i < s.length; i++) sum += s[i]!;
  const mean = s.length === 0 ? 0 : sum / s.length;
  return {
    p50: round3(percentile(s, 0.5)),
    p90: round3(percentile(s, 0.9)),
    p99: round3(percentile(s, 0.99)),
    mean: round3(mean),
  };
}

export function subsetLatency(values: readonly number[]): SubsetLatency | null {
  return values.length === 0 ? null : { ...latencyStats(values), count: values.length };
}

export interface SummaryInput {
  policy: string;
  options: Record<string, unknown>;
  records: readonly RequestRecord[];
  failed: number;
  ranks: number;
  perRank: RankSummary[];
  reasons: Record<string, number>;
  evictedNodes: number;
  events: number;
  mode: 'closed' | 'open';
  durationMs?: number;
  warmupMs?: number;
}

export function summarize(input: SummaryInput): PolicyRunSummary {
  const recs = input.records;
  const byArrival = [...recs].sort((a, b) => a.arrivalMs - b.arrivalMs || a.id - b.id);
  let inTok = 0;
  let cached = 0;
  let firstArrival = Number.POSITIVE_INFINITY;
  let lastEnd = 0;
  for (const r of recs) {
    inTok += r.inputTokens;
    cached += r.cachedTokens;
    if (r.arrivalMs < firstArrival) firstArrival = r.arrivalMs;
    if (r.endMs > lastEnd) lastEnd = r.endMs;
  }
  const span = recs.length === 0 ? 0 : lastEnd - firstArrival;

  let windowStart = firstArrival;
  let windowEnd = lastEnd;
  if (input.mode === 'closed' && input.durationMs !== undefined) {
    windowStart = input.warmupMs ?? 0;
    windowEnd = input.durationMs;
  }
  let done = 0;
  let winIn = 0;
  let winOut = 0;
  for (const r of recs) {
    if (r.endMs >= windowStart && r.endMs <= windowEnd) {
      done++;
      winIn += r.inputTokens;
      winOut += r.outputTokens;
    }
  }
  const windowS = (windowEnd - windowStart) / 1000;
  const perS = (v: number) => (windowS > 0 ? round3(v / windowS) : 0);

  const steady =
    input.warmupMs !== undefined
      ? byArrival.filter((r) => r.arrivalMs >= input.warmupMs!)
      : byArrival.slice(input.ranks);
  const prefill = input.perRank.map((r) => r.prefillTokens);
  const meanPrefill = prefill.reduce((a, b) => a + b, 0) / Math.max(1, prefill.length);
  const maxPrefill = Math.max(0, ...prefill);
  return {
    policy: input.policy,
    options: input.options,
    requests: recs.length,
    failed: input.failed,
    retried: recs.filter((r) => r.retries > 0).length,
    hitRate: inTok === 0 ? 0 : Math.round((cached / inTok) * 1e6) / 1e6,
    ttftMs: latencyStats(recs.map((r) => r.ttftMs)),
    coldTtftMs: subsetLatency(recs.filter((r) => r.cachedTokens === 0).map((r) => r.ttftMs)),
    steadyTtftMs: subsetLatency(steady.map((r) => r.ttftMs)),
    warmupTtftMs: subsetLatency(byArrival.slice(0, input.ranks).map((r) => r.ttftMs)),
    throughputRps: perS(done),
    throughputTokPerS: perS(winIn + winOut),
    inputTokPerS: perS(winIn),
    outputTokPerS: perS(winOut),
    imbalance: meanPrefill > 0 ? round3(maxPrefill / meanPrefill) : 1,
    evictions: input.perRank.reduce((a, r) => a + r.evictedTokens, 0),
    evictedNodes: input.evictedNodes,
    queueingMs: latencyStats(recs.map((r) => r.queueMs)),
    perRank: input.perRank,
    reasons: input.reasons,
    durationMs: round3(span),
    events: input.events,
  };
}
