// Result shapes of a simulation. Keys are a public contract (the CLI's JSON output is built
// from them): add keys, never rename or remove them.

export interface LatencyStats {
  p50: number;
  p90: number;
  p99: number;
  mean: number;
}

/** Latency over a subset of requests, with its size. */
export interface SubsetLatency extends LatencyStats {
  count: number;
}

/** One completed request. Times in simulated ms from the start of the run. */
export interface RequestRecord {
  id: number;
  clientId: number;
  sessionKey: string;
  tenant?: string;
  /** When the client sent it (closed loop: previous completion + think time). */
  arrivalMs: number;
  rank: number;
  /** The dispatcher's reason for the final placement ('prefix-hash', 'round-robin', ...). */
  reason: string;
  inputTokens: number;
  /** Prefix found in the rank's cache at admission (SGLang's meta_info.cached_tokens). */
  cachedTokens: number;
  outputTokens: number;
  /** Arrival to admission into a prefill batch. */
  queueMs: number;
  ttftMs: number;
  endMs: number;
  /** Times it was re-dispatched because its rank went away. */
  retries: number;
}

export interface RankSummary {
  rank: number;
  requests: number;
  /** Input tokens this rank had to prefill (input minus cached). */
  prefillTokens: number;
  /** Input tokens this rank served from its radix cache. */
  cachedTokens: number;
  prefillBusyMs: number;
  decodeBusyMs: number;
  evictedTokens: number;
}

/** One policy's results on one workload. */
export interface PolicyRunSummary {
  /** Method name (SGLang naming), e.g. `prefix_match`. */
  policy: string;
  /** Dispatcher options this run used, minus `method`. */
  options: Record<string, unknown>;
  /** Completed requests. */
  requests: number;
  /** Requests that never completed (no healthy rank left). */
  failed: number;
  /** Requests re-dispatched at least once because their rank went down or was removed. */
  retried: number;
  /** Cached input tokens / input tokens over completed requests (0..1). */
  hitRate: number;
  ttftMs: LatencyStats;
  /** Requests that found nothing cached; null when none did. */
  coldTtftMs: SubsetLatency | null;
  /**
   * Requests after the warm-up: arrivals after the plan's warmupMs, or, when it sets none,
   * every request after the first `ranks` (by then any policy could have warmed every rank).
   */
  steadyTtftMs: SubsetLatency | null;
  /** The first `ranks` requests by arrival (the seed's "first 16 requests"). */
  warmupTtftMs: SubsetLatency | null;
  /** Completions per simulated second (closed loop with a duration: over [warmupMs, durationMs]). */
  throughputRps: number;
  /** Input + output tokens per simulated second, same window. */
  throughputTokPerS: number;
  inputTokPerS: number;
  outputTokPerS: number;
  /** Busiest rank's prefill tokens / mean over ranks (1 = even). */
  imbalance: number;
  /** Tokens evicted from radix caches. */
  evictions: number;
  evictedNodes: number;
  /** Arrival to admission into a prefill batch. */
  queueingMs: LatencyStats;
  perRank: RankSummary[];
  /** Decisions per reason. */
  reasons: Record<string, number>;
  /** Simulated span from the first arrival to the last completion. */
  durationMs: number;
  /** Events the engine executed (a measure of simulation work). */
  events: number;
}

export interface PolicyRunResult {
  summary: PolicyRunSummary;
  /** Completed requests in completion order. */
  records: RequestRecord[];
  /**
   * Time-average number of requests in the system (sent, not completed) from the first
   * arrival to the last completion, measured by the host as it runs: the L of Little's law.
   */
  meanInSystem?: number;
}
