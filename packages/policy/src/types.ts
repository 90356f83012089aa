// The policy core's contracts. Hosts (the simulator, the router, the mock worker)
// depend on these names; change them only together with every host.

/** One data-parallel rank or replica as the host sees it right now. */
export interface RankState {
  /** Index of this rank in the `ranks` array passed to `dispatch` (0..n-1). */
  rank: number;
  healthy: boolean;
  /** Requests dispatched to this rank and not yet completed. */
  inFlightRequests: number;
  /** Tokens of those requests still to be processed (the host's accounting; see LoadTracker). */
  inFlightTokens: number;
  /** Optional: the rank's KV pool size in tokens, for methods that size per-rank indexes from it. */
  kvCapacityTokens?: number;
}

export interface RouteRequest {
  /** The prompt's token ids in the order the engine sees them. Integers in [0, 2^32). */
  inputIds?: ArrayLike<number>;
  /** Cache-affinity key (session, conversation, agent id). */
  routingKey?: string;
  /** Explicit rank (SGLang's `routed_dp_rank`): wins over every method. */
  routedRank?: number;
  /** SGLang's bootstrap room, for prefill/decode disaggregation. */
  bootstrapRoom?: bigint | number;
}

export type DecisionReason =
  | 'routed'
  | 'affinity'
  | 'affinity-repick'
  | 'round-robin'
  | 'least-requests'
  | 'least-tokens'
  | 'bootstrap-room'
  | 'bootstrap-room-failover'
  | 'prefix-hash'
  | 'prefix-hash-failover'
  | 'fallback-round-robin'
  | 'consistent-hash'
  | 'consistent-hash-overflow'
  | 'cache-hit'
  | 'cache-hit-overloaded'
  | 'cache-miss-least-load'
  | (string & {});

export interface Decision {
  rank: number;
  reason: DecisionReason;
  /** Optional detail for tests and reports (e.g. matched prefix tokens). */
  matchedTokens?: number;
}

/** Time and other host facts passed into a decision. The policy never reads a clock. */
export interface DispatchContext {
  /** Host time in milliseconds (simulated or wall); used for TTLs. Defaults to 0. */
  nowMs?: number;
}
