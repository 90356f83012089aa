// An index over the ranks' load, kept by the LoadTracker as it counts, so the least-loaded
// choice costs O(log R) instead of a scan of every rank.
//
// Two min segment trees over rank slots: one ordered by (in-flight tokens, in-flight
// requests), one by in-flight requests. An unhealthy rank's leaf is +Infinity, so it never
// wins while a healthy one exists. Each node keeps the minimum of its subtree, so a caller
// can find the first minimal rank at or after a cursor, cyclically (exactly the rotating
// tie-break the dispatcher applies to a scan, so indexed and scanned choices are the same rank
// every time), and whether another rank shares that minimum (the next one after it, found
// the same way). An update re-pulls its leaf's path only as far as a node's minimum changes:
// among many idle ranks, a request claimed or released changes one or two nodes, not log R.
//
// A third tree, kept only while a method has bound its own per-rank values to it (bindCool),
// orders by (tokens, requests, cool[rank]): cache_aware's least loaded, ties to the coolest
// cache; its nodes also count the leaves at their minimum. The first rank within a token
// bound is found by pruning subtrees by their least tokens, so it too visits O(log R) nodes.
//
// Each tree is brought up to date when it is next queried, not on every update: an update
// marks the rank stale in each tree, and a query first re-pulls the stale ranks' paths. A
// method that reads one order (total_tokens, total_requests) never pays for the other, and
// round_robin, which reads none, pays for neither; a rank updated several times between two
// queries is pulled once.
//
// Cost: O(log R) per update and per query; 3 x 8 bytes per tree node, and 3 x 8 + 4 more
// while cool values are bound.

export interface LoadLeaf {
  healthy: boolean;
  inFlightTokens: number;
  inFlightRequests: number;
}

/** Which order a query follows: (tokens, requests) or requests alone. */
export type LoadOrder = 'tokens' | 'requests';

// What firstFrom searches for (see meets).
const TOKENS = 0;
const REQUESTS = 1;
const WITHIN = 2;
const COOL = 3;

/**
 * Ranks whose leaf in one tree is stale, each listed once, in the order they were marked: a
 * flag per rank and the list with its count (typed arrays, so marking allocates nothing).
 */
class StaleRanks {
  private flags: Uint8Array;
  /**
   * The marked ranks in order; after `drain()` returns n, the first n stay readable until the
   * next mark.
   */
  readonly list: Int32Array;
  private count = 0;

  constructor(slots: number) {
    this.flags = new Uint8Array(slots);
    this.list = new Int32Array(slots);
  }

  get any(): boolean {
    return this.count > 0;
  }

  mark(rank: number): void {
    if (this.flags[rank] === 1) return;
    this.flags[rank] = 1;
    this.list[this.count++] = rank;
  }

  /** Unmarks every rank and returns how many `list` holds. */
  drain(): number {
    const count = this.count;
    for (let i = 0; i < count; i++) this.flags[this.list[i] as number] = 0;
    this.count = 0;
    return count;
  }
}

// healthChanges values are drawn from one counter for every index, so a method that remembers
// one cannot mistake another tracker's index for the one it saw.
let changeStamp = 0;

export class LoadIndex {
  private n = 0;
  private size = 1;
  // (tokens, requests) tree
  private tTok = new Float64Array(2);
  private tReq = new Float64Array(2);
  // requests tree
  private rReq = new Float64Array(2);
  // Ranks whose leaf in the (tokens, requests) tree, or in the requests tree, is stale.
  private tStale = new StaleRanks(0);
  private rStale = new StaleRanks(0);
  private healthyN = 0;
  private healthyFlags = new Uint8Array(0);
  private sumTok = 0;
  private sumReq = 0;
  private leafTok = new Float64Array(0);
  private leafReq = new Float64Array(0);
  private changes = ++changeStamp;
  // (tokens, requests, cool) tree, while bound
  private cool: readonly number[] | undefined;
  private cTok = new Float64Array(0);
  private cReq = new Float64Array(0);
  private cCool = new Float64Array(0);
  private cCnt = new Int32Array(0);
  // Ranks whose cool leaf is stale: updates wait for the next cool query, so a rank whose load
  // changes many times between two cold misses is re-read once.
  private coolStale = new StaleRanks(0);

  constructor(numRanks = 0) {
    this.resize(numRanks);
  }

  get numRanks(): number {
    return this.n;
  }

  /** Healthy ranks now. */
  get healthyCount(): number {
    return this.healthyN;
  }

  /** In-flight tokens summed over healthy ranks. */
  get healthyTokens(): number {
    return this.sumTok;
  }

