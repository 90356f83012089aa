// cache_aware: route to the rank that already holds the longest prefix of the prompt,
// unless that rank is overloaded; then to the cheapest rank that is not.
//
// Algorithm: the prompt's chained window keys (key i names tokens [0, (i+1) * window), up to
// maxPrefixTokens) are matched against a per-rank LRU index of the keys of every request the
// dispatcher sent there (learned in `commit`, also from routed/affinity decisions). With
// L(r) = in-flight tokens of rank r, w = prompt tokens, N = healthy ranks:
//   overloaded(r)  <=>  L(r) > (1 + epsilon) * (sum L + w) / N + slackTokens
//   1. nothing matched anywhere (cold): the least-loaded rank ('cache-miss-least-load'),
//      so cold misses spread instead of piling on one rank (sglang #32983); with an events
//      index, a hash choice by the first window instead (see Replicas below);
//   2. else the rank with the longest match (ties: least loaded) if not overloaded
//      ('cache-hit', matchedTokens set);
//   Load ties (common at light load) go to the rank whose cache churned least lately (a
//   decayed sum of the new tokens it took), then rotate: evening out LRU pressure keeps
//   sessions' histories cached longer (Mooncake replay: 93% -> 96% of the one-big-cache
//   bound).
//   3. else, among ranks not overloaded, the least cost
//        cost(r) = (w - matched(r)) + loadWeight * L(r)
//      i.e. uncached prefill work plus queued work ('cache-hit-overloaded'). Another rank
//      that also holds the prefix is then cheapest, so a hot prefix spreads over just as
//      many ranks as its load needs.
// The absolute slack keeps affinity when the cluster is nearly idle, where a relative bound
// alone would call a rank with one request "overloaded" (sglang's cache_aware drops affinity
// whenever load is uneven, sglang #32195).
//
// Events: when the host passes an events-fed index (DispatchContext.kvIndex, the engines' own
// BlockStored/BlockRemoved, see kv-index/block-index.ts), matched(r) for every rank it is live
// for is the real cached prefix in the engine's blocks; ranks whose events are missing or
// stale fall back to the learned index, which keeps learning from every decision either way.
// A live rank also counts as holding what this dispatcher sent it in the last pendingMs
// (kv-index/pending.ts): engines report blocks only once computed, and without this a burst
// sharing a new prefix would scatter while its first prefill runs.
// Replicas: other router replicas' decisions reach this one only as events, after the
// prefill and the event lag; a prompt arriving in that gap (a second session of a tenant
// started at the same time, a session's next turn sent to another replica right after the
// previous answer) finds nothing anywhere. So with an events index a cold miss does not go
// to the least-loaded rank of this replica's own counts (each replica's differ) but to the
// hash choice of the prompt's first window (its jump-hash draws, or its Maglev draws over the
// ranks' names when the host named them, as consistent_hash) among the ranks within the
// overload bound ('cache-miss-hash'): every replica sends a new prefix where the others did,
// including replicas that saw a renumbering at another moment, and the events confirm it
// later. At light load that is a hash placement (uneven for few
// prefixes); the bound spreads a prefix that grows hot, as for any holder. The coldPick
// option chooses this rule ('hash') or the least-loaded one always, or, by default ('auto'),
// hash exactly when an events index is passed (a lone router may prefer 'least-load').
//
// Index: one LRU set of 53-bit keys per rank, capacity = rank's kvCapacityTokens (or the
// capacityTokens option) / window keys. A rank seen unhealthy is assumed to have lost its
// cache (restart) and is forgotten; ranks added later start empty.
//
// Cost: hashing every indexed token once (~2-3 ns/token) plus a joint walk over the index
// whose cost is the sum of matched windows over ranks; commit re-touches the windows.
//
// Failure modes: the index is a guess, not the worker's truth: the engine may evict sooner
// than the LRU (other traffic, output tokens, page size) and partial last windows are not
// indexed. Several dispatcher instances (router replicas) each learn only their own
// decisions. Load is the host's in-flight token accounting, which counts cached prompt tokens
// and unfinished outputs as work.

