import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { chainedWindowHashes, jumpRank, prefixKey, stringKey } from '../src/hashing/chained.ts';
import { ChainedPrefixIndex } from '../src/hashing/chained-index.ts';
import { prng, randomIds } from './helpers.ts';

describe('chainedWindowHashes', () => {
  it('keys one entry per full window, each naming the whole prefix up to it', () => {
    const ids = randomIds(prng(1), 1000);
    const keys = chainedWindowHashes(ids, 64);
    expect(keys).toHaveLength(15); // 1000 / 64 = 15 full windows, the partial one is not keyed
    for (let i = 0; i < keys.length; i++) {
      // Key i depends only on tokens [0, (i+1)*64): the same as hashing that prefix alone.
      const prefix = ids.slice(0, (i + 1) * 64);
      expect(chainedWindowHashes(prefix, 64)[i]).toBe(keys[i]);
      // A prefix's key does not depend on the window size that reached it.
      expect(prefixKey(ids, (i + 1) * 64)).toBe(keys[i]);
      expect(chainedWindowHashes(ids, 32)[2 * i + 1]).toBe(keys[i]);
    }
  });

  it('changes every key from the changed window on, and none before it', () => {
    const ids = randomIds(prng(2), 1024);
    const before = chainedWindowHashes(ids, 128);
    const changed = ids.slice();
    changed[300] = (changed[300] as number) + 1;
    const after = chainedWindowHashes(changed, 128);
    expect(after.slice(0, 2)).toEqual(before.slice(0, 2)); // windows 0-1 end before token 300
    for (let i = 2; i < after.length; i++) expect(after[i]).not.toBe(before[i]);
  });

  it('stops at maxTokens and accepts Uint32Array like arrays', () => {
    const ids = randomIds(prng(3), 2000);
    const capped = chainedWindowHashes(ids, 256, 1000);
    expect(capped).toEqual(chainedWindowHashes(ids, 256).slice(0, 3));
    expect(chainedWindowHashes(Uint32Array.from(ids), 256)).toEqual(chainedWindowHashes(ids, 256));
    expect(chainedWindowHashes(ids.slice(0, 100), 256)).toEqual([]);
  });

  it('gives safe-integer keys without collisions over 200,000 distinct prefixes', () => {
    const rand = prng(4);
    const seen = new Set<number>();
    let unsafe = 0;
    const ids = randomIds(rand, 64);
    for (let i = 0; i < 200_000; i++) {
      ids[i % 64] = 1 + Math.floor(rand() * 29_999);
      ids[63] = i; // guarantees distinct inputs
      const key = prefixKey(ids, 64);
      if (!Number.isSafeInteger(key) || key < 0) unsafe++;
      seen.add(key);
    }
    expect(unsafe).toBe(0);
    expect(seen.size).toBe(200_000);
  });

  it('hashes routing keys into the same space, spread evenly over ranks', () => {
    expect(stringKey('session-1')).not.toBe(stringKey('session-2'));
    expect(stringKey('a')).toBe(stringKey('a'));
    const wins = new Array<number>(16).fill(0);
    for (let k = 0; k < 16_000; k++) {
      const key = stringKey(`k${k}`);
      const best = jumpRank(key, 0, 16);
      wins[best] = (wins[best] as number) + 1;
    }
    for (const w of wins) expect(w).toBeGreaterThan(800); // mean 1000
  });
});

describe('ChainedPrefixIndex', () => {
  it('matches the longest held prefix per rank with one joint walk', () => {
    const index = new ChainedPrefixIndex();
    index.resize(3);
    index.insert(0, [1, 2, 3, 4], 100);
    index.insert(1, [1, 2], 100);
    const out: number[] = [9, 9, 9];
    index.match([1, 2, 3, 5], [0, 1, 2], out);
    expect(out).toEqual([3, 2, 0]);
  });

  it('stays within capacity, evicting deepest windows first', () => {
    const index = new ChainedPrefixIndex();
    index.resize(1);
    index.insert(0, [10, 11, 12, 13], 4);
    index.insert(0, [20, 21], 4); // evicts the two least recently used: 13 then 12
    expect(index.size(0)).toBe(4);
    expect(index.evictions).toBe(2);
    const out = [0];
    index.match([10, 11, 12, 13], [0], out);
    expect(out[0]).toBe(2); // 10 and 11 (the shallow windows) survived
    index.match([20, 21], [0], out);
    expect(out[0]).toBe(2);
  });

  it('forgets a cleared rank and follows resizes', () => {
    const index = new ChainedPrefixIndex();
    index.resize(2);
    index.insert(1, [1, 2], 10);
    index.clear(1);
    expect(index.size(1)).toBe(0);
    index.insert(1, [1, 2], 10);
    index.resize(1);
    expect(index.numRanks).toBe(1);
    index.resize(3);
    expect(index.size(1)).toBe(0); // a re-added rank starts empty
    expect(index.totalSize()).toBe(0);
  });
});

describe('jumpRank', () => {
  const key53 = fc
    .tuple(fc.nat({ max: 0x1fffff }), fc.nat({ max: 0xffffffff }))
    .map(([hi, lo]) => hi * 4294967296 + lo);

  it('is consistent: one more rank moves a key only to the new rank', () => {
    fc.assert(
      fc.property(key53, fc.nat({ max: 7 }), fc.integer({ min: 1, max: 5000 }), (key, a, n) => {
        const here = jumpRank(key, a, n);
        expect(here).toBeGreaterThanOrEqual(0);
        expect(here).toBeLessThan(n);
        const grown = jumpRank(key, a, n + 1);
        expect(grown === here || grown === n).toBe(true);
      }),
      { numRuns: 2000 },
    );
  });

  it('spreads keys evenly, moves ~1/(n+1) of them on growth, and its draws are independent', () => {
    const rand = prng(5);
    const n = 10;
    const keys = Array.from({ length: 50_000 }, () => Math.floor(rand() * 2 ** 53));
    const counts = new Array<number>(n).fill(0);
    let moved = 0;
    let sameDraw = 0;
    for (const key of keys) {
      const r = jumpRank(key, 0, n);
      counts[r] = (counts[r] as number) + 1;
      if (jumpRank(key, 0, n + 1) !== r) moved++;
      if (jumpRank(key, 1, n) === r) sameDraw++;
    }
    // 5,000 per rank expected; binomial sd ~67, so +-4% is ~3 sd.
    for (const c of counts) expect(Math.abs(c - 5000)).toBeLessThan(200);
    expect(Math.abs(moved / keys.length - 1 / 11)).toBeLessThan(0.006);
    expect(Math.abs(sameDraw / keys.length - 1 / n)).toBeLessThan(0.006);
    // Large rank counts: the last rank and the first get their share too.
    const big = new Array<number>(1024).fill(0);
    for (const key of keys) {
      const r = jumpRank(key, 0, 1024);
      big[r] = (big[r] as number) + 1;
    }
    expect(Math.min(...big)).toBeGreaterThan(15); // ~49 each
    expect(Math.max(...big)).toBeLessThan(95);
  });
});
