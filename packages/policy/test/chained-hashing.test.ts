import { describe, expect, it } from 'vitest';
import {
  chainedWindowHashes,
  prefixKey,
  rendezvousScore,
  stringKey,
} from '../src/hashing/chained.ts';
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

  it('hashes routing keys into the same space and scores ranks evenly', () => {
    expect(stringKey('session-1')).not.toBe(stringKey('session-2'));
    expect(stringKey('a')).toBe(stringKey('a'));
    const wins = new Array<number>(16).fill(0);
    for (let k = 0; k < 16_000; k++) {
      const key = stringKey(`k${k}`);
      let best = 0;
      for (let r = 1; r < 16; r++)
        if (rendezvousScore(key, r) > rendezvousScore(key, best)) best = r;
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
