// A host's renumbering of its ranks, as the methods and the load tracker receive it: `moves[old]`
// is the index the rank at `old` now stands at, or -1 where it left; indexes no move reaches
// are new ranks. One check of that shape, and one way to lay per-rank state out by it.

/**
 * Throws a RangeError naming the rank unless `moves` is a renumbering into `numRanks` ranks:
 * each move an index below numRanks or -1, no two ranks moved to one index. `what` names the
 * caller in the message.
 */
export function checkMoves(what: string, moves: readonly number[], numRanks: number): void {
  if (!Number.isInteger(numRanks) || numRanks < 0) {
    throw new RangeError(`${what}: numRanks must be a whole number >= 0, got ${numRanks}`);
  }
  const taken = new Set<number>();
  for (let old = 0; old < moves.length; old++) {
    const to = moves[old] as number;
    if (to === -1) continue;
    if (!Number.isInteger(to) || to < 0 || to >= numRanks) {
      throw new RangeError(`${what}: rank ${old} moves to ${to}, not a rank of ${numRanks} or -1`);
    }
    if (taken.has(to)) {
      throw new RangeError(
        `${what}: rank ${old} moves to ${to}, not a free rank of ${numRanks} or -1 (two ranks move to rank ${to})`,
      );
    }
    taken.add(to);
  }
}

/**
 * Per-rank state laid out by `moves`: `items[old]` at `moves[old]`, dropped where it left;
 * indexes no move reaches get `fresh(rank)`. `items` may be shorter than `moves` (state not
 * made yet for the last ranks).
 */
export function remapByRank<T>(
  items: readonly T[],
  moves: readonly number[],
  numRanks: number,
  fresh: (rank: number) => T,
): T[] {
  const out = new Array<T>(numRanks);
  const filled = new Uint8Array(numRanks);
  for (let old = 0; old < items.length; old++) {
    const to = moves[old] ?? -1;
    if (to >= 0 && to < numRanks) {
      out[to] = items[old] as T;
      filled[to] = 1;
    }
  }
  for (let r = 0; r < numRanks; r++) if (filled[r] === 0) out[r] = fresh(r);
  return out;
}