import { defineMethod } from '../define-method.ts';
import { chainedBlockKeys } from '../hashing/block-keys.ts';
import { chainedWindowHashes } from '../hashing/chained.ts';
import { ChainedPrefixIndex } from '../hashing/chained-index.ts';
import { validateTokenIds } from '../hashing/prefix-digest.ts';
import { PendingPrefixes } from '../kv-index/pending.ts';
import { NamedRanks } from '../named-ranks.ts';
import { type OptionsSchema, readInt, readNumber, readWindowAndCap } from '../options.ts';
import { HASH_DRAWS, healthyTotals, leastLoadedCool } from '../pickers.ts';
import { remapByRank } from '../rank-moves.ts';
import {
  type Decision,
  type LoadQueries,
  type Method,
  type MethodContext,
  promptLength,
  type RankState,
} from '../types.ts';

export const CACHE_AWARE_OPTIONS = {
  window: {
    type: 'int',
    default: 256,
    min: 1,
    doc: 'tokens per indexed window',
    sweep: [64, 128, 256, 512],
  },
  maxPrefixTokens: {
    type: 'int',
    default: 16384,
    min: 1,
    doc: 'index at most this many leading tokens of a prompt (at least window)',
  },
  epsilon: {
    type: 'number',
    default: 0.25,
    min: 0,
    doc: 'relative overload bound over the mean in-flight tokens',
    sweep: [0.1, 0.25, 0.5, 1],
  },
  slackTokens: {
    type: 'number',
    default: 65536,
    min: 0,
    doc: 'absolute overload slack in tokens, so affinity survives light load',
  },
  loadWeight: {
    type: 'number',
    default: 1,
    min: 0,
    doc: 'weight of queued tokens against uncached prefill tokens in the cost',
  },
  capacityTokens: {
    type: 'int',
    default: 1_000_000,
    min: 1,
    doc: 'index capacity per rank in tokens when the host gives no KV capacity (at least window)',
  },
  pendingMs: {
    type: 'number',
    default: 10_000,
    min: 0,
    doc: 'with an events index: host ms a prefix just sent counts as held before events confirm it',
  },
  coldPick: {
    type: 'enum',
    choices: ['auto', 'least-load', 'hash'],
    default: 'auto',
    doc: 'where a prompt no rank holds goes: least-load (by this dispatcher’s own load view), hash (the same rank from every router replica), auto (hash with an events index)',
  },
} as const satisfies OptionsSchema;

export interface CacheAwareOptions {
  /** Tokens per indexed window. Default 256. */
  window: number;
  /**
   * Index at most this many leading tokens of a prompt. Default 16384: the Mooncake trace
   * replayed on 16 ranks keeps 30.0% of 30.2% token hits with it (131,072 and 32,768: 30.2%;
   * 8,192: 29.6%; 4,096: 29.1%) and mean TTFT within 1%, while a router decodes and tokenizes
   * at most 16k tokens of a prompt (64 KB of text for the approximate tokenizer, below V8's
   * 128 KiB large-object threshold) instead of all of it.
   */
  maxPrefixTokens: number;
  /** Relative overload bound over the mean in-flight tokens. Default 0.25. */
  epsilon: number;
  /** Absolute overload slack in tokens, so affinity survives light load. Default 65536. */
  slackTokens: number;
  /** Weight of queued (in-flight) tokens against uncached prefill tokens in the cost. Default 1. */
  loadWeight: number;
  /** Index capacity per rank in tokens when RankState.kvCapacityTokens is absent. Default 1,000,000. */
  capacityTokens: number;
  /**
   * With an events index: how long (host ms) a prefix this dispatcher sent to a rank counts
   * as held there before the engine's events confirm it. Default 10,000.
   */
  pendingMs: number;
  /**
   * Where a prompt no rank holds goes: 'least-load' (least loaded by this dispatcher's own
   * counts, ties to the least churned cache), 'hash' (the jump-hash draws of the prompt's first
   * window among the ranks within the overload bound: every router replica picks the same
   * rank for a new prefix), 'auto' (hash when the host passes an events index, else
   * least-load). Default 'auto'.
   */
  coldPick: 'auto' | 'least-load' | 'hash';
}

export const CACHE_AWARE_DEFAULTS: CacheAwareOptions = {
  window: 256,
  maxPrefixTokens: 16384,
  epsilon: 0.25,
  slackTokens: 65536,
  loadWeight: 1,
  capacityTokens: 1_000_000,
  pendingMs: 10_000,
  coldPick: 'auto',
};

const NAME = 'cache_aware';

