// Host-side load accounting, in one place so the simulator, the mock worker and the router
// count load the same way. The rule: a request weighs its input tokens plus its max new
// tokens, added when it is dispatched and removed when it completes or is aborted.
//
// The weight is bounded and integral (see requestTokens), so totals stay exact integers well
// inside 2^53: every total is finite and returns to exactly 0 once everything is done,
// whatever a client sent (a max_tokens of 1.8e308 used to leave +Infinity on a rank for good,
// which switched off cache_aware's overload spill). Hosts normally never call onDispatch and
// onComplete themselves: Dispatcher.begin() returns a ticket that does both.
import { LoadIndex } from './load-index.ts';
import { checkMoves, remapByRank } from './rank-moves.ts';
import type { RankState } from './types.ts';

/**
 * Most tokens one request may weigh: larger than any model's context plus output. A bigger
 * figure means a client asked for more than any engine will do; counting it as this much
 * still marks the rank as busy, and many of them cannot overflow a total.
 */
export const MAX_REQUEST_TOKENS = 2 ** 32;

/** A count from a host or a client as a whole number in [0, MAX_REQUEST_TOKENS]. */
function clampCount(value: number | undefined): number {
  if (value === undefined || !(value > 0)) return 0; // NaN, negative, 0, undefined
  if (value >= MAX_REQUEST_TOKENS) return MAX_REQUEST_TOKENS;
  return Math.floor(value);
}

/**
 * The accounting rule: a request weighs its input tokens plus its max new tokens, each
 * clamped to a whole number in [0, MAX_REQUEST_TOKENS] (NaN and negatives count as 0), the
 * sum saturating at MAX_REQUEST_TOKENS.
 */
export function requestTokens(inputTokens: number, maxNewTokens: number | undefined): number {
  return Math.min(MAX_REQUEST_TOKENS, clampCount(inputTokens) + clampCount(maxNewTokens));
}

export interface LoadTrackerOptions {
  /** Stamped on every rank as RankState.kvCapacityTokens (methods may size indexes from it). */
  kvCapacityTokens?: number;
}

/** What an open ticket holds: where its load went, so it can be taken back exactly once. */
export interface LoadClaim {
  readonly rank: number;
  readonly tokens: number;
  /**
   * The id of the rank slot claimed: unique per slot, so a rank removed and added again is a
   * new slot, and a slot moved to another index by `remap` is found there.
   */
  readonly generation: number;
}

export interface LoadTracker {
  /**
   * One state per rank, `ranks[i].rank === i`; pass it to Dispatcher.dispatch as is. Change
   * it only through this tracker's methods: the index below follows them, not the objects.
   */
  readonly ranks: RankState[];
  /**
   * The ranks' load, indexed (least loaded in O(log R)); Dispatcher.begin uses it when the
   * method sees the tracker's own ranks.
   */
  readonly index?: LoadIndex;
  /**
   * Adds a request to a rank. Prefer Dispatcher.begin(), which calls this with the rule's
   * weight. `tokens` must be a finite number >= 0.
   */
  onDispatch(rank: number, tokens: number): void;
  /** Also for aborts. Completions for ranks removed by `resize` are ignored; counters never go below 0. */
  onComplete(rank: number, tokens: number): void;
  /** Adds `tokens` (already bounded by requestTokens) to `rank` and returns the claim to release. */
  claim(rank: number, tokens: number): LoadClaim;
  /**
   * Takes a claim's load back. A claim on a rank that was removed since (even if a rank of
   * that number was added again) is ignored.
   */
  release(claim: LoadClaim): void;
  setHealthy(rank: number, healthy: boolean): void;
  /** Scale out (new healthy, idle ranks) or in (drops the highest ranks and their counters). */
  resize(numRanks: number): void;
  /**
   * The host renumbered its ranks (see Dispatcher.remapRanks): the rank at index `old` moves
   * to `moves[old]` with its in-flight counters, and open claims on it are released there; a
   * rank that left (-1) is dropped with its counters. Indexes no move reaches start idle.
   * Health stays with the index: the host sets it for each index's new occupant.
   */
  remap(moves: readonly number[], numRanks: number): void;
}

function checkCount(numRanks: number): void {
  if (!Number.isInteger(numRanks) || numRanks < 0) {
    throw new RangeError(`numRanks must be a non-negative integer, got ${numRanks}`);
  }
}

