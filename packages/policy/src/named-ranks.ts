// The ranks' names as a host gives them (Method.nameRanks) and the Maglev table over them
// (hashing/maglev.ts): the key order of the methods that hash keys over ranks
// (consistent_hash, cache_aware's cold pick) when the host named its ranks. A key's draws are
// then names, mapped to the ranks where those names stand now, so a renumbering moves no key
// and every host naming the same workers agrees.
import { MAGLEV_TABLE_SIZE, maglevEntry, maglevTable } from './hashing/maglev.ts';
import { firstKeyDrawWithin, withinLoad } from './pickers.ts';
import { remapByRank } from './rank-moves.ts';
import type { RankState } from './types.ts';

/**
 * The ranks' names as the host gave them (Method.nameRanks) and their Maglev table, built on
 * the first decision that needs it. The table holds name indexes, mapped to the ranks where
 * those names stand now: a renumbering that keeps the set of names only rewrites that map.
 */
export class NamedRanks {
  /** The name of each rank index (null: unnamed, never drawn); undefined: never named. */
  private byRank: (string | null)[] | undefined;
  /** The names the table was built from, each one's index there, and its rank now (-1: gone). */
  private tableNames: string[] = [];
  private position = new Map<string, number>();
  private rankOfName = new Int32Array(0);
  private table: Int32Array | undefined;

  name(ids: readonly (string | null)[]): void {
    const byRank = [...ids];
    const named = byRank.filter((id): id is string => id !== null);
    const same =
      this.table !== undefined &&
      named.length === this.tableNames.length &&
      named.every((id) => this.position.has(id));
    if (!same) {
      this.table = undefined;
      this.tableNames = named;
      this.position = new Map(named.map((id, i) => [id, i]));
      this.rankOfName = new Int32Array(named.length);
    }
    this.place(byRank);
  }

  /** The host renumbered its ranks: the names move with them; new ranks are unnamed until named. */
  remap(moves: readonly number[], numRanks: number): void {
    if (this.byRank) this.place(remapByRank(this.byRank, moves, numRanks, () => null));
  }

  /** Names now stand at these ranks: the table stays, only where each name's draws land moves. */
  private place(byRank: (string | null)[]): void {
    this.byRank = byRank;
    this.rankOfName.fill(-1);
    byRank.forEach((id, rank) => {
      const at = id === null ? undefined : this.position.get(id);
      if (at !== undefined) this.rankOfName[at] = rank;
    });
  }

  /**
   * The first of a key's draws `from` up to `to` (exclusive) that is a healthy rank with load
   * <= `max` in `order`, -1 when none is: Maglev draws over the names when they cover
   * `ranks`, else the key's jump-hash draws over rank indexes (firstKeyDrawWithin).
   */
  firstDrawWithin(
    ranks: readonly RankState[],
    key: number,
    order: 'tokens' | 'requests',
    max: number,
    from: number,
    to: number,
  ): number {
    if (!this.drawable(ranks.length)) return firstKeyDrawWithin(ranks, key, order, max, from, to);
    const table = this.table as Int32Array;
    const lo = key >>> 0;
    const hi = Math.floor(key / 4294967296);
    for (let attempt = from; attempt < to; attempt++) {
      const rank = this.rankOfName[
        table[maglevEntry(lo, hi, attempt, MAGLEV_TABLE_SIZE)] as number
      ] as number;
      if (rank >= 0 && withinLoad(ranks[rank] as RankState, order, max)) return rank;
    }
    return -1;
  }

  /** Whether decisions over `numRanks` ranks draw from the names (named, and as many). */
  private drawable(numRanks: number): boolean {
    if (this.byRank === undefined || this.byRank.length !== numRanks) return false;
    if (this.tableNames.length === 0) return false;
    this.table ??= maglevTable(this.tableNames);
    return true;
  }
}
