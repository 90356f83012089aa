// Which ranks hold which prefixes, as far as the dispatcher's own decisions tell: one
// bounded LRU set of chained window keys per rank. An approximation of each rank's radix
// cache that needs no KV events from workers (Dynamo's indexer needs them; sglang's
// cache_aware router keeps an approximate tree per worker the same way).
//
// LRU order mirrors a radix cache's leaf-first eviction: a request's windows are touched
// deepest first, so its shorter prefixes are always the more recently used and are evicted
// last, and a prefix that survives implies its parents survive (what the joint walk in
// `match` relies on to stop at the first missing window).

import { remapByRank } from '../rank-moves.ts';

export class ChainedPrefixIndex {
  private sets: Map<number, true>[] = [];
  // Inverted: which ranks hold each key, so a match starts from the ranks holding the first
  // window instead of asking every rank.
  private holders = new Map<number, number[]>();
  evictions = 0;

  /** Number of ranks tracked; grows and shrinks with the host's rank count. */
  resize(numRanks: number): void {
    while (this.sets.length < numRanks) this.sets.push(new Map());
    for (let r = numRanks; r < this.sets.length; r++) this.clear(r);
    if (this.sets.length > numRanks) this.sets.length = numRanks;
  }

  private addHolder(key: number, rank: number): void {
    const list = this.holders.get(key);
    if (list) list.push(rank);
    else this.holders.set(key, [rank]);
  }

  private dropHolder(key: number, rank: number): void {
    const list = this.holders.get(key);
    if (!list) return;
    const i = list.indexOf(rank);
    if (i < 0) return;
    list[i] = list[list.length - 1] as number;
    list.pop();
    if (list.length === 0) this.holders.delete(key);
  }

  get numRanks(): number {
    return this.sets.length;
  }

  /**
   * The host renumbered its ranks: rank `old`'s keys now belong to `moves[old]`, or are
   * forgotten where it left (-1); the index then tracks `numRanks` ranks, new ones empty.
   * O(keys held), for a change of the rank set, never per request.
   */
  remap(moves: readonly number[], numRanks: number): void {
    const sets = remapByRank(this.sets, moves, numRanks, () => new Map<number, true>());
    this.sets = sets;
    this.holders.clear();
    for (let r = 0; r < sets.length; r++) {
      for (const key of (sets[r] as Map<number, true>).keys()) this.addHolder(key, r);
    }
  }

  /** Forgets everything a rank held (it restarted, died, or was removed). */
  clear(rank: number): void {
    const set = this.sets[rank];
    if (!set || set.size === 0) return;
    for (const key of set.keys()) this.dropHolder(key, rank);
    set.clear();
  }

  /** Entries (windows) held for a rank. */
  size(rank: number): number {
    return this.sets[rank]?.size ?? 0;
  }

  totalSize(): number {
    let n = 0;
    for (const s of this.sets) n += s.size;
    return n;
  }

  /**
   * For every rank in `ranks`, the number of leading keys it holds, written to
   * `out[rank]` (0 for ranks not listed stays untouched; callers reset). Walks the keys once
   * with the shrinking set of ranks still matching, so the cost is the sum of matched
   * lengths, not ranks x keys.
   */
  match(keys: readonly number[], ranks: readonly number[], out: number[]): void {
    let alive = ranks.slice();
    for (const r of alive) out[r] = 0;
    for (let i = 0; i < keys.length && alive.length > 0; i++) {
      const key = keys[i] as number;
      const next: number[] = [];
      for (const r of alive) {
        if (this.sets[r]?.has(key)) {
          out[r] = i + 1;
          next.push(r);
        }
      }
      alive = next;
    }
  }

  /**
   * The ranks holding at least the first key that `accept` admits, with how many leading keys
   * each holds: `outRanks[i]` holds `outCounts[i]` keys (both cleared first). Same answers as
   * `match` for those ranks (every rank not listed holds none), at a cost of the holders'
   * matched lengths, whatever the rank count.
   */
  matchHolders(
    keys: readonly number[],
    accept: (rank: number) => boolean,
    outRanks: number[],
    outCounts: number[],
  ): void {
    outRanks.length = 0;
    outCounts.length = 0;
    if (keys.length === 0) return;
    const first = this.holders.get(keys[0] as number);
    if (!first) return;
    for (const r of first) {
      if (!accept(r)) continue;
      const set = this.sets[r] as Map<number, true>;
      let n = 1;
      while (n < keys.length && set.has(keys[n] as number)) n++;
      outRanks.push(r);
      outCounts.push(n);
    }
  }

  /**
   * Records that `rank` now caches the prefixes `keys` (all windows of one request), keeping
   * at most `capacity` keys for the rank (least recently used go first). Returns how many
   * keys were new to the rank (what it had to prefill, as far as the index knows).
   */
  insert(rank: number, keys: readonly number[], capacity: number): number {
    const set = this.sets[rank];
    if (!set) return 0;
    let added = 0;
    for (let i = keys.length - 1; i >= 0; i--) {
      const key = keys[i] as number;
      // delete + set moves the key to the young end of the Map's insertion order.
      if (!set.delete(key)) {
        added++;
        if (set.size >= capacity) {
          const oldest = set.keys().next();
          if (!oldest.done) {
            set.delete(oldest.value);
            this.dropHolder(oldest.value, rank);
            this.evictions++;
          }
        }
        this.addHolder(key, rank);
      }
      set.set(key, true);
    }
    return added;
  }
}
