// The policy core's contracts. Hosts (the simulator, the router, the mock worker)
// depend on these names; change them only together with every host.
import type { OptionsSchema } from './options.ts';

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
  /**
   * The prompt's token ids in the order the engine sees them. Integers in [0, 2^32). A host may
   * pass only the first `Method.maxPromptTokens` of them (and the length in promptTokens).
   */
  inputIds?: ArrayLike<number>;
  /** The whole prompt's length in tokens when inputIds holds only its leading part. */
  promptTokens?: number;
  /** Cache-affinity key (session, conversation, agent id). */
  routingKey?: string;
  /** Explicit rank (SGLang's `routed_dp_rank`): wins over every method. */
  routedRank?: number;
  /** SGLang's bootstrap room, for prefill/decode disaggregation. */
  bootstrapRoom?: bigint | number;
  /**
   * Most tokens the request may generate (max_tokens). Only the load accounting reads it: a
   * dispatch ticket weighs input + max new tokens. Absent, NaN or negative counts as 0.
   */
  maxNewTokens?: number;
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
  | 'cache-miss-hash'
  | (string & {});

export interface Decision {
  rank: number;
  reason: DecisionReason;
  /** Optional detail for tests and reports (e.g. matched prefix tokens). */
  matchedTokens?: number;
}

/**
 * A cache index the host keeps up to date from outside the policy (the engines' KV events):
 * which ranks hold how much of a prompt's prefix. Methods that match prefixes use it for the
 * ranks it is live for and their own learned index for the others.
 */
export interface KvIndexView {
  /** The engines' block size; undefined until the first stored block says it. */
  readonly blockSize: number | undefined;
  /** Whether the index is current for this rank (events connected, in sequence, fresh). */
  isLive(rank: number): boolean;
  /**
   * Writes to out[rank], for each rank listed, the tokens of the longest prefix it holds.
   * `blockKeys` are the prompt's chained block keys (hashing/block-keys.ts) in `blockSize`.
   */
  matchKeys(blockKeys: readonly number[], ranks: readonly number[], out: number[]): void;
}

/**
 * Prefix digests a host can vouch for: `digest(ids, count)` returns exactly
 * tokenDigest(ids, count) (BLAKE2b-512 of the first `count` ids) from the host's own store, or
 * null when it has none for these ids, and the method hashes them itself. A simulator that
 * runs the same requests under many settings (a sweep) keeps each digest once instead of
 * hashing it in every cell; a router has no use for it.
 */
export interface PrefixDigests {
  digest(ids: ArrayLike<number>, count: number): Uint8Array | null;
}

/** Time and other host facts passed into a decision. The policy never reads a clock. */
export interface DispatchContext {
  /** Host time in milliseconds (simulated or wall); used for TTLs. Defaults to 0. */
  nowMs?: number;
  /** An events-fed cache index (see KvIndexView); absent: methods use what they learned. */
  kvIndex?: KvIndexView;
  /** Digests of prompt prefixes the host already has (see PrefixDigests). */
  prefixDigests?: PrefixDigests;
}

/** The healthy ranks and their summed load: what a bound over the mean load needs. */
export interface LoadTotals {
  /** Healthy ranks now. */
  readonly healthyCount: number;
  /** In-flight tokens summed over the healthy ranks. */
  readonly healthyTokens: number;
  /** In-flight requests summed over the healthy ranks. */
  readonly healthyRequests: number;
}

/**
 * Sublinear queries over the ranks' load, for methods whose choices would otherwise scan every
 * rank. Offered (MethodContext.queries) when the ranks are a tracker's own, whose load index
 * answers each in O(log R); every answer is the one the documented scan gives, rotation
 * included.
 */
export interface LoadQueries {
  /** Bumped whenever a rank's health changes or ranks are added or removed. */
  readonly healthChanges: number;
  /** The least in-flight tokens of a healthy rank. */
  leastTokens(): number;
  /** The first healthy rank at or after `from` (cyclically); -1 when none is healthy. */
  firstHealthy(from: number): number;
  /**
   * The healthy rank with in-flight tokens <= `max` that the rotating tie-break would reach
   * first (at or after its cursor, cyclically); -1 when there is none. Does not move the
   * cursor: pass the rank to tieBreak with the other candidates.
   */
  firstWithin(max: number): number;
  /**
   * pickers.leastLoadedCool over every healthy rank: least (tokens, requests, cool[rank]; a
   * missing value is 0), then the rotating tie-break. `cool` is the method's own array, read
   * by the index: report every change with MethodContext.coolChanged.
   */
  leastCool(cool: readonly number[]): RankState;
}

