// Prefixes this dispatcher just sent to a rank, for the events path: the engine reports a
// block only once it is computed, so for the length of a prefill the events index does not
// know that a rank is about to hold a prompt, and a burst of requests sharing a new prefix
// would scatter. Dynamo's router keeps the same kind of record of its in-flight requests.
// Entries expire after `ttlMs` of host time: by then the engine has reported the blocks (or
// evicted them, which the events index knows and this record must not contradict for long).
//
// Layout: per rank, a Map from window key to the host time it was last sent; insertion order
// is time order (a re-sent key is moved to the end), so expiry pops from the front.

import { remapByRank } from '../rank-moves.ts';

export class PendingPrefixes {
  private ranks: Map<number, number>[] = [];

  constructor(readonly ttlMs: number) {}

  private rank(r: number): Map<number, number> {
    while (this.ranks.length <= r) this.ranks.push(new Map());
    return this.ranks[r] as Map<number, number>;
  }

  /** Records that `keys` (a prompt's chained window keys) were sent to `rank` at `nowMs`. */
  insert(rank: number, keys: readonly number[], nowMs: number): void {
    const m = this.rank(rank);
    this.expire(m, nowMs);
    for (const k of keys) {
      m.delete(k);
      m.set(k, nowMs);
    }
  }

  /** out[r] = leading keys of `keys` sent to r within ttlMs, for each r in `ranks`. */
  match(keys: readonly number[], ranks: readonly number[], nowMs: number, out: number[]): void {
    const oldest = nowMs - this.ttlMs;
    for (const r of ranks) {
      const m = this.ranks[r];
      let n = 0;
      if (m !== undefined && m.size > 0) {
        for (; n < keys.length; n++) {
          const t = m.get(keys[n] as number);
          if (t === undefined || t < oldest) break;
        }
      }
      out[r] = n;
    }
  }

  clear(rank: number): void {
    this.ranks[rank]?.clear();
  }

  /** The host renumbered its ranks (Method.remapRanks): each rank's sends follow it. */
  remap(moves: readonly number[], numRanks: number): void {
    this.ranks = remapByRank(this.ranks, moves, numRanks, () => new Map<number, number>());
  }

  size(): number {
    let n = 0;
    for (const m of this.ranks) n += m.size;
    return n;
  }

  private expire(m: Map<number, number>, nowMs: number): void {
    for (const [k, t] of m) {
      if (nowMs - t <= this.ttlMs) break;
      m.delete(k);
    }
  }
}