interface CacheAwareCore {
  readonly index: ChainedPrefixIndex;
  /** Carries per-rank state over a renumbering of the host's ranks (Method.remapRanks). */
  remap(moves: readonly number[], numRanks: number): void;
  /** Leading prompt tokens indexed (the option); none past it are read. */
  readonly maxPrefixTokens: number;
  /** The prompt's chained keys (memoized for the request last seen). */
  keysOf(ctx: MethodContext): readonly number[];
  /**
   * Matched tokens per rank number for the current keys (healthy ranks only; others 0), and
   * in `held` the ranks with a match. Reads only.
   */
  matchAll(ctx: MethodContext, keys: readonly number[]): number[];
  /** The healthy ranks matchAll found holding some of the prompt. */
  readonly held: readonly number[];
  /** Brings the index in step with the ranks, then records the final decision in it. */
  learn(ctx: MethodContext, decision: Decision): void;
  /**
   * Recent new (uncached) tokens written per rank, decayed per decision: how fast each
   * rank's cache is churning. Ties on load go to the rank churning least, which evens out
   * LRU pressure so no rank evicts its sessions' histories early. Kept in a common scale
   * (see learn), so only comparisons between ranks mean anything.
   */
  readonly fill: readonly number[];
  /**
   * With an events index: rank scores taken from it, and rank scores that fell back to the
   * learned index because events were missing or stale for that rank (counted in commit, for
   * the decisions this method made).
   */
  readonly sourceCounts: { eventsRankScores: number; fallbackRankScores: number };
  /** Counts where the scores of the decision just made came from (see sourceCounts). */
  countSources(ctx: MethodContext): void;
}

/** Per decision, recent fill decays by this factor (a memory of ~1,000 decisions). */
const FILL_DECAY = 0.999;

/**
 * Decay is applied lazily: every rank's fill shrinks by the same factor per decision, which
 * changes no comparison between ranks, so the values are kept unscaled and new fill is added
 * scaled up by 1 / FILL_DECAY^decisions instead. Past this scale they are brought back to
 * true values (one pass over the ranks every ~230,000 decisions).
 */
const FILL_RESCALE_AT = 1e100;

/**
 * The indexer (who holds which prefixes, learned from decisions) kept apart from the choice
 * (who should get this request), as Dynamo's kv-router separates them.
 */
