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
// Cost: hashing the key tokens (~2-3 ns/token, at most prefixLength tokens) plus O(N) scores
// in one pass (the walk's first rank within the bound is the best-scoring such rank: no sort).
//
// Failure modes: load-aware, so the same key may land on different ranks as load moves
// (its cache is then split over the ranks its walk reaches; bounded by how far the walk
// goes). Keys on only the first prefixLength tokens: tenants that share a long system prompt
// but differ later look like one key (KubeAI's weakness); cache_aware indexes the whole
// prompt instead. Knows nothing about what ranks actually cache.

import { defineMethod } from '../define-method.ts';
import { PolicyRangeError } from '../errors.ts';
import { prefixKey, rendezvousScore, stringKey } from '../hashing/chained.ts';
import { prefixKeyLength, validateTokenIds } from '../hashing/prefix-digest.ts';
import type { OptionsSchema, OptionValues } from '../options.ts';
import { leastLoaded } from '../pickers.ts';
import type { Decision, Method, MethodContext } from '../types.ts';

function atLeastWindow(prefixLength: number, window: number): number {
  if (prefixLength < window) {
    throw new PolicyRangeError(
      'prefixLength',
      `consistent_hash: prefixLength must be an integer >= ${window}, got ${prefixLength}`,
    );
  }
  return prefixLength;
}

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
  },
  epsilon: {
    type: 'number',
    default: 0.25,
    min: 0,
    doc: 'bounded-load slack: a rank takes a key while load <= (1 + epsilon) x mean',
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

export type ConsistentHashOptions = OptionValues<typeof CONSISTENT_HASH_OPTIONS>;

export const CONSISTENT_HASH_DEFAULTS: ConsistentHashOptions = {
  window: CONSISTENT_HASH_OPTIONS.window.default,
  prefixLength: CONSISTENT_HASH_OPTIONS.prefixLength.default,
  epsilon: CONSISTENT_HASH_OPTIONS.epsilon.default,
  load: CONSISTENT_HASH_OPTIONS.load.default,
  slack: CONSISTENT_HASH_OPTIONS.slack.default,
};

const NAME = 'consistent_hash';

export const createConsistentHash = defineMethod(
  NAME,
  CONSISTENT_HASH_OPTIONS,
  (options, raw): Method => {
    const window = options.window;
    const prefixLength =
      raw.prefixLength == null
        ? Math.max(CONSISTENT_HASH_DEFAULTS.prefixLength, window)
        : atLeastWindow(options.prefixLength, window);
    const epsilon = options.epsilon;
    const unit = options.load;
    const slack = options.slack;
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
      select(ctx: MethodContext): Decision {
        const key = keyOf(ctx);
        if (key === undefined) {
          return { rank: leastLoaded(ctx, ctx.healthy).rank, reason: 'least-tokens' };
        }
        const healthy = ctx.healthy;
        const n = healthy.length;
        const reqLoad = unit === 'tokens' ? (ctx.request.inputIds?.length ?? 0) : 1;
        let total = reqLoad;
        for (const r of healthy) total += unit === 'tokens' ? r.inFlightTokens : r.inFlightRequests;
        const bound = ((1 + epsilon) * total) / n + slack;

        // The key's first choice is taken over ALL ranks (if it is unhealthy, the request
        // walks). The walk visits healthy ranks by descending score (ties, 2^-32, by rank, so
        // every router instance agrees) and stops at the first within the bound: that is the
        // highest-scoring rank within the bound, found in one pass without sorting.
        let firstRank = -1;
        let firstScore = -1;
        for (let r = 0; r < ctx.ranks.length; r++) {
          const s = rendezvousScore(key, r);
          if (s > firstScore) {
            firstScore = s;
            firstRank = r;
          }
        }
        let chosen = -1;
        let chosenScore = -1;
        for (const r of healthy) {
          const load = unit === 'tokens' ? r.inFlightTokens : r.inFlightRequests;
          if (load > bound) continue;
          const s = r.rank === firstRank ? firstScore : rendezvousScore(key, r.rank);
          if (s > chosenScore) {
            chosenScore = s;
            chosen = r.rank;
          }
        }
        if (chosen >= 0) {
          return {
            rank: chosen,
            reason: chosen === firstRank ? 'consistent-hash' : 'consistent-hash-overflow',
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
