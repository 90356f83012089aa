// Turns request records and per-rank counters into a PolicyRunSummary. Knows nothing of the
// engine: it works on plain records, so other hosts (validate) can reuse it.
import { RecordColumns } from './record-columns.ts';
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

/** The rows of `rows` (or 0..rows-1) that `keep`, in order. */
function rowsWhere(rows: Uint32Array | number, keep: (row: number) => boolean): Uint32Array {
  const n = typeof rows === 'number' ? rows : rows.length;
  const row = typeof rows === 'number' ? (k: number) => k : (k: number) => rows[k]!;
  let count = 0;
  for (let k = 0; k < n; k++) if (keep(row(k))) count++;
  const out = new Uint32Array(count);
  let o = 0;
  for (let k = 0; k < n; k++) if (keep(row(k))) out[o++] = row(k);
  return out;
}

export function subsetLatency(values: ArrayLike<number>): SubsetLatency | null {
  return values.length === 0 ? null : { ...latencyStats(values), count: values.length };
}

export interface SummaryInput {
  policy: string;
  options: Record<string, unknown>;
  /** Completed requests, as objects or as the columns a run keeps. */
  records: readonly RequestRecord[] | RecordColumns;
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
  const recs = RecordColumns.of(input.records);
  const n = recs.length;
  const id = recs.column('id');
  const arrival = recs.column('arrivalMs');
  const end = recs.column('endMs');
  const inputTokens = recs.column('inputTokens');
  const cachedTokens = recs.column('cachedTokens');
  const outputTokens = recs.column('outputTokens');
  const ttft = recs.column('ttftMs');
  // Record indexes by arrival, ties by id (a stable sort: equal keys keep completion order).
  const byArrival = Uint32Array.from({ length: n }, (_, i) => i).sort(
    (a, b) => arrival[a]! - arrival[b]! || id[a]! - id[b]!,
  );
  let inTok = 0;
  let cached = 0;
  let firstArrival = Number.POSITIVE_INFINITY;
  let lastEnd = 0;
  for (let i = 0; i < n; i++) {
    inTok += inputTokens[i]!;
    cached += cachedTokens[i]!;
    if (arrival[i]! < firstArrival) firstArrival = arrival[i]!;
    if (end[i]! > lastEnd) lastEnd = end[i]!;
  }
  const span = n === 0 ? 0 : lastEnd - firstArrival;

  let windowStart = firstArrival;
  let windowEnd = lastEnd;
  if (input.mode === 'closed' && input.durationMs !== undefined) {
    windowStart = input.warmupMs ?? 0;
    windowEnd = input.durationMs;
  }
  let done = 0;
  let winIn = 0;
  let winOut = 0;
  for (let i = 0; i < n; i++) {
    if (end[i]! >= windowStart && end[i]! <= windowEnd) {
      done++;
      winIn += inputTokens[i]!;
      winOut += outputTokens[i]!;
    }
  }
  const windowS = (windowEnd - windowStart) / 1000;
  const perS = (v: number) => (windowS > 0 ? round3(v / windowS) : 0);

  // Plain loops: Float64Array.from(rows, fn) and a typed array's filter() go through an
  // iterator or a list of boxed values, ~9 MB at the end of a long replay, when the heap is
  // at its largest.
  const ttftOf = (rows: ArrayLike<number>) => {
    const out = new Float64Array(rows.length);
    for (let k = 0; k < rows.length; k++) out[k] = ttft[rows[k]!]!;
    return out;
  };
  const warmupMs = input.warmupMs;
  const steady =
    warmupMs !== undefined
      ? rowsWhere(byArrival, (i) => arrival[i]! >= warmupMs)
      : byArrival.subarray(input.ranks);
  const cold = rowsWhere(n, (i) => cachedTokens[i] === 0);
  const retries = recs.column('retries');
  let retried = 0;
  for (let i = 0; i < n; i++) if (retries[i]! > 0) retried++;
  const prefill = input.perRank.map((r) => r.prefillTokens);
  const meanPrefill = prefill.reduce((a, b) => a + b, 0) / Math.max(1, prefill.length);
  const maxPrefill = Math.max(0, ...prefill);
  return {
    policy: input.policy,
    options: input.options,
    requests: n,
    failed: input.failed,
    retried,
    hitRate: inTok === 0 ? 0 : Math.round((cached / inTok) * 1e6) / 1e6,
    ttftMs: latencyStats(ttft),
    coldTtftMs: subsetLatency(ttftOf(cold)),
    steadyTtftMs: subsetLatency(ttftOf(steady)),
    warmupTtftMs: subsetLatency(ttftOf(byArrival.subarray(0, input.ranks))),
    throughputRps: perS(done),
    throughputTokPerS: perS(winIn + winOut),
    inputTokPerS: perS(winIn),
    outputTokPerS: perS(winOut),
    imbalance: meanPrefill > 0 ? round3(maxPrefill / meanPrefill) : 1,
    evictions: input.perRank.reduce((a, r) => a + r.evictedTokens, 0),
    evictedNodes: input.evictedNodes,
    queueingMs: latencyStats(recs.column('queueMs')),
    perRank: input.perRank,
    reasons: input.reasons,
    durationMs: round3(span),
    events: input.events,
  };
}
