// consistent_hash: consistent hashing with bounded loads (Mirrokni, Thorup, Zadimoghaddam
// 2018; the scheme HAProxy and KubeAI use), on the same prefix key as prefix_match.
//
// Algorithm: key = the first floor(min(len, prefixLength) / window) * window tokens (the whole
// input when shorter than one window), hashed to 53 bits. The key's own order over ranks is its
// sequence of jump consistent hash draws (Lamping and Veach 2014; draw k seeded by the key and
// k, see hashing/chained.ts jumpRank). The request goes to the first rank in that order that is
// healthy and within the bound
//   load(rank) <= (1 + epsilon) * (totalLoad + requestLoad) / healthyRanks  (+ slack, default 0)
// where load is in-flight tokens (`load: 'tokens'`, the default: the host's onDispatch
// accounting of input + max new tokens, so a 80k-token prompt weighs what it costs) or
// in-flight requests (`load: 'requests'`, the classic unit-ball version). After 64 draws that
// all miss (most ranks down or over the bound) it takes the least-loaded rank, which always
// passes. Reason 'consistent-hash' when the key's first draw took it,
// 'consistent-hash-overflow' when it walked on (an unhealthy first draw counts as a walk too).
//
// Why jump hashing: it needs no table, balances keys as evenly as a random assignment (a ring
// needs hundreds of virtual nodes per rank to come close), and moves the fewest keys: adding
// rank N to N ranks moves ~1/(N+1) of keys, all to the new rank; losing a rank moves only its
// keys, spread over the others by each key's next draw. It replaced rendezvous hashing, which
// moves keys the same way but scores every rank per decision.
//
// Named ranks: jump draws are rank indexes, so a host that renumbers its ranks (the router
// numbers discovered pods by sorted URL: a pod joining first moves every other pod up one)
// would move nearly every key. Such a host names its ranks (Method.nameRanks: the worker URL
// and DP rank), and the draws then come from a Maglev table over the names
// (hashing/maglev.ts): the same walk and bound, a key's worker a function of the key and the
// set of names, whatever index each stands at.
//
// Cost: hashing the key tokens (~2-3 ns/token, at most prefixLength tokens), the mean load
// from the host's running totals (O(1) with a tracker's load index), and O(ln N) steps per
// draw; the expected number of draws is at most (1 + epsilon) / epsilon (one when the first
// rank is within the bound, the usual case). So O(log N) per decision in the rank count.
//
// Failure modes: load-aware, so the same key may land on different ranks as load moves
// (its cache is then split over the ranks its walk reaches; bounded by how far the walk
// goes). Keys on only the first prefixLength tokens: tenants that share a long system prompt
// but differ later look like one key (KubeAI's weakness); cache_aware indexes the whole
// prompt instead. Knows nothing about what ranks actually cache.

import { defineMethod } from '../define-method.ts';
import { PolicyConfigError } from '../errors.ts';
import { prefixKey, stringKey } from '../hashing/chained.ts';
import { prefixKeyLength, validateTokenIds } from '../hashing/prefix-digest.ts';
import { NamedRanks } from '../named-ranks.ts';
import { type OptionsSchema, readNumber, readWindowAndCap } from '../options.ts';
import { HASH_DRAWS, healthyTotals, leastBy } from '../pickers.ts';
import { type Decision, type Method, type MethodContext, promptLength } from '../types.ts';

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
    const names = new NamedRanks();

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
          return { rank: leastBy(ctx, 'tokens').rank, reason: 'least-tokens' };
        }
        const totals = healthyTotals(ctx);
        const byTokens = unit === 'tokens';
        const total =
          (byTokens ? promptLength(ctx.request) : 1) +
          (byTokens ? totals.healthyTokens : totals.healthyRequests);
        const bound = ((1 + epsilon) * total) / totals.healthyCount + slack;

        // The key's own order over all ranks is its sequence of draws (Maglev entries of the
        // ranks' names when the host named them, else jump-hash draws over indexes); the
        // request takes the first healthy rank within the bound. An unhealthy first draw is a
        // walk too.
        const ranks = ctx.ranks;
        const home = names.firstDrawWithin(ranks, key, unit, bound, 0, 1);
        if (home >= 0) return { rank: home, reason: 'consistent-hash' };
        const walked = names.firstDrawWithin(ranks, key, unit, bound, 1, HASH_DRAWS);
        if (walked >= 0) return { rank: walked, reason: 'consistent-hash-overflow' };
        // Most ranks down or over the bound: the least-loaded rank, which is always within it.
        return { rank: leastBy(ctx, unit).rank, reason: 'consistent-hash-overflow' };
      },
      commit(_ctx: MethodContext, decision: Decision): void {
        if (decision.reason === 'consistent-hash') counts.primary++;
        else if (decision.reason === 'consistent-hash-overflow') counts.overflow++;
        else if (decision.reason === 'least-tokens') counts.noKey++;
      },
      stats(): Record<string, number> {
        return { ...counts };
      },
      nameRanks(ids) {
        names.name(ids);
      },
      remapRanks(moves, numRanks) {
        names.remap(moves, numRanks);
      },
    };
  },
);
