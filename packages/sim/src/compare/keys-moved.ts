// Keys moved by a cluster change: of the sessions (WorkloadRequest.sessionKey) that sent a
// request both before and after the change, the fraction whose first request after it ran on
// a different rank than their last request before it. Counts what the policy did, including
// moves its load balancing would have made anyway; for a rank that died, its own sessions
// must move, so those are reported apart from the "collateral" ones.
import type { RequestRecord } from '../metrics/types.ts';

export interface KeysMoved {
  atMs: number;
  /** Sessions active on both sides of the change. */
  sessions: number;
  moved: number;
  /** moved / sessions. */
  fraction: number;
  /** Sessions that were on a rank that went away (they must move). */
  orphaned: number;
  /** Sessions moved although their rank stayed (what a minimal-disruption method avoids). */
  collateral: number;
}

/**
 * `lostRanks`: ranks that went away at `atMs` (rank-down; for set-ranks to fewer ranks, the
 * removed ones). Records must carry arrival times and ranks of their final placement.
 */
export function keysMoved(
  records: readonly RequestRecord[],
  atMs: number,
  lostRanks: readonly number[] = [],
): KeysMoved {
  const before = new Map<string, { t: number; rank: number }>();
  const after = new Map<string, { t: number; rank: number }>();
  for (const r of records) {
    if (r.arrivalMs < atMs) {
      const prev = before.get(r.sessionKey);
      if (!prev || r.arrivalMs >= prev.t)
        before.set(r.sessionKey, { t: r.arrivalMs, rank: r.rank });
    } else {
      const next = after.get(r.sessionKey);
      if (!next || r.arrivalMs < next.t) after.set(r.sessionKey, { t: r.arrivalMs, rank: r.rank });
    }
  }
  let sessions = 0;
  let moved = 0;
  let orphaned = 0;
  let collateral = 0;
  for (const [key, b] of before) {
    const a = after.get(key);
    if (!a) continue;
    sessions++;
    const lost = lostRanks.includes(b.rank);
    if (lost) orphaned++;
    if (a.rank !== b.rank) {
      moved++;
      if (!lost) collateral++;
    }
  }
  return {
    atMs,
    sessions,
    moved,
    fraction: sessions === 0 ? 0 : moved / sessions,
    orphaned,
    collateral,
  };
}