function createCacheAwareCore(options: Record<string, unknown>): CacheAwareCore {
  const { window, cap: maxPrefixTokens } = readWindowAndCap(NAME, options, 'maxPrefixTokens', {
    window: CACHE_AWARE_DEFAULTS.window,
    cap: CACHE_AWARE_DEFAULTS.maxPrefixTokens,
  });
  const capacityTokens = readInt(
    NAME,
    options,
    'capacityTokens',
    CACHE_AWARE_DEFAULTS.capacityTokens,
    window,
  );
  const index = new ChainedPrefixIndex();
  const sourceCounts = { eventsRankScores: 0, fallbackRankScores: 0 };
  const pendingMs = readNumber(NAME, options, 'pendingMs', CACHE_AWARE_DEFAULTS.pendingMs, 0);
  const pending = new PendingPrefixes(pendingMs);
  const pendingMatched: number[] = [];
  let lastRequest: unknown;
  let lastIds: ArrayLike<number> | undefined;
  let lastLength = -1;
  const keys: number[] = [];
  const blockKeys: number[] = [];
  let lastShared = 0;
  const matched: number[] = [];
  const touched: number[] = [];
  const counts: number[] = [];
  let denseWritten = false;
  // One closure for the sparse match's health filter, pointed at the current ranks per call.
  const healthyRank = {
    ranks: [] as readonly RankState[],
    accept: (r: number): boolean =>
      r < healthyRank.ranks.length && (healthyRank.ranks[r] as RankState).healthy,
  };
  const healthyRanks: number[] = [];
  const liveRanks: number[] = [];
  const held: number[] = [];
  const fill: number[] = [];
  let fillGrowth = 1;
  // The load index's healthChanges when the learned index was last checked against health.
  let syncedAt = -1;

  // Keeps the index in step with the host's ranks: new ranks start empty, removed ones are
  // dropped, and a rank seen unhealthy is assumed to come back with an empty cache.
  function sync(ctx: MethodContext): void {
    if (index.numRanks !== ctx.ranks.length) {
      index.resize(ctx.ranks.length);
      while (fill.length < ctx.ranks.length) fill.push(0);
      fill.length = ctx.ranks.length;
    }
    // Nothing to clear unless health changed since the last pass over these ranks: learn
    // only adds to the decided rank, which is healthy.
    const changes = ctx.queries?.healthChanges;
    if (changes !== undefined && changes === syncedAt) return;
    for (const r of ctx.ranks) if (!r.healthy && index.size(r.rank) > 0) index.clear(r.rank);
    syncedAt = changes ?? -1;
  }

  function keysOf(ctx: MethodContext): readonly number[] {
    const ids = ctx.request.inputIds;
    // With an events index in a block size that divides the window, one pass of block keys
    // serves both indexes: a window's key is the key of its last block (both name the whole
    // prefix), so the events index costs no second hashing of the prompt.
    const bs = ctx.kvIndex?.blockSize;
    const shared = bs !== undefined && window % bs === 0 ? bs : 0;
    if (!ids || ids.length < Math.min(window, shared || window)) {
      if (ids) validateTokenIds(ids);
      keys.length = 0;
      blockKeys.length = 0;
      lastRequest = undefined;
      return keys;
    }
    if (
      ctx.request !== lastRequest ||
      ids !== lastIds ||
      ids.length !== lastLength ||
      shared !== lastShared
    ) {
      validateTokenIds(ids, Math.min(ids.length, maxPrefixTokens));
      if (shared > 0) {
        chainedBlockKeys(ids, shared, maxPrefixTokens, blockKeys);
        keys.length = 0;
        const step = window / shared;
        for (let i = step - 1; i < blockKeys.length; i += step) keys.push(blockKeys[i] as number);
      } else {
        chainedWindowHashes(ids, window, maxPrefixTokens, keys);
        blockKeys.length = 0;
      }
      lastRequest = ctx.request;
      lastIds = ids;
      lastLength = ids.length;
      lastShared = shared;
    }
    return keys;
  }

  /** The host renumbered its ranks: what was learned per rank follows its worker. */
  function remap(moves: readonly number[], numRanks: number): void {
    index.remap(moves, numRanks);
    pending.remap(moves, numRanks);
    // In place: the core hands out this array as `fill`.
    const moved = remapByRank(fill, moves, numRanks, () => 0);
    fill.length = numRanks;
    for (let r = 0; r < numRanks; r++) fill[r] = moved[r] as number;
    // Health is per worker: look again at every rank on the next decision.
    syncedAt = -1;
  }

  return {
    maxPrefixTokens,
    index,
    fill,
    remap,
    held,
    sourceCounts,
    keysOf,
    matchAll(ctx, k) {
      // No sync here: ranks the index does not know yet hold nothing, and unhealthy ranks are
      // not matched, so reading before the commit's sync gives the same answer.
      const kv = ctx.kvIndex;
      if (!kv) {
        // Learned index only: start from the ranks holding the first window (the inverted
        // index), so no rank that holds none of the prompt is visited. `matched` stays a dense
        // array of zeros between calls; only the entries written last time are reset.
        const n = ctx.ranks.length;
        if (matched.length !== n || denseWritten) {
          matched.length = n;
          matched.fill(0);
          denseWritten = false;
        } else for (const r of touched) if (r < n) matched[r] = 0;
        healthyRank.ranks = ctx.ranks;
        index.matchHolders(k, healthyRank.accept, touched, counts);
        held.length = 0;
        for (let i = 0; i < touched.length; i++) {
          const r = touched[i] as number;
          matched[r] = (counts[i] as number) * window;
          held.push(r);
        }
        return matched;
      }
      // The dense path writes every entry; the sparse one must then reset them all once.
      denseWritten = true;
      healthyRanks.length = 0;
      liveRanks.length = 0;
      for (const r of ctx.healthy) {
        if (kv.isLive(r.rank)) liveRanks.push(r.rank);
        else healthyRanks.push(r.rank);
      }
      matched.length = ctx.ranks.length;
      matched.fill(0);
      if (k.length > 0 && healthyRanks.length > 0) index.match(k, healthyRanks, matched);
      for (let i = 0; i < matched.length; i++) matched[i] = (matched[i] as number) * window;
      if (liveRanks.length > 0) {
        // What this dispatcher sent in the last pendingMs and the engine has not reported
        // yet (prefills in flight) counts as held too.
        const pendingOn = k.length > 0 && pending.size() > 0;
        if (pendingOn) {
          pending.match(k, liveRanks, ctx.nowMs, pendingMatched);
          for (const r of liveRanks) pendingMatched[r] = (pendingMatched[r] as number) * window;
        }
        const ids = ctx.request.inputIds;
        const bs = kv.blockSize;
        if (ids && bs !== undefined && blockKeys.length === 0 && window % bs !== 0) {
          // Block size not dividing the window: the events index needs keys of its own.
          chainedBlockKeys(ids, bs, maxPrefixTokens, blockKeys);
          lastRequest = undefined;
        }
        kv.matchKeys(blockKeys, liveRanks, matched);
        if (pendingOn) {
          for (const r of liveRanks) {
            const p = pendingMatched[r] as number;
            if (p > (matched[r] as number)) matched[r] = p;
          }
        }
      }
      held.length = 0;
      for (let r = 0; r < matched.length; r++) if ((matched[r] as number) > 0) held.push(r);
      return matched;
    },
    countSources(ctx) {
      const kv = ctx.kvIndex;
      if (!kv) return;
      for (const r of ctx.healthy) {
        if (kv.isLive(r.rank)) sourceCounts.eventsRankScores++;
        else sourceCounts.fallbackRankScores++;
      }
    },
    learn(ctx, decision) {
      sync(ctx);
      const k = keysOf(ctx);
      // The memo only bridges select and commit of one dispatch: a host reusing a request
      // object and its token buffer for the next prompt must not get stale keys.
      lastRequest = undefined;
      if (k.length === 0) return;
      const state = ctx.ranks[decision.rank];
      const capTokens = state?.kvCapacityTokens ?? capacityTokens;
      const added = index.insert(decision.rank, k, Math.max(1, Math.floor(capTokens / window)));
      if (ctx.kvIndex) pending.insert(decision.rank, k, ctx.nowMs);
      fillGrowth /= FILL_DECAY;
      if (fillGrowth > FILL_RESCALE_AT) {
        for (let i = 0; i < fill.length; i++) fill[i] = (fill[i] as number) / fillGrowth;
        fillGrowth = 1;
        ctx.coolChanged?.(fill);
      }
      if (added > 0) {
        fill[decision.rank] = (fill[decision.rank] ?? 0) + added * window * fillGrowth;
        ctx.coolChanged?.(fill, decision.rank);
      }
    },
  };
}

