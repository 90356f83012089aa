import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { RadixCache } from '../src/cache/radix-cache.ts';
import { cachedNodes, rootOf } from './helpers/radix.ts';

const seq = (from: number, n: number) => Uint32Array.from({ length: n }, (_, i) => from + i);
const cat = (...parts: Uint32Array[]) => {
  const out = new Uint32Array(parts.reduce((a, p) => a + p.length, 0));
  let o = 0;
  for (const p of parts) {
    out.set(p, o);
    o += p.length;
  }
  return out;
};

describe('RadixCache', () => {
  it('matches the longest cached prefix and splits segments where prompts diverge', () => {
    const c = new RadixCache({ capacityTokens: 1000 });
    const a = cat(seq(1, 100), seq(1000, 20));
    const b = cat(seq(1, 100), seq(2000, 30));
    expect(c.match(a).matchedTokens).toBe(0);
    c.insert(a);
    expect(c.used).toBe(120);
    expect(c.match(b).matchedTokens).toBe(100);
    c.insert(b);
    expect(c.used).toBe(150);
    expect(c.nodeCount).toBe(3);
    expect(c.match(seq(1, 50)).matchedTokens).toBe(50);
    expect(c.match(cat(seq(1, 100), seq(1000, 5), seq(9, 3))).matchedTokens).toBe(105);
  });

  it('rounds matches and inserts down to whole pages', () => {
    const c = new RadixCache({ capacityTokens: 1000, pageSize: 16 });
    c.insert(seq(1, 40));
    expect(c.used).toBe(32);
    expect(c.match(cat(seq(1, 20), seq(500, 20))).matchedTokens).toBe(16);
  });

  it('never evicts locked nodes and evicts least recently used leaves first', () => {
    const c = new RadixCache({ capacityTokens: 1000 });
    const shared = seq(1, 50);
    const x = cat(shared, seq(100, 10));
    const y = cat(shared, seq(200, 10));
    const z = cat(shared, seq(300, 10));
    c.insert(x);
    c.insert(y);
    c.insert(z);
    const locked = c.match(y).handle;
    c.lock(locked);
    expect(c.evictable).toBe(20); // x and z leaves; y's path incl. shared is locked
    c.match(x); // x is now more recent than z
    expect(c.evict(5)).toBe(10);
    expect(c.match(z).matchedTokens).toBe(50);
    expect(c.match(x).matchedTokens).toBe(60);
    expect(c.evict(1000)).toBe(10);
    expect(c.used).toBe(60);
    c.unlock(locked);
    expect(c.evictable).toBe(60);
    expect(c.evict(1000)).toBe(60);
    expect(c.used).toBe(0);
    expect(c.evictedTokens).toBe(80);
  });

  it('rejects bad options and unbalanced unlocks', () => {
    expect(() => new RadixCache({ capacityTokens: 0 })).toThrow(/capacityTokens/);
    expect(() => new RadixCache({ capacityTokens: 10, pageSize: 0 })).toThrow(/pageSize/);
    const c = new RadixCache({ capacityTokens: 10 });
    const h = c.insert(seq(1, 5));
    expect(() => c.unlock(h)).toThrow(/not locked/);
  });
});

describe('RadixCache hooks', () => {
  it('reports every stored segment, evicted leaf and reset with its full path', () => {
    const cache = new RadixCache({ capacityTokens: 10 });
    const log: string[] = [];
    cache.hooks = {
      stored: (path, start) => log.push(`+${start}:${Array.from(path).join(',')}`),
      evicted: (path, start) => log.push(`-${start}:${Array.from(path).join(',')}`),
      cleared: () => log.push('clear'),
    };
    cache.insert([1, 2, 3, 4]);
    cache.insert([1, 2, 3, 4, 5, 6]);
    cache.insert([1, 2, 9]);
    cache.insert([1, 2, 3, 4]); // cached already: no event
    expect(log).toEqual(['+0:1,2,3,4', '+4:1,2,3,4,5,6', '+2:1,2,9']);
    log.length = 0;
    expect(cache.evict(3)).toBe(3);
    // LRU leaves first: [5,6] under [1,2,3,4] (touched before [9]), then [9].
    expect(log).toEqual(['-4:1,2,3,4,5,6', '-2:1,2,9']);
    log.length = 0;
    cache.reset();
    expect(log).toEqual(['clear']);
  });
});

