// An index over the ranks' load, kept by the LoadTracker as it counts, so the least-loaded
// choice costs O(log R) instead of a scan of every rank.
//
// Two min segment trees over rank slots: one ordered by (in-flight tokens, in-flight
// requests), one by in-flight requests. An unhealthy rank's leaf is +Infinity, so it never
// wins while a healthy one exists. Each node keeps its minimum and how many leaves reach it,
// so a caller knows whether the minimum is unique (no tie-break needed) and can find the first
// minimal rank at or after a cursor, cyclically: exactly the rotating tie-break the dispatcher
// applies to a scan, so indexed and scanned choices are the same rank every time.
//
// A third tree, kept only while a method has bound its own per-rank values to it (bindCool),
// orders by (tokens, requests, cool[rank]): cache_aware's least loaded, ties to the coolest
// cache. The first rank within a token bound is found by pruning subtrees by their least
// tokens, so it too visits O(log R) nodes.
//
// Cost: O(log R) per update and per query; 3 x 8 bytes + 2 x 4 bytes per tree node, and
// 3 x 8 + 4 more while cool values are bound.

export interface LoadLeaf {
  healthy: boolean;
  inFlightTokens: number;
  inFlightRequests: number;
}

/** Which order a query follows: (tokens, requests) or requests alone. */
export type LoadOrder = 'tokens' | 'requests';

// healthChanges values are drawn from one counter for every index, so a method that remembers
// one cannot mistake another tracker's index for the one it saw.
let changeStamp = 0;