function checkTokens(tokens: number): void {
  if (!Number.isFinite(tokens) || tokens < 0) {
    throw new RangeError(`tokens must be a finite number >= 0, got ${tokens}`);
  }
}

export function createLoadTracker(numRanks: number, opts: LoadTrackerOptions = {}): LoadTracker {
  checkCount(numRanks);
  const capacity = opts.kvCapacityTokens;
  if (capacity !== undefined && (!Number.isFinite(capacity) || capacity <= 0)) {
    throw new RangeError(`kvCapacityTokens must be a positive number, got ${capacity}`);
  }
  const makeRank = (rank: number): RankState => {
    const state: RankState = { rank, healthy: true, inFlightRequests: 0, inFlightTokens: 0 };
    if (capacity !== undefined) state.kvCapacityTokens = capacity;
    return state;
  };
  const ranks: RankState[] = Array.from({ length: numRanks }, (_, i) => makeRank(i));
  // The id of the slot at each index, unique for the tracker's life: a claim is released to
  // the slot it was made on, wherever `remap` moved it, and never to a new slot that took a
  // dropped one's number.
  const generations: number[] = Array.from({ length: numRanks }, (_, i) => i);
  let nextId = numRanks;
  const index = new LoadIndex(numRanks);

  const at = (rank: number, op: string): RankState => {
    const state = Number.isInteger(rank) ? ranks[rank] : undefined;
    if (!state) {
      throw new RangeError(`${op}: rank must be an integer in [0, ${ranks.length}), got ${rank}`);
    }
    return state;
  };

  const add = (state: RankState, tokens: number): void => {
    state.inFlightRequests++;
    state.inFlightTokens += tokens;
    index.set(state.rank, state);
  };
  const remove = (state: RankState, tokens: number): void => {
    state.inFlightRequests = Math.max(0, state.inFlightRequests - 1);
    // An idle rank holds no tokens, whatever rounding a caller's fractional counts left.
    state.inFlightTokens =
      state.inFlightRequests === 0 ? 0 : Math.max(0, state.inFlightTokens - tokens);
    index.set(state.rank, state);
  };

  return {
    ranks,
    index,
    onDispatch(rank, tokens) {
      checkTokens(tokens);
      add(at(rank, 'onDispatch'), tokens);
    },
    onComplete(rank, tokens) {
      checkTokens(tokens);
      if (Number.isInteger(rank) && rank >= ranks.length) return;
      remove(at(rank, 'onComplete'), tokens);
    },
    claim(rank, tokens) {
      checkTokens(tokens);
      add(at(rank, 'claim'), tokens);
      return { rank, tokens, generation: generations[rank] as number };
    },
    release(claim) {
      let at = claim.rank;
      // The slot moved (remap) or is gone: find it, O(R) but only for claims that outlived a
      // renumbering.
      if (generations[at] !== claim.generation) at = generations.indexOf(claim.generation);
      const state = at >= 0 ? ranks[at] : undefined;
      if (!state) return;
      remove(state, claim.tokens);
    },
    setHealthy(rank, healthy) {
      const state = at(rank, 'setHealthy');
      state.healthy = healthy;
      index.set(rank, state);
    },
    resize(n) {
      checkCount(n);
      if (n < ranks.length) {
        ranks.length = n;
        generations.length = n;
      }
      for (let i = ranks.length; i < n; i++) {
        ranks.push(makeRank(i));
        generations.push(nextId++);
      }
      index.resize(n);
    },
    remap(moves, n) {
      checkMoves('remap', moves, n);
      const moved = remapByRank(
        ranks.map((s, i) => ({
          requests: s.inFlightRequests,
          tokens: s.inFlightTokens,
          id: generations[i] as number,
        })),
        moves,
        n,
        () => undefined,
      );
      if (n < ranks.length) ranks.length = n;
      for (let i = ranks.length; i < n; i++) ranks.push(makeRank(i));
      generations.length = n;
      index.resize(n);
      for (let i = 0; i < n; i++) {
        const state = ranks[i] as RankState;
        const m = moved[i];
        state.inFlightRequests = m?.requests ?? 0;
        state.inFlightTokens = m?.tokens ?? 0;
        generations[i] = m?.id ?? nextId++;
        index.set(i, state);
      }
    },
  };
}