describe('RadixCache.extend', () => {
  // A request's node spells path[0:depth]; extend(node, depth, path[depth:]) must leave the
  // cache exactly as insertFrom(node, depth, path) would, hooks included.
  const state = (c: RadixCache) => ({ used: c.used, nodes: c.nodeCount, evictable: c.evictable });

  it('leaves the same tree as inserting the whole path, at any page size and depth', () => {
    fc.assert(
      fc.property(
        fc.constantFrom(1, 4, 16),
        fc.array(fc.array(fc.integer({ min: 1, max: 3 }), { minLength: 0, maxLength: 60 }), {
          minLength: 1,
          maxLength: 6,
        }),
        fc.nat(),
        (pageSize, prompts, pick) => {
          const make = () => {
            const c = new RadixCache({ capacityTokens: 10_000, pageSize });
            const log: string[] = [];
            c.hooks = { stored: (p, s) => log.push(`${s}:${Array.from(p).join(',')}`) };
            return { c, log };
          };
          const a = make();
          const b = make();
          for (const p of prompts) {
            const path = Uint32Array.from(p);
            // The request already holds its prompt up to a page-aligned depth.
            const cut = Math.min(path.length, pick % (path.length + 1));
            const depth = cut - (cut % pageSize);
            const ha = depth > 0 ? a.c.insert(path, depth) : null;
            const hb = depth > 0 ? b.c.insert(path, depth) : null;
            if (ha) a.c.lock(ha);
            if (hb) b.c.lock(hb);
            const ea = a.c.insertFrom(ha, depth, path);
            const eb = b.c.extend(hb, depth, path.subarray(depth));
            expect(state(b.c)).toEqual(state(a.c));
            expect(b.c.match(path).matchedTokens).toBe(a.c.match(path).matchedTokens);
            // Both handles end where the whole path (page aligned) does.
            a.c.lock(ea);
            b.c.lock(eb);
            expect(state(b.c)).toEqual(state(a.c));
            if (ha) a.c.unlock(ha);
            if (hb) b.c.unlock(hb);
          }
          expect(b.log).toEqual(a.log);
          // Without observers it takes the tail-only path: same tree again.
          const c = new RadixCache({ capacityTokens: 10_000, pageSize });
          const d = new RadixCache({ capacityTokens: 10_000, pageSize });
          for (const p of prompts) {
            const path = Uint32Array.from(p);
            const depth = Math.floor(path.length / 2 / pageSize) * pageSize;
            const hc = depth > 0 ? c.insert(path, depth) : null;
            const hd = depth > 0 ? d.insert(path, depth) : null;
            c.insertFrom(hc, depth, path);
            d.extend(hd, depth, path.subarray(depth));
            expect(state(d)).toEqual(state(c));
          }
        },
      ),
      { numRuns: 300 },
    );
  });

  it('refuses a depth that does not fit the handle', () => {
    const c = new RadixCache({ capacityTokens: 100, pageSize: 4 });
    const h = c.insert(seq(1, 8));
    expect(() => c.extend(null, 4, seq(5, 4))).toThrow(/depth 4 does not match/);
    expect(() => c.extend(h, 6, seq(7, 4))).toThrow(/depth 6 does not match/);
    c.hooks = { stored: () => {} };
    expect(() => c.extend(h, 4, seq(5, 4))).toThrow(/spells 8 tokens, not 4/);
    c.lock(h);
    c.reset();
    expect(() => c.extend(h, 8, seq(9, 4))).toThrow(/handle was dropped/);
    // Unlocking a handle from before the reset changes nothing.
    c.unlock(h);
    expect([c.used, c.evictable, c.nodeCount]).toEqual([0, 0, 0]);
  });
});

