// Maps and sets that never become empty. V8 gives a Map or Set a new, smaller table when a
// delete leaves it with fewer entries than a quarter of its capacity, the last entry of the
// smallest table included. A rank's active requests and a slot's in-flight requests come and
// go one or two at a time, so every request allocated a table or two; held by long-lived
// collections, those tables outlived the young generation and died in the old one. On a
// 1,024-rank replay of ten times the Mooncake trace they were the largest such garbage (about
// 29 and 14 MB) and a twentieth of the peak RSS. One entry under a private key keeps each
// table; these classes hide it.

const KEPT = Symbol('kept');

/** A Map from ids to values whose table is never dropped (see above). */
export class KeptMap<K extends number | string, V> {
  private readonly map = new Map<K | typeof KEPT, V | undefined>([[KEPT, undefined]]);

  get size(): number {
    return this.map.size - 1;
  }

  has(key: K): boolean {
    return this.map.has(key);
  }

  get(key: K): V | undefined {
    return this.map.get(key);
  }

  set(key: K, value: V): void {
    this.map.set(key, value);
  }

  delete(key: K): boolean {
    return this.map.delete(key);
  }

  /** The keys in insertion order. */
  keys(): K[] {
    const out: K[] = [];
    for (const k of this.map.keys()) if (k !== KEPT) out.push(k);
    return out;
  }

  /** Calls `fn` on each value in insertion order. */
  forEachValue(fn: (value: V) => void): void {
    this.map.forEach((v, k) => {
      if (k !== KEPT) fn(v as V);
    });
  }
}

/** A Set of objects whose table is never dropped (see above). */
export class KeptSet<T extends object> {
  private readonly set = new Set<T | typeof KEPT>([KEPT]);

  get size(): number {
    return this.set.size - 1;
  }

  has(value: T): boolean {
    return this.set.has(value);
  }

  add(value: T): void {
    this.set.add(value);
  }

  delete(value: T): boolean {
    return this.set.delete(value);
  }

  /** Removes every value; returns them in insertion order. */
  drain(): T[] {
    const out: T[] = [];
    for (const v of this.set) if (v !== KEPT) out.push(v);
    this.set.clear();
    this.set.add(KEPT);
    return out;
  }
}