  /** In-flight requests summed over healthy ranks. */
  get healthyRequests(): number {
    return this.sumReq;
  }

  /** Bumped whenever a rank's health changes or slots are added or removed. */
  get healthChanges(): number {
    return this.changes;
  }

  /** The per-rank values the cool order reads (see bindCool), or undefined. */
  get coolValues(): readonly number[] | undefined {
    return this.cool;
  }

  /** Grows or shrinks to `numRanks` slots; new slots are healthy and idle. */
  resize(numRanks: number): void {
    this.changes = ++changeStamp;
    const old = this.n;
    const oldFlags = this.healthyFlags;
    const oldTok = this.leafTok;
    const oldReq = this.leafReq;
    let size = 1;
    while (size < numRanks) size *= 2;
    this.n = numRanks;
    this.size = size;
    this.tTok = new Float64Array(2 * size).fill(Number.POSITIVE_INFINITY);
    this.tReq = new Float64Array(2 * size).fill(Number.POSITIVE_INFINITY);
    this.rReq = new Float64Array(2 * size).fill(Number.POSITIVE_INFINITY);
    this.healthyFlags = new Uint8Array(numRanks);
    this.tStale = new StaleRanks(numRanks);
    this.rStale = new StaleRanks(numRanks);
    this.leafTok = new Float64Array(numRanks);
    this.leafReq = new Float64Array(numRanks);
    this.healthyN = 0;
    this.sumTok = 0;
    this.sumReq = 0;
    for (let i = 0; i < numRanks; i++) {
      const kept = i < old;
      const healthy = kept ? oldFlags[i] === 1 : true;
      this.healthyFlags[i] = healthy ? 1 : 0;
      this.leafTok[i] = kept ? (oldTok[i] as number) : 0;
      this.leafReq[i] = kept ? (oldReq[i] as number) : 0;
      if (healthy) {
        this.healthyN++;
        this.sumTok += this.leafTok[i] as number;
        this.sumReq += this.leafReq[i] as number;
      }
      this.writeLeafT(i);
      this.writeLeafR(i);
    }
    for (let p = size - 1; p >= 1; p--) {
      this.pullT(p);
      this.pullR(p);
    }
    if (this.cool) this.bindCool(this.cool);
  }

  /**
   * Records rank `rank`'s current state. A healthy rank's load must be finite: +Infinity marks
   * an unhealthy leaf, so the searches tell the two apart by value (the tracker's totals are
   * bounded integers).
   */
  set(rank: number, leaf: LoadLeaf): void {
    if (leaf.healthy && !(leaf.inFlightTokens < Infinity && leaf.inFlightRequests < Infinity)) {
      throw new RangeError(
        `LoadIndex.set: rank ${rank} is healthy with a load that is not finite (${leaf.inFlightTokens} tokens, ${leaf.inFlightRequests} requests)`,
      );
    }
    const was = this.healthyFlags[rank] === 1;
    if (was !== leaf.healthy) this.changes = ++changeStamp;
    if (was) {
      this.healthyN--;
      this.sumTok -= this.leafTok[rank] as number;
      this.sumReq -= this.leafReq[rank] as number;
    }
    this.healthyFlags[rank] = leaf.healthy ? 1 : 0;
    this.leafTok[rank] = leaf.inFlightTokens;
    this.leafReq[rank] = leaf.inFlightRequests;
    if (leaf.healthy) {
      this.healthyN++;
      this.sumTok += leaf.inFlightTokens;
      this.sumReq += leaf.inFlightRequests;
    }
    // Sums of integers stay exact; an idle healthy fleet must read exactly 0.
    if (this.healthyN === 0) {
      this.sumTok = 0;
      this.sumReq = 0;
    }
    this.tStale.mark(rank);
    this.rStale.mark(rank);
    if (this.cool) this.updateCool(rank);
  }

  /** Brings `order`'s tree up to date: each stale leaf's path, as far as a minimum changes. */
  private flush(order: LoadOrder): void {
    if (order === 'tokens') {
      if (this.tStale.any) this.flushT();
    } else if (this.rStale.any) this.flushR();
  }

  // One loop per tree, not one loop with a branch: the merged loop was slower in four of five
  // alternating pairs of total_tokens at 1,024 ranks.
  private flushT(): void {
    const count = this.tStale.drain();
    const list = this.tStale.list;
    for (let i = 0; i < count; i++) {
      const rank = list[i] as number;
      this.writeLeafT(rank);
      for (let p = (rank + this.size) >> 1; p >= 1 && this.pullT(p); p >>= 1);
    }
  }