export class LoadIndex {
  private n = 0;
  private size = 1;
  // (tokens, requests) tree
  private tTok = new Float64Array(2);
  private tReq = new Float64Array(2);
  private tCnt = new Int32Array(2);
  // requests tree
  private rReq = new Float64Array(2);
  private rCnt = new Int32Array(2);
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
  private coolStale = new Uint8Array(0);
  private coolPending: number[] = [];

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
    this.tCnt = new Int32Array(2 * size);
    this.rReq = new Float64Array(2 * size).fill(Number.POSITIVE_INFINITY);
    this.rCnt = new Int32Array(2 * size);
    this.healthyFlags = new Uint8Array(numRanks);
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
      this.writeLeaf(i);
    }
    for (let p = size - 1; p >= 1; p--) this.pull(p);
    if (this.cool) this.bindCool(this.cool);
  }

  /** Records rank `rank`'s current state. */
  set(rank: number, leaf: LoadLeaf): void {
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
    this.writeLeaf(rank);
    for (let p = (rank + this.size) >> 1; p >= 1; p >>= 1) this.pull(p);
    if (this.cool) this.updateCool(rank);
  }

  private flushCool(): void {
    const pending = this.coolPending;
    for (let i = 0; i < pending.length; i++) {
      const rank = pending[i] as number;
      this.coolStale[rank] = 0;
      if (rank >= this.n) continue;
      this.writeCoolLeaf(rank);
      for (let p = (rank + this.size) >> 1; p >= 1; p >>= 1) this.pullCool(p);
    }
    pending.length = 0;
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
      this.coolStale = new Uint8Array(this.size);
    }
    this.coolStale.fill(0);
    this.coolPending.length = 0;
    for (let i = 0; i < this.size; i++) this.writeCoolLeaf(i);
    for (let p = this.size - 1; p >= 1; p--) this.pullCool(p);
  }

  /** Re-reads the bound value of `rank` (before the next cool query). */
  updateCool(rank: number): void {
    if (!this.cool || rank < 0 || rank >= this.n || this.coolStale[rank] === 1) return;
    this.coolStale[rank] = 1;
    this.coolPending.push(rank);
  }

  /** How many healthy ranks share the least (tokens, requests, cool); needs bound values. */
  coolMinCount(): number {
    if (this.coolPending.length > 0) this.flushCool();
    return this.cool && this.healthyN > 0 ? (this.cCnt[1] as number) : 0;
  }

  /**
   * The first healthy rank at or after `cursor` (cyclically) whose (tokens, requests, cool)
   * is the least; -1 when none is healthy or no values are bound.
   */
  firstCoolMinFrom(cursor: number): number {
    if (!this.cool || this.healthyN === 0 || this.n === 0) return -1;
    if (this.coolPending.length > 0) this.flushCool();
    const c = cursor >= 0 ? cursor % this.n : 0;
    const at = this.descendCool(1, 0, this.size, c);
    return at >= 0 ? at : this.descendCool(1, 0, this.size, 0);
  }

  /** The least in-flight tokens of a healthy rank; +Infinity when none is healthy. */
  leastTokens(): number {
    return this.healthyN > 0 ? (this.tTok[1] as number) : Number.POSITIVE_INFINITY;
  }

  /**
   * The first healthy rank at or after `cursor` (cyclically) with in-flight tokens <= `max`;
   * -1 when there is none.
   */
  firstWithinFrom(max: number, cursor: number): number {
    if (this.healthyN === 0 || this.n === 0) return -1;
    const c = cursor >= 0 ? cursor % this.n : 0;
    const at = this.within(1, 0, this.size, c, max);
    return at >= 0 ? at : this.within(1, 0, this.size, 0, max);
  }

  /** Whether the minimum of `order` is reached by exactly one healthy rank. */
  minIsUnique(order: LoadOrder): boolean {
    return (order === 'tokens' ? this.tCnt[1] : this.rCnt[1]) === 1;
  }

  /**
   * The first healthy rank at or after `cursor` (cyclically) whose load equals the minimum in
   * `order`; -1 when no rank is healthy.
   */
  firstMinFrom(order: LoadOrder, cursor: number): number {
    if (this.healthyN === 0 || this.n === 0) return -1;
    const c = cursor >= 0 ? cursor % this.n : 0;
    const at = this.findFrom(order, c);
    return at >= 0 ? at : this.findFrom(order, 0);
  }

  private writeLeaf(rank: number): void {
    const p = rank + this.size;
    const healthy = this.healthyFlags[rank] === 1;
    const tok = healthy ? (this.leafTok[rank] as number) : Number.POSITIVE_INFINITY;
    const req = healthy ? (this.leafReq[rank] as number) : Number.POSITIVE_INFINITY;
    this.tTok[p] = tok;
    this.tReq[p] = req;
    this.tCnt[p] = healthy ? 1 : 0;
    this.rReq[p] = req;
    this.rCnt[p] = healthy ? 1 : 0;
  }

  private pull(p: number): void {
    const l = 2 * p;
    const r = l + 1;
    // (tokens, requests)
    const lt = this.tTok[l] as number;
    const rt = this.tTok[r] as number;
    const lq = this.tReq[l] as number;
    const rq = this.tReq[r] as number;
    if (lt < rt || (lt === rt && lq < rq)) {
      this.tTok[p] = lt;
      this.tReq[p] = lq;
      this.tCnt[p] = this.tCnt[l] as number;
    } else if (rt < lt || rq < lq) {
      this.tTok[p] = rt;
      this.tReq[p] = rq;
      this.tCnt[p] = this.tCnt[r] as number;
    } else {
      this.tTok[p] = lt;
      this.tReq[p] = lq;
      this.tCnt[p] = (this.tCnt[l] as number) + (this.tCnt[r] as number);
    }
    // requests
    const a = this.rReq[l] as number;
    const b = this.rReq[r] as number;
    if (a < b) {
      this.rReq[p] = a;
      this.rCnt[p] = this.rCnt[l] as number;
    } else if (b < a) {
      this.rReq[p] = b;
      this.rCnt[p] = this.rCnt[r] as number;
    } else {
      this.rReq[p] = a;
      this.rCnt[p] = (this.rCnt[l] as number) + (this.rCnt[r] as number);
    }
  }

  private reaches(order: LoadOrder, p: number): boolean {
    if (order === 'tokens') {
      return this.tCnt[p] !== 0 && this.tTok[p] === this.tTok[1] && this.tReq[p] === this.tReq[1];
    }
    return this.rCnt[p] !== 0 && this.rReq[p] === this.rReq[1];
  }

  /** First leaf index >= from whose value equals the root minimum, or -1. */
  private findFrom(order: LoadOrder, from: number): number {
    return this.descend(order, 1, 0, this.size, from);
  }

  private descend(order: LoadOrder, p: number, lo: number, hi: number, from: number): number {
    if (hi <= from || !this.reaches(order, p)) return -1;
    if (hi - lo === 1) return lo < this.n ? lo : -1;
    const mid = (lo + hi) >> 1;
    const left = this.descend(order, 2 * p, lo, mid, from);
    return left >= 0 ? left : this.descend(order, 2 * p + 1, mid, hi, from);
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

  private descendCool(p: number, lo: number, hi: number, from: number): number {
    if (hi <= from || this.cCnt[p] === 0) return -1;
    if (
      this.cTok[p] !== this.cTok[1] ||
      this.cReq[p] !== this.cReq[1] ||
      this.cCool[p] !== this.cCool[1]
    ) {
      return -1;
    }
    if (hi - lo === 1) return lo < this.n ? lo : -1;
    const mid = (lo + hi) >> 1;
    const left = this.descendCool(2 * p, lo, mid, from);
    return left >= 0 ? left : this.descendCool(2 * p + 1, mid, hi, from);
  }

  // Subtrees whose least tokens exceed max hold no such rank, so the descent is O(log R).
  private within(p: number, lo: number, hi: number, from: number, max: number): number {
    if (hi <= from || !((this.tTok[p] as number) <= max)) return -1;
    if (hi - lo === 1) return lo < this.n ? lo : -1;
    const mid = (lo + hi) >> 1;
    const left = this.within(2 * p, lo, mid, from, max);
    return left >= 0 ? left : this.within(2 * p + 1, mid, hi, from, max);
  }
}
