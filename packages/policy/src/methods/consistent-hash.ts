// consistent_hash: consistent hashing with bounded loads (Mirrokni, Thorup, Zadimoghaddam
// 2018; the scheme HAProxy and KubeAI use), on the same prefix key as prefix_match.
//
// Algorithm: key = the first floor(min(len, prefixLength) / window) * window tokens (the whole
// input when shorter than one window), hashed to 53 bits. Every healthy rank gets a
// rendezvous score hash(key, rank); the key's own order is the ranks by descending score.
// The request goes to the first rank in that order whose load is within the bound
//   load(rank) <= (1 + epsilon) * (totalLoad + requestLoad) / healthyRanks  (+ slack, default 0)
// where load is in-flight tokens (`load: 'tokens'`, the default: the host's onDispatch
// accounting of input + max new tokens, so a 80k-token prompt weighs what it costs) or
// in-flight requests (`load: 'requests'`, the classic unit-ball version). The least-loaded
// rank always passes (it is at or below the mean), so the walk ends within N steps.
// Reason 'consistent-hash' when the key's first rank took it, 'consistent-hash-overflow'
// when it walked on (an unhealthy first rank counts as a walk too).
//
// Why rendezvous instead of a ring with virtual nodes: with N <= a few hundred ranks, N
// scores per decision cost less than a ring lookup's cache misses, and the balance is exact
// without tuning a virtual-node count. Adding one rank to N moves exactly the keys that now
// score highest on it (~1/(N+1)); removing or losing one moves only its own keys, spread
// over the others by each key's second choice.
//
// Cost: hashing the key tokens (~2-3 ns/token, at most prefixLength tokens) plus one pass of
// N scores (a few ns each; no sort): O(N), not O(log N). A ring with virtual nodes would be
// O(log N) but moves keys differently and balances less exactly; at 1,024 ranks the pass costs
// ~10 us, well inside a request's routing budget.
//
// Failure modes: load-aware, so the same key may land on different ranks as load moves
// (its cache is then split over the ranks its walk reaches; bounded by how far the walk
// goes). Keys on only the first prefixLength tokens: tenants that share a long system prompt
// but differ later look like one key (KubeAI's weakness); cache_aware indexes the whole
// prompt instead. Knows nothing about what ranks actually cache.

import { defineMethod } from '../define-method.ts';
import { PolicyConfigError } from '../errors.ts';
import { prefixKey, rendezvousScore, stringKey } from '../hashing/chained.ts';
import { prefixKeyLength, validateTokenIds } from '../hashing/prefix-digest.ts';
import { type OptionsSchema, readNumber, readWindowAndCap } from '../options.ts';
import { leastLoaded } from '../pickers.ts';
import {
  type Decision,
  type Method,
  type MethodContext,
  promptLength,
  type RankState,
} from '../types.ts';

export const CONSISTENT_HASH_OPTIONS = {
  window: {
    type: 'int',
    default: 256,
    min: 1,
    doc: 'tokens per window; the key is whole windows of the prefix',
  },
  prefixLength: {
    type: 'int',
    default: 4096,
    min: 1,
    doc: 'most leading tokens that form the key (at least window)',
    sweep: [1024, 2048, 4096, 8192],
  },
  epsilon: {
    type: 'number',
    default: 0.25,
    min: 0,
    doc: 'bounded-load slack: a rank takes a key while load <= (1 + epsilon) x mean',
    sweep: [0.1, 0.25, 0.5, 1],
  },
  load: {
    type: 'enum',
    choices: ['tokens', 'requests'],
    default: 'tokens',
    doc: 'load unit: in-flight tokens (input + max new) or in-flight requests',
  },
  // At light load a purely relative bound walks keys away from their cache whenever one rank
  // has a single long request more than the others; a slack like cache_aware's stops that.
  slack: {
    type: 'number',
    default: 0,
    min: 0,
    doc: 'added to the bound, in the load unit (0 = the classic algorithm)',
  },
} as const satisfies OptionsSchema;

export interface ConsistentHashOptions {
  /** Tokens per window; the key is whole windows of the prefix. Default 256. */
  window: number;
  /** At most this many leading tokens form the key. Default 4096. */
  prefixLength: number;
  /** Bounded-load slack: a rank takes a key while load <= (1 + epsilon) * mean. Default 0.25. */
  epsilon: number;
  /** Load unit: in-flight tokens (default) or in-flight requests. */
  load: 'tokens' | 'requests';
  /**
   * Added to the bound, in the load unit. Default 0: the classic algorithm. At light load
   * a purely relative bound walks keys away from their cache whenever one rank has a single
   * long request more than the others; a slack like cache_aware's (65536 tokens) stops that.
   */
  slack: number;
}