  private flushR(): void {
    const count = this.rStale.drain();
    const list = this.rStale.list;
    for (let i = 0; i < count; i++) {
      const rank = list[i] as number;
      this.writeLeafR(rank);
      for (let p = (rank + this.size) >> 1; p >= 1 && this.pullR(p); p >>= 1);
    }
  }

  private flushCool(): void {
    const count = this.coolStale.drain();
    for (let i = 0; i < count; i++) {
      const rank = this.coolStale.list[i] as number;
      if (rank >= this.n) continue;
      this.writeCoolLeaf(rank);
      for (let p = (rank + this.size) >> 1; p >= 1; p >>= 1) this.pullCool(p);
    }
  }

  /**
   * Orders a third tree by (tokens, requests, values[rank]) (a missing value counts as 0) and
   * keeps it until another array is bound. The index reads `values` itself: after changing
   * one entry call updateCool(rank), after changing many call bindCool again. O(R).
   */
  bindCool(values: readonly number[]): void {
    this.cool = values;
    const len = 2 * this.size;
    if (this.cTok.length !== len) {
      this.cTok = new Float64Array(len);
      this.cReq = new Float64Array(len);
      this.cCool = new Float64Array(len);
      this.cCnt = new Int32Array(len);
      this.coolStale = new StaleRanks(this.size);
    } else this.coolStale.drain();
    for (let i = 0; i < this.size; i++) this.writeCoolLeaf(i);
    for (let p = this.size - 1; p >= 1; p--) this.pullCool(p);
  }

  /** Re-reads the bound value of `rank` (before the next cool query). */
  updateCool(rank: number): void {
    if (this.cool && rank >= 0 && rank < this.n) this.coolStale.mark(rank);
  }

  /** How many healthy ranks share the least (tokens, requests, cool); needs bound values. */
  coolMinCount(): number {
    if (this.coolStale.any) this.flushCool();
    return this.cool && this.healthyN > 0 ? (this.cCnt[1] as number) : 0;
  }

  /**
   * The first healthy rank at or after `cursor` (cyclically) whose (tokens, requests, cool)
   * is the least; -1 when none is healthy or no values are bound.
   */
  firstCoolMinFrom(cursor: number): number {
    if (!this.cool || this.healthyN === 0 || this.n === 0) return -1;
    if (this.coolStale.any) this.flushCool();
    return this.firstCyclic(COOL, cursor, 0);
  }

  /** The least in-flight tokens of a healthy rank; +Infinity when none is healthy. */
  leastTokens(): number {
    this.flush('tokens');
    return this.healthyN > 0 ? (this.tTok[1] as number) : Number.POSITIVE_INFINITY;
  }

  /**
   * The first healthy rank at or after `cursor` (cyclically) with in-flight tokens <= `max`;
   * -1 when there is none.
   */
  firstWithinFrom(max: number, cursor: number): number {
    if (this.healthyN === 0 || this.n === 0) return -1;
    this.flush('tokens');
    return this.firstCyclic(WITHIN, cursor, max);
  }

  /** Whether the minimum of `order` is reached by exactly one healthy rank. */
  minIsUnique(order: LoadOrder): boolean {
    const first = this.firstMinFrom(order, 0);
    return first >= 0 && !this.sharesMin(order, first);
  }

  /** Whether another healthy rank than `rank`, a minimal one in `order`, has the same load. */
  sharesMin(order: LoadOrder, rank: number): boolean {
    return this.firstMinFrom(order, rank + 1) !== rank;
  }

  /**
   * The first healthy rank at or after `cursor` (cyclically) whose load equals the minimum in
   * `order`; -1 when no rank is healthy.
   */
  firstMinFrom(order: LoadOrder, cursor: number): number {
    if (this.healthyN === 0 || this.n === 0) return -1;
    this.flush(order);
    return this.firstCyclic(order === 'tokens' ? TOKENS : REQUESTS, cursor, 0);
  }

  /** firstFrom at or after `cursor`, wrapping to rank 0 (the rotating tie-break's order). */
  private firstCyclic(search: number, cursor: number, max: number): number {
    const at = this.firstFrom(search, cursor >= 0 ? cursor % this.n : 0, max);
    return at >= 0 ? at : this.firstFrom(search, 0, max);
  }

  private writeLeafT(rank: number): void {
    const p = rank + this.size;
    const healthy = this.healthyFlags[rank] === 1;
    this.tTok[p] = healthy ? (this.leafTok[rank] as number) : Number.POSITIVE_INFINITY;
    this.tReq[p] = healthy ? (this.leafReq[rank] as number) : Number.POSITIVE_INFINITY;
  }

