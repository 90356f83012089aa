// Choices several methods share: the least-loaded rank, and among equally loaded ranks the
// one whose cache is coolest. Kept apart from any one method so methods depend on this module,
// never on each other.
import { jumpRankOf } from './hashing/chained.ts';
import type { LoadTotals, MethodContext, RankState } from './types.ts';

const NO_FILL: readonly number[] = [];

/**
 * The least-loaded candidate (in-flight tokens, then requests); among equals the one whose
 * cache churns least (`fill[rank]`, 0 for ranks it does not list), then the dispatcher's
 * rotating tie-break. `candidates` must be non-empty.
 */
export function leastLoadedCool(
  ctx: MethodContext,
  candidates: readonly RankState[],
  fill: readonly number[],
): RankState {
  let best: RankState[] = [];
  let t = Number.POSITIVE_INFINITY;
  let q = Number.POSITIVE_INFINITY;
  let f = Number.POSITIVE_INFINITY;
  for (const r of candidates) {
    const rf = fill[r.rank] ?? 0;
    const cmp = r.inFlightTokens - t || r.inFlightRequests - q || rf - f;
    if (cmp < 0) {
      best = [r];
      t = r.inFlightTokens;
      q = r.inFlightRequests;
      f = rf;
    } else if (cmp === 0) best.push(r);
  }
  return best.length === 1 ? (best[0] as RankState) : ctx.tieBreak(best);
}

/** The least-loaded candidate (in-flight tokens, then requests), fair tie-break among equals. */
export function leastLoaded(ctx: MethodContext, candidates: readonly RankState[]): RankState {
  return leastLoadedCool(ctx, candidates, NO_FILL);
}

/**
 * The healthy rank with the least load in `order` ('tokens': in-flight tokens, then requests;
 * 'requests': in-flight requests), remaining ties by the dispatcher's rotating tie-break.
 * Indexed (O(log R)) when the dispatcher offers it, else one pass over the healthy ranks.
 */
export function leastBy(ctx: MethodContext, order: 'tokens' | 'requests'): RankState {
  if (ctx.pickLeast) return ctx.pickLeast(order);
  return scanLeast(ctx, order);
}

/** leastBy's definition as a scan; the dispatcher's indexed answer must equal it. */
export function scanLeast(ctx: MethodContext, order: 'tokens' | 'requests'): RankState {
  const healthy = ctx.healthy;
  const byTokens = order === 'tokens';
  let minTokens = Number.POSITIVE_INFINITY;
  let minRequests = Number.POSITIVE_INFINITY;
  let count = 0;
  let best = healthy[0] as RankState;
  for (const r of healthy) {
    const t = byTokens ? r.inFlightTokens : 0;
    if (t < minTokens || (t === minTokens && r.inFlightRequests < minRequests)) {
      minTokens = t;
      minRequests = r.inFlightRequests;
      best = r;
      count = 1;
    } else if (t === minTokens && r.inFlightRequests === minRequests) {
      count++;
    }
  }
  if (count === 1) return best;
  return ctx.tieBreak(
    healthy.filter(
      (r) => (byTokens ? r.inFlightTokens : 0) === minTokens && r.inFlightRequests === minRequests,
    ),
  );
}

/**
 * The healthy ranks' count and summed load: the host's running totals when the dispatcher
 * offers them (O(1)), else one pass over the healthy ranks. Loads are whole numbers, so both
 * give the same sums.
 */
export function healthyTotals(ctx: MethodContext): LoadTotals {
  if (ctx.totals) return ctx.totals;
  let tokens = 0;
  let requests = 0;
  for (const r of ctx.healthy) {
    tokens += r.inFlightTokens;
    requests += r.inFlightRequests;
  }
  return { healthyCount: ctx.healthy.length, healthyTokens: tokens, healthyRequests: requests };
}

/**
 * Draws of a key's jump-hash order a walk looks at before it gives up (each caller then has a
 * fallback that always finds a rank). With a fifth of ranks acceptable, 64 draws all missing
 * has odds under 1e-6.
 */
export const HASH_DRAWS = 64;

/**
 * The first of a key's jump-hash draws (hashing/chained.ts jumpRankOf, key words `lo` and
 * `hi`) `from` up to `to` (exclusive) that is a healthy rank with load <= `max` in `order`
 * ('tokens': in-flight tokens, 'requests': in-flight requests); -1 when none is.
 * O(log R) per draw, and the same rank on every router instance that sees the same loads.
 */
export function firstDrawWithin(
  ranks: readonly RankState[],
  lo: number,
  hi: number,
  order: 'tokens' | 'requests',
  max: number,
  from = 0,
  to = HASH_DRAWS,
): number {
  const n = ranks.length;
  for (let attempt = from; attempt < to; attempt++) {
    const rank = jumpRankOf(lo, hi, attempt, n);
    if (withinLoad(ranks[rank] as RankState, order, max)) return rank;
  }
  return -1;
}

/** Whether a hash walk may stop at `r`: healthy, with load <= `max` in `order`. */
export function withinLoad(r: RankState, order: 'tokens' | 'requests', max: number): boolean {
  return r.healthy && (order === 'tokens' ? r.inFlightTokens : r.inFlightRequests) <= max;
}

/** firstDrawWithin for a 53-bit key (its low and high words, as hashing/chained.ts jumpRank). */
export function firstKeyDrawWithin(
  ranks: readonly RankState[],
  key: number,
  order: 'tokens' | 'requests',
  max: number,
  from = 0,
  to = HASH_DRAWS,
): number {
  return firstDrawWithin(ranks, key >>> 0, Math.floor(key / 2 ** 32), order, max, from, to);
}

/**
 * Where a key goes when its own rank is down: the first healthy rank among the key's jump-hash
 * draws seeded by two uint32 words (firstDrawWithin with no load bound), or, when none of them
 * is (most ranks down), the first healthy rank at or after the first draw. A function of the
 * key and the ranks' health alone, so every router instance agrees; a dead rank's keys spread
 * evenly over the others, and a second failure moves only the keys on that rank. O(log R) per
 * draw; the expected draws are R / healthy ranks.
 */
export function failoverRank(ctx: MethodContext, seedA: number, seedB: number): number {
  const ranks = ctx.ranks;
  const n = ranks.length;
  const drawn = firstDrawWithin(ranks, seedA, seedB, 'tokens', Number.POSITIVE_INFINITY);
  if (drawn >= 0) return drawn;
  const from = jumpRankOf(seedA, seedB, 0, n);
  if (ctx.queries) return ctx.queries.firstHealthy(from);
  for (let i = 0; i < n; i++) {
    const rank = (from + i) % n;
    if ((ranks[rank] as RankState).healthy) return rank;
  }
  return (ctx.healthy[0] as RankState).rank; // unreachable: the dispatcher checks for one
}