export const CONSISTENT_HASH_DEFAULTS: ConsistentHashOptions = {
  window: 256,
  prefixLength: 4096,
  epsilon: 0.25,
  load: 'tokens',
  slack: 0,
};

const NAME = 'consistent_hash';

function readLoadUnit(owner: string, options: Record<string, unknown>): 'tokens' | 'requests' {
  const raw = options.load ?? 'tokens';
  if (raw !== 'tokens' && raw !== 'requests') {
    throw new PolicyConfigError(
      `${owner}: load must be 'tokens' or 'requests', got ${String(raw)}`,
    );
  }
  return raw;
}

export const createConsistentHash = defineMethod(
  NAME,
  CONSISTENT_HASH_OPTIONS,
  (_checked, options): Method => {
    const { window, cap: prefixLength } = readWindowAndCap(NAME, options, 'prefixLength', {
      window: CONSISTENT_HASH_DEFAULTS.window,
      cap: CONSISTENT_HASH_DEFAULTS.prefixLength,
    });
    const epsilon = readNumber(NAME, options, 'epsilon', CONSISTENT_HASH_DEFAULTS.epsilon, 0);
    const unit = readLoadUnit(NAME, options);
    const slack = readNumber(NAME, options, 'slack', CONSISTENT_HASH_DEFAULTS.slack, 0);
    const counts = { primary: 0, overflow: 0, noKey: 0 };

    function keyOf(ctx: MethodContext): number | undefined {
      const ids = ctx.request.inputIds;
      if (ids && ids.length > 0) {
        // Whole windows of the prefix, or the whole input when shorter than one window.
        const len = prefixKeyLength(ids.length, window, prefixLength);
        validateTokenIds(ids, len);
        return prefixKey(ids, len);
      }
      if (ctx.request.routingKey !== undefined) return stringKey(ctx.request.routingKey);
      return undefined;
    }

    return {
      name: NAME,
      maxPromptTokens: prefixLength,
      select(ctx: MethodContext): Decision {
        const key = keyOf(ctx);
        if (key === undefined) {
          return { rank: leastLoaded(ctx, ctx.healthy).rank, reason: 'least-tokens' };
        }
        const healthy = ctx.healthy;
        const n = healthy.length;
        const reqLoad = unit === 'tokens' ? promptLength(ctx.request) : 1;
        let total = reqLoad;
        for (const r of healthy) total += unit === 'tokens' ? r.inFlightTokens : r.inFlightRequests;
        const bound = ((1 + epsilon) * total) / n + slack;

        // One pass over ALL ranks: the key's first choice is the top score over all of them
        // (if it is unhealthy, the request walks); the walk's end is the top score among
        // the healthy ranks within the bound. Descending score with ties (2^-32) to the lower
        // rank, so every router instance agrees; this is the walk down the sorted order
        // without sorting.
        let firstRank = -1;
        let firstScore = -1;
        let pick = -1;
        let pickScore = -1;
        const ranks = ctx.ranks;
        for (let rank = 0; rank < ranks.length; rank++) {
          const s = rendezvousScore(key, rank);
          if (s > firstScore) {
            firstScore = s;
            firstRank = rank;
          }
          if (s <= pickScore) continue;
          const r = ranks[rank] as RankState;
          if (!r.healthy) continue;
          const load = unit === 'tokens' ? r.inFlightTokens : r.inFlightRequests;
          if (load <= bound) {
            pickScore = s;
            pick = rank;
          }
        }
        if (pick >= 0) {
          return {
            rank: pick,
            reason: pick === firstRank ? 'consistent-hash' : 'consistent-hash-overflow',
          };
        }
        // Unreachable while epsilon >= 0 (the least-loaded rank is <= the mean), kept total.
        return { rank: leastLoaded(ctx, healthy).rank, reason: 'consistent-hash-overflow' };
      },
      commit(_ctx: MethodContext, decision: Decision): void {
        if (decision.reason === 'consistent-hash') counts.primary++;
        else if (decision.reason === 'consistent-hash-overflow') counts.overflow++;
        else if (decision.reason === 'least-tokens') counts.noKey++;
      },
      stats(): Record<string, number> {
        return { ...counts };
      },
    };
  },
);