export const createCacheAware = defineMethod(
  NAME,
  CACHE_AWARE_OPTIONS,
  // Values are checked against the schema first; the core reads the defaults that depend on
  // the window from the raw options.
  (checked, options): Method => {
    const core = createCacheAwareCore(options);
    const coldPick = checked.coldPick;
    const names = new NamedRanks();
    const epsilon = readNumber(NAME, options, 'epsilon', CACHE_AWARE_DEFAULTS.epsilon, 0);
    const slackTokens = readNumber(
      NAME,
      options,
      'slackTokens',
      CACHE_AWARE_DEFAULTS.slackTokens,
      0,
    );
    const loadWeight = readNumber(NAME, options, 'loadWeight', CACHE_AWARE_DEFAULTS.loadWeight, 0);
    const counts = { hits: 0, overloaded: 0, misses: 0, hashedMisses: 0, matchedTokens: 0 };
    const candidates: RankState[] = [];

    // Among ranks within the bound, the least cost = (w - matched) + loadWeight x load; equal
    // costs go to the rotating tie-break. `offer` keeps the cheapest candidates so far.
    let choiceCost = Number.POSITIVE_INFINITY;
    function offer(r: RankState, matchedTokens: number, w: number): void {
      const cost = w - matchedTokens + loadWeight * r.inFlightTokens;
      if (cost < choiceCost) {
        choiceCost = cost;
        candidates.length = 0;
      }
      if (cost === choiceCost) candidates.push(r);
    }

    // Every healthy rank within the bound. Empty only if the bound were below the mean (it
    // never is: the least-loaded passes), then the least loaded.
    function cheapestScanned(
      ctx: MethodContext,
      matched: readonly number[],
      w: number,
      bound: number,
    ): RankState {
      candidates.length = 0;
      choiceCost = Number.POSITIVE_INFINITY;
      for (const r of ctx.healthy) {
        if (r.inFlightTokens <= bound) offer(r, matched[r.rank] as number, w);
      }
      return candidates.length > 0
        ? ctx.tieBreak(candidates)
        : leastLoadedCool(ctx, ctx.healthy, core.fill);
    }

    // The same choice from the load index. The ranks holding part of the prompt are offered
    // one by one. Every other rank costs w + loadWeight x load, so among them only the least
    // loaded (with loadWeight 0: any within the bound) can be cheapest, and of those the one
    // the tie-break reaches first stands for all. The index need not leave the holders out of
    // that query: a holder it returns has at most that load and costs less by its match, so
    // it already beats every rank the query stands for.
    function cheapestIndexed(
      queries: LoadQueries,
      ctx: MethodContext,
      matched: readonly number[],
      held: readonly number[],
      w: number,
      bound: number,
    ): RankState {
      candidates.length = 0;
      choiceCost = Number.POSITIVE_INFINITY;
      for (const rank of held) {
        const r = ctx.ranks[rank] as RankState;
        if (r.inFlightTokens <= bound) offer(r, matched[rank] as number, w);
      }
      const other = queries.firstWithin(loadWeight > 0 ? queries.leastTokens() : bound);
      if (other >= 0) offer(ctx.ranks[other] as RankState, 0, w);
      return candidates.length > 0 ? ctx.tieBreak(candidates) : queries.leastCool(core.fill);
    }

    return {
      name: NAME,
      maxPromptTokens: core.maxPrefixTokens,
      select(ctx: MethodContext): Decision {
        const keys = core.keysOf(ctx);
        const matched = core.matchAll(ctx, keys);
        const held = core.held;
        const totals = healthyTotals(ctx);
        const w = promptLength(ctx.request);
        const bound =
          ((1 + epsilon) * (w + totals.healthyTokens)) / totals.healthyCount + slackTokens;
        const queries = ctx.queries;
        let best = 0;
        for (const r of held) {
          const m = matched[r] as number;
          if (m > best) best = m;
        }
        const ranks = ctx.ranks;
        if (best === 0) {
          const first = keys[0];
          const hash = coldPick === 'hash' || (coldPick === 'auto' && ctx.kvIndex !== undefined);
          if (hash && first !== undefined) {
            // The first window's own order over ranks (as consistent_hash's: Maglev draws over
            // the ranks' names, else jump-hash draws): the first healthy rank within the bound.
            const drawn = names.firstDrawWithin(ranks, first, 'tokens', bound, 0, HASH_DRAWS);
            if (drawn >= 0) return { rank: drawn, reason: 'cache-miss-hash' };
          }
          const least = queries
            ? queries.leastCool(core.fill)
            : leastLoadedCool(ctx, ctx.healthy, core.fill);
          return { rank: least.rank, reason: 'cache-miss-least-load' };
        }
        candidates.length = 0;
        for (const r of held) if (matched[r] === best) candidates.push(ranks[r] as RankState);
        const holder = leastLoadedCool(ctx, candidates, core.fill);
        if (holder.inFlightTokens <= bound) {
          return { rank: holder.rank, reason: 'cache-hit', matchedTokens: best };
        }
        // The holder is overloaded: cheapest of the others (uncached prefill + queued work).
        const target = queries
          ? cheapestIndexed(queries, ctx, matched, held, w, bound)
          : cheapestScanned(ctx, matched, w, bound);
        const m = matched[target.rank] as number;
        return { rank: target.rank, reason: 'cache-hit-overloaded', matchedTokens: m };
      },
      commit(ctx: MethodContext, decision: Decision): void {
        const own = decision.reason.startsWith('cache-');
        if (decision.reason === 'cache-hit') counts.hits++;
        else if (decision.reason === 'cache-hit-overloaded') counts.overloaded++;
        else if (decision.reason === 'cache-miss-least-load') counts.misses++;
        else if (decision.reason === 'cache-miss-hash') {
          counts.misses++;
          counts.hashedMisses++;
        }
        counts.matchedTokens += decision.matchedTokens ?? 0;
        if (own) core.countSources(ctx);
        core.learn(ctx, decision);
      },
      remapRanks(moves: readonly number[], numRanks: number): void {
        core.remap(moves, numRanks);
        names.remap(moves, numRanks);
      },
      nameRanks(ids) {
        names.name(ids);
      },
      stats(): Record<string, number> {
        return {
          ...counts,
          ...core.sourceCounts,
          indexEntries: core.index.totalSize(),
          indexEvictions: core.index.evictions,
        };
      },
    };
  },
);