/** What a method sees for one decision. Valid only during the call: hosts' arrays are not copied. */
export interface MethodContext {
  request: RouteRequest;
  /** All ranks, indexed by rank number; `ranks.length` is the rank count (dp_size). */
  ranks: readonly RankState[];
  /** The healthy ranks in rank order; never empty (the dispatcher throws NoHealthyRankError first). */
  healthy: readonly RankState[];
  /** Host time in milliseconds (DispatchContext.nowMs, default 0). */
  nowMs: number;
  /** DispatchContext.kvIndex, when the host keeps one. */
  kvIndex?: KvIndexView | undefined;
  /** DispatchContext.prefixDigests, when the host keeps them. */
  prefixDigests?: PrefixDigests | undefined;
  /**
   * Picks one of `candidates` (non-empty, in rank order) with a cursor that rotates per
   * dispatcher, so equal candidates take turns instead of the lowest rank always winning.
   */
  tieBreak(candidates: readonly RankState[]): RankState;
  /**
   * The healthy rank with the least load in `order` ('tokens': in-flight tokens, then
   * requests; 'requests': in-flight requests), ties by `tieBreak`'s rotation. The same rank a
   * scan of `healthy` with `tieBreak` gives, in O(log R) when the host's tracker keeps a load
   * index. Optional so hand-made contexts (tests) may omit it; use pickers.leastBy.
   */
  pickLeast?(order: 'tokens' | 'requests'): RankState;
  /**
   * The healthy ranks' count and summed load, kept by the host's load index (O(1)) when the
   * ranks are a tracker's own. Optional; use pickers.healthyTotals, which sums `healthy`
   * otherwise.
   */
  totals?: LoadTotals | undefined;
  /** Indexed queries over the ranks' load, when the host's tracker keeps an index of them. */
  queries?: LoadQueries | undefined;
  /**
   * Tells the dispatcher that `cool[rank]` (every entry, without a rank) changed, so an index
   * reading the array stays true. Call it from commit whenever a value passed to leastCool
   * changes, whether or not `queries` was offered for this decision.
   */
  coolChanged?(cool: readonly number[], rank?: number): void;
}

/** How a dispatched request ended, as the host reports it when it closes the ticket. */
export type TicketOutcome = 'completed' | 'aborted' | 'failed';

/**
 * A load-balance method. `select` has no side effects (it may be called to preview a choice,
 * and calling it twice gives the same answer); state changes only in `commit` and `complete`.
 */
export interface Method {
  readonly name: string;
  /**
   * The most leading prompt tokens select/commit read (a prefix length, an index cap); hosts
   * need not tokenize past it. 0: none (load-only methods); undefined: all of them.
   */
  readonly maxPromptTokens?: number;
  select(ctx: MethodContext): Decision;
  /**
   * Called with the FINAL decision of every dispatch (also when an explicit routed rank or
   * affinity overrode `select`, which may then not have been called), so stateful methods learn.
   */
  commit?(ctx: MethodContext, decision: Decision): void;
  /**
   * Called once when a dispatch ticket is closed (the request completed, was aborted or
   * failed). Not called for decisions made with `dispatch`, which has no ticket.
   */
  complete?(decision: Decision, outcome: TicketOutcome): void;
  stats?(): Record<string, number>;
  /**
   * The host renumbered its ranks (a worker joined or left a table numbered by worker order,
   * or a removed worker's ranks went to a new one): the rank that stood at index `old` now
   * stands at `moves[old]`, or left (-1); indexes no move reaches hold new ranks, which start
   * empty. Methods with per-rank learned state carry it over, so what they learned about a
   * worker stays with that worker.
   */
  remapRanks?(moves: readonly number[], numRanks: number): void;
  /**
   * The host's stable name for each rank index (a worker's URL and DP rank; null: a rank with
   * no worker, never chosen by name), in index order; called again whenever they change.
   * Methods that hash keys over ranks (consistent_hash) then hash over names, so a key keeps
   * its worker when ranks renumber and every host that names the same workers agrees.
   */
  nameRanks?(names: readonly (string | null)[]): void;
}

/**
 * Builds a method from its options (already merged from the config's top level and `options`);
 * made with defineMethod. `options` is the method's schema, `optionNames` its keys, so the
 * dispatcher can reject typos and hosts can derive flags and help.
 */
export type MethodFactory = ((options: Record<string, unknown>) => Method) & {
  readonly methodName: string;
  readonly options: OptionsSchema;
  readonly optionNames: readonly string[];
};

/** The prompt's length in tokens: `promptTokens` when the host capped inputIds, else their count. */
export function promptLength(request: RouteRequest): number {
  return request.promptTokens ?? request.inputIds?.length ?? 0;
}
