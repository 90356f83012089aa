// Choices several methods share: the least-loaded rank, and among equally loaded ranks the
// one whose cache is coolest. Kept apart from any one method so methods depend on this module,
// never on each other.
import type { MethodContext, RankState } from './types.ts';

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