  private writeLeafR(rank: number): void {
    const p = rank + this.size;
    const healthy = this.healthyFlags[rank] === 1;
    this.rReq[p] = healthy ? (this.leafReq[rank] as number) : Number.POSITIVE_INFINITY;
  }

  /** Recomputes node p of the (tokens, requests) tree; false when it did not change. */
  private pullT(p: number): boolean {
    const l = 2 * p;
    const r = l + 1;
    const lt = this.tTok[l] as number;
    const rt = this.tTok[r] as number;
    const lq = this.tReq[l] as number;
    const rq = this.tReq[r] as number;
    const left = lt < rt || (lt === rt && lq <= rq);
    const tok = left ? lt : rt;
    const req = left ? lq : rq;
    if (this.tTok[p] === tok && this.tReq[p] === req) return false;
    this.tTok[p] = tok;
    this.tReq[p] = req;
    return true;
  }

  /** Recomputes node p of the requests tree; false when it did not change. */
  private pullR(p: number): boolean {
    const a = this.rReq[2 * p] as number;
    const b = this.rReq[2 * p + 1] as number;
    const req = Math.min(a, b);
    if (this.rReq[p] === req) return false;
    this.rReq[p] = req;
    return true;
  }

  /**
   * Whether node `p` holds a rank the search wants: for the two orders and the cool order,
   * a healthy rank at the tree's minimum; for WITHIN, a healthy rank with tokens <= max.
   */
  private meets(search: number, p: number, max: number): boolean {
    switch (search) {
      case TOKENS:
        return this.tTok[p] === this.tTok[1] && this.tReq[p] === this.tReq[1];
      case REQUESTS:
        return this.rReq[p] === this.rReq[1];
      case WITHIN:
        return (this.tTok[p] as number) <= max;
      default:
        return (
          this.cCnt[p] !== 0 &&
          this.cTok[p] === this.cTok[1] &&
          this.cReq[p] === this.cReq[1] &&
          this.cCool[p] === this.cCool[1]
        );
    }
  }

  /**
   * The first rank at or after `from` whose leaf meets the search, or -1. Bottom-up: the leaf
   * at `from` first (under a rotating cursor among many equal ranks it usually is the one),
   * then the right siblings on the way up, then down the leftmost subtree that meets it: at
   * most 2 log R nodes. Leaves past the last rank hold no healthy rank, so they never meet it.
   */
  private firstFrom(search: number, from: number, max: number): number {
    const size = this.size;
    let p = from + size;
    if (!this.meets(search, p, max)) {
      for (;;) {
        if (p === 1) return -1;
        if ((p & 1) === 0 && this.meets(search, p + 1, max)) {
          p++;
          break;
        }
        p >>= 1;
      }
      while (p < size) p = this.meets(search, 2 * p, max) ? 2 * p : 2 * p + 1;
    }
    const rank = p - size;
    return rank < this.n ? rank : -1;
  }

  private writeCoolLeaf(i: number): void {
    const p = i + this.size;
    const healthy = i < this.n && this.healthyFlags[i] === 1;
    this.cTok[p] = healthy ? (this.leafTok[i] as number) : Number.POSITIVE_INFINITY;
    this.cReq[p] = healthy ? (this.leafReq[i] as number) : Number.POSITIVE_INFINITY;
    this.cCool[p] = healthy ? ((this.cool as readonly number[])[i] ?? 0) : Number.POSITIVE_INFINITY;
    this.cCnt[p] = healthy ? 1 : 0;
  }

  private pullCool(p: number): void {
    const l = 2 * p;
    const r = l + 1;
    const lt = this.cTok[l] as number;
    const rt = this.cTok[r] as number;
    const lq = this.cReq[l] as number;
    const rq = this.cReq[r] as number;
    const lc = this.cCool[l] as number;
    const rc = this.cCool[r] as number;
    const cmp = lt !== rt ? lt - rt : lq !== rq ? lq - rq : lc !== rc ? lc - rc : 0;
    const from = cmp <= 0 ? l : r;
    this.cTok[p] = this.cTok[from] as number;
    this.cReq[p] = this.cReq[from] as number;
    this.cCool[p] = this.cCool[from] as number;
    this.cCnt[p] =
      cmp === 0 ? (this.cCnt[l] as number) + (this.cCnt[r] as number) : (this.cCnt[from] as number);
  }
}
