// Maglev hashing (Eisenbud et al., NSDI 2016; Envoy's `MAGLEV` load balancer): keys over ranks
// named by a stable identity (a worker's URL and DP rank) instead of by index.
//
// Why: jump hashing (chained.ts jumpRank) maps a key to a rank *index*, and moves few keys only
// when ranks are appended or dropped at the end. A host that numbers its ranks by sorted worker
// URL (service discovery) renumbers every rank after a joining or leaving pod, and under jump
// hashing nearly every key then lands on another worker: each scale event is a fleet-wide
// cache miss. Keyed on names, a key's worker is a function of the key and the set of names
// alone, whatever index each name stands at, so it survives renumbering and every router
// replica that sees the same workers agrees.
//
// The table: M entries (a prime, 65,537 as Envoy's default), each owned by one name. Name i
// has a permutation of the entries, offset_i + j * skip_i (mod M) from two hashes of the
// name; the names, sorted, take turns claiming their next free preferred entry until all are
// taken. Each name owns floor(M / N) or ceil(M / N) entries (at 1,024 names: 64 +- 1, so
// shares within 1.6% of equal), and a name joining or leaving changes few entries beyond
// those it takes or frees (the paper's "minimal disruption"; measured in the tests). Sorting
// the names first makes the table a function of the set, not of the order a host lists them.
//
// Cost: building is O(M log M) expected steps (2-4 ms for 16 to 4,096 names on the
// development machine, as the policy bench prints; a host rebuilds only when its set of
// workers changes), 256 KiB per table. A lookup is one mix and
// one array read, O(1) in the rank count.

import { fmix32 } from './chained.ts';

/** Entries in a Maglev table: a prime well above 100x any rank count a router serves. */
export const MAGLEV_TABLE_SIZE = 65537;

/** FNV-1a over the name's UTF-16 code units with a seed, through fmix32. */
function nameHash(name: string, seed: number): number {
  let h = (0x811c9dc5 ^ seed) >>> 0;
  for (let i = 0; i < name.length; i++) h = Math.imul(h ^ name.charCodeAt(i), 0x01000193);
  return fmix32(h ^ name.length);
}

/**
 * The Maglev lookup table of `names` (distinct, in any order; the table depends only on the
 * set): entry e holds the index into `names` of its owner. `size` must be a prime (it makes
 * every skip a full permutation); larger than names.length.
 */
export function maglevTable(names: readonly string[], size = MAGLEV_TABLE_SIZE): Int32Array {
  const n = names.length;
  if (n === 0) throw new RangeError('maglevTable: no names');
  if (n >= size) throw new RangeError(`maglevTable: ${n} names need a table larger than ${size}`);
  // Claim turns in name order, so the table is the same whatever order the host gave.
  const order = Array.from({ length: n }, (_, i) => i).sort((a, b) => {
    const x = names[a] as string;
    const y = names[b] as string;
    return x < y ? -1 : x > y ? 1 : 0;
  });
  const next = new Int32Array(n);
  const skip = new Int32Array(n);
  for (let t = 0; t < n; t++) {
    const name = names[order[t] as number] as string;
    next[t] = nameHash(name, 0x9e3779b9) % size;
    skip[t] = (nameHash(name, 0x7f4a7c15) % (size - 1)) + 1;
  }
  const table = new Int32Array(size).fill(-1);
  let filled = 0;
  for (;;) {
    for (let t = 0; t < n; t++) {
      let c = next[t] as number;
      const s = skip[t] as number;
      while ((table[c] as number) >= 0) {
        c += s;
        if (c >= size) c -= size;
      }
      table[c] = order[t] as number;
      c += s;
      next[t] = c >= size ? c - size : c;
      if (++filled === size) return table;
    }
  }
}

/**
 * The table entry of a key's `attempt`-th draw (the key as two uint32 words, as jumpRankOf
 * takes it): draws 0, 1, 2, ... are independent, so a key's walk past a full or unhealthy
 * rank spreads over the others.
 */
export function maglevEntry(lo: number, hi: number, attempt: number, size: number): number {
  return fmix32(lo ^ fmix32(hi ^ Math.imul(attempt + 1, 0x9e3779b1))) % size;
}
