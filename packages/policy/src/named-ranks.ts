// The ranks' names as a host gives them (Method.nameRanks) and the Maglev table over them
// (hashing/maglev.ts): the key order of the methods that hash keys over ranks
// (consistent_hash, cache_aware's cold pick) when the host named its ranks. A key's draws are
// then names, mapped to the ranks where those names stand now, so a renumbering moves no key
// and every host naming the same workers agrees.
import { MAGLEV_TABLE_SIZE, maglevEntry, maglevTable } from './hashing/maglev.ts';
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
    this.byRank = byRank;
    if (!same) {
      this.table = undefined;
      this.tableNames = named;
      this.position = new Map(named.map((id, i) => [id, i]));
    }
    this.rankOfName = new Int32Array(this.tableNames.length).fill(-1);
    byRank.forEach((id, rank) => {
      if (id !== null) this.rankOfName[this.position.get(id) as number] = rank;
    });
  }

  remap(moves: readonly number[], numRanks: number): void {
    const old = this.byRank;
    if (!old) return;
    const byRank: (string | null)[] = new Array(numRanks).fill(null);
    moves.forEach((to, from) => {
      if (to >= 0) byRank[to] = old[from] ?? null;
    });
    // The same names at new indexes: the table stands; new ranks are unnamed until the host
    // names them.
    this.byRank = byRank;
    this.rankOfName.fill(-1);
    byRank.forEach((id, rank) => {
      const at = id === null ? undefined : this.position.get(id);
      if (at !== undefined) this.rankOfName[at] = rank;
    });
  }

  /** Whether decisions over `numRanks` ranks draw from the names (named, and as many). */
  drawable(numRanks: number): boolean {
    if (this.byRank === undefined || this.byRank.length !== numRanks) return false;
    if (this.tableNames.length === 0) return false;
    this.table ??= maglevTable(this.tableNames);
    return true;
  }

  /**
   * As firstKeyDrawWithin, over the key's Maglev draws `from` up to `to`: the first that is a
   * healthy rank within `max`, -1 when none is.
   */
  firstWithin(
    ranks: readonly RankState[],
    key: number,
    order: 'tokens' | 'requests',
    max: number,
    from: number,
    to: number,
  ): number {
    const table = this.table as Int32Array;
    const lo = key >>> 0;
    const hi = Math.floor(key / 4294967296);
    for (let attempt = from; attempt < to; attempt++) {
      const rank = this.rankOfName[
        table[maglevEntry(lo, hi, attempt, MAGLEV_TABLE_SIZE)] as number
      ] as number;
      if (rank < 0) continue;
      const r = ranks[rank] as RankState;
      if (r.healthy && (order === 'tokens' ? r.inFlightTokens : r.inFlightRequests) <= max) {
        return rank;
      }
    }
    return -1;
  }
}
