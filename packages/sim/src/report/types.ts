// The report shapes the CLI prints, writes as JSON/CSV and draws as HTML. The JSON keys
// are a public contract (documented in the package README, "JSON output"): add keys,
// never rename or remove them.

/** Latency summary in milliseconds. */
export interface LatencyStats {
  p50: number;
  p90: number;
  p99: number;
  mean: number;
}

/** A latency summary over a subset of requests (cold or steady-state), with its size. */
export interface SubsetLatency extends LatencyStats {
  count: number;
}

export interface RankLoad {
  rank: number;
  requests: number;
  /** Input tokens this rank had to prefill (input minus cached). */
  prefillTokens: number;
  /** Input tokens this rank served from its radix cache. */
  cachedTokens: number;
}

/** One policy's results on one workload. */
export interface PolicyReport {
  /** Method name as given on the command line (SGLang naming), e.g. `prefix_match`. */
  policy: string;
  /** The dispatcher options this run used, minus `method` (window, prefixLength, affinity...). */
  options: Record<string, unknown>;
  /** Requests that completed. */
  requests: number;
  /** Cached input tokens / input tokens over all completed requests (0..1). */
  hitRate: number;
  ttftMs: LatencyStats;
  /** Requests that found nothing cached. Null when no request was cold. */
  coldTtftMs: SubsetLatency | null;
  /** Requests after the warm-up (seed scenarios: after the first request of each prefix). Null when not defined for the scenario. */
  steadyTtftMs: SubsetLatency | null;
  throughputRps: number;
  /** Input + output tokens per simulated second. */
  throughputTokPerS: number;
  /** Busiest rank's prefill tokens / mean over ranks (1 = perfectly even). */
  imbalance: number;
  /** Tokens evicted from radix caches over the run. */
  evictions: number;
  /** Time from arrival to the start of the request's first prefill chunk. */
  queueingMs: LatencyStats;
  perRank: RankLoad[];
  /** Decisions per reason (`prefix-hash`, `round-robin`, `affinity`, ...). */
  reasons: Record<string, number>;
  /** Simulated span from the first arrival to the last completion. */
  durationMs: number;
}

export interface RunReport {
  format: 'kvroute-sim-report/v1';
  command: 'run' | 'replay';
  scenario: string;
  /** Scenario options as passed (`--set`, replay file, speed-up). */
  scenarioOptions: Record<string, unknown>;
  ranks: number;
  profile: string;
  seed: string | number;
  policies: PolicyReport[];
  /** Trace lines skipped with --skip-invalid (replay only). */
  skippedLines?: number;
}

export type SweepObjective = 'ttft-p99' | 'ttft-mean' | 'hit-rate';

export interface SweepCell {
  window: number;
  prefixLength: number;
  result: PolicyReport;
}

export interface SweepReport {
  format: 'kvroute-sim-sweep/v1';
  command: 'sweep';
  scenario: string;
  scenarioOptions: Record<string, unknown>;
  ranks: number;
  profile: string;
  seed: string | number;
  policy: string;
  objective: SweepObjective;
  windows: number[];
  prefixLengths: number[];
  /** Row-major: for each prefix length, for each window. */
  grid: SweepCell[];
  best: { window: number; prefixLength: number };
  /** One or two sentences: why this cell won and what it trades away. */
  reason: string;
}

/**
 * What the HTML report needs beyond the JSON: per-request samples, which are too large
 * for the JSON output. Keyed like `RunReport.policies`.
 */
export interface PolicySamples {
  policy: string;
  ttftMs: number[];
}