describe('RadixCache matching over long segments', () => {
  // Walks compare long equal runs natively: the match must still be the longest common
  // prefix with anything cached, wherever the first difference falls (before, at or past
  // the native-compare threshold, at the segment's end).
  it('equals the longest common prefix with any cached prompt', () => {
    const base = seq(1, 600);
    const lcp = (a: Uint32Array, b: Uint32Array) => {
      let i = 0;
      while (i < a.length && i < b.length && a[i] === b[i]) i++;
      return i;
    };
    const variant = fc
      .tuple(fc.integer({ min: 0, max: 600 }), fc.integer({ min: 0, max: 600 }), fc.nat(3))
      .map(([len, at, v]) => {
        const p = base.slice(0, len);
        if (at < len && v > 0) p[at] = 10_000 + v;
        return p;
      });
    fc.assert(
      fc.property(fc.array(variant, { minLength: 1, maxLength: 8 }), variant, (cached, query) => {
        const c = new RadixCache({ capacityTokens: 100_000 });
        for (const p of cached) c.insert(p);
        const expected = Math.max(0, ...cached.map((p) => lcp(p, query)));
        expect(c.match(query).matchedTokens).toBe(expected);
      }),
      { numRuns: 500 },
    );
  });
});

describe('RadixCache with many children per node', () => {
  // Nodes keep their children in an exact-size array, indexed by a map past a few: check the
  // structure and the matches through inserts, splits, evictions and resets that move nodes
  // across that threshold both ways.
  function checkTree(cache: RadixCache): number {
    let tokens = 0;
    for (const n of [rootOf(cache), ...cachedNodes(cache)]) {
      tokens += n.len;
      const firsts = new Set(n.children.map((c) => c.first));
      expect(firsts.size).toBe(n.children.length);
      if (n.children.length > 8) expect(n.index).not.toBeNull();
      if (n.index !== null) {
        expect(n.index.size).toBe(n.children.length);
        for (const c of n.children) expect(n.index.get(c.first)).toBe(c);
      }
      for (const c of n.children) expect(c.parent).toBe(n);
    }
    return tokens;
  }
  const lcp = (a: readonly number[], b: readonly number[]) => {
    let i = 0;
    while (i < a.length && i < b.length && a[i] === b[i]) i++;
    return i;
  };

  it('keeps children filed by first key and matches the longest cached prefix', () => {
    // Unbiased tokens: fast-check's default favours small values, which keeps fan-out low.
    const token = fc.noBias(fc.integer({ min: 1, max: 40 }));
    const prompt = fc.array(token, { minLength: 1, maxLength: 6 });
    // Mostly inserts and queries, so nodes grow past the threshold before evictions thin them.
    const op = fc.oneof(
      { arbitrary: fc.record({ insert: prompt }), weight: 8 },
      { arbitrary: fc.record({ evict: fc.integer({ min: 1, max: 12 }) }), weight: 2 },
      { arbitrary: fc.record({ query: prompt }), weight: 6 },
      { arbitrary: fc.constant({ reset: true }), weight: 1 },
    );
    fc.assert(
      fc.property(
        fc.constantFrom(1, 2),
        fc.array(op, { minLength: 40, maxLength: 150, size: 'max' }),
        (pageSize, ops) => {
          const cache = new RadixCache({ capacityTokens: 10_000, pageSize });
          let cached: number[][] = [];
          let ever: number[][] = [];
          const whole = (p: number[]) => p.slice(0, p.length - (p.length % pageSize));
          for (const o of ops) {
            if ('insert' in o) {
              cache.insert(o.insert);
              cached.push(whole(o.insert));
              ever.push(whole(o.insert));
            } else if ('evict' in o) {
              cache.evict(o.evict);
              // What is left is a subset of what was cached: no match may exceed the reference.
              cached = cached.filter((p) => cache.match(p).matchedTokens === p.length);
            } else if ('query' in o) {
              const best = Math.max(0, ...cached.map((p) => lcp(p, o.query)));
              const m = cache.match(o.query).matchedTokens;
              expect(m).toBeGreaterThanOrEqual(best - (best % pageSize));
              // Nothing matches further than anything inserted since the last reset.
              expect(m).toBeLessThanOrEqual(Math.max(0, ...ever.map((p) => lcp(p, o.query))));
            } else {
              cache.reset();
              cached = [];
              ever = [];
            }
            expect(checkTree(cache)).toBe(cache.used);
          }
        },
      ),
      { numRuns: 150 },
    );
  });
});
