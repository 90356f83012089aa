// Host-side load accounting. The policy only reads RankState; hosts (sim, router) move the
// counters through one implementation so both account the same way (S-1: tokens = input tokens
// + max new tokens, added on dispatch and removed on completion or abort).
import type { RankState } from './types.ts';

export interface LoadTrackerOptions {
  /** Stamped on every rank as RankState.kvCapacityTokens (methods may size indexes from it). */
  kvCapacityTokens?: number;
}

export interface LoadTracker {
  /** One state per rank, `ranks[i].rank === i`; pass it to Dispatcher.dispatch as is. */
  readonly ranks: RankState[];
  onDispatch(rank: number, tokens: number): void;
  /** Also for aborts. Completions for ranks removed by `resize` are ignored; counters never go below 0. */
  onComplete(rank: number, tokens: number): void;
  setHealthy(rank: number, healthy: boolean): void;
  /** Scale out (new healthy, idle ranks) or in (drops the highest ranks and their counters). */
  resize(numRanks: number): void;
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

  const at = (rank: number, op: string): RankState => {
    const state = Number.isInteger(rank) ? ranks[rank] : undefined;
    if (!state) {
      throw new RangeError(`${op}: rank must be an integer in [0, ${ranks.length}), got ${rank}`);
    }
    return state;
  };

  return {
    ranks,
    onDispatch(rank, tokens) {
      checkTokens(tokens);
      const state = at(rank, 'onDispatch');
      state.inFlightRequests++;
      state.inFlightTokens += tokens;
    },
    onComplete(rank, tokens) {
      checkTokens(tokens);
      if (Number.isInteger(rank) && rank >= ranks.length) return;
      const state = at(rank, 'onComplete');
      state.inFlightRequests = Math.max(0, state.inFlightRequests - 1);
      state.inFlightTokens = Math.max(0, state.inFlightTokens - tokens);
    },
    setHealthy(rank, healthy) {
      at(rank, 'setHealthy').healthy = healthy;
    },
    resize(n) {
      checkCount(n);
      if (n < ranks.length) ranks.length = n;
      for (let i = ranks.length; i < n; i++) ranks.push(makeRank(i));
    },
  };
}
