// prefix_match against vectors computed by an independent Python implementation
// (scripts/gen-golden.py, hashlib.blake2b), and node:crypto against @noble/hashes.
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import {
  createDispatcher,
  digestMod,
  prefixDigest,
  prefixKeyLength,
  tokenDigest,
  tokenDigestPortable,
} from '../src/index.ts';
import { makeRanks, prng } from './helpers.ts';

interface GoldenCase {
  list: number;
  window: number;
  prefixLength: number;
  ranks: number;
  keyLength: number;
  digest: string;
  rank: number | null;
  ranks16: number | null;
  failover?: number;
  /** The failover rank when only ranks with (7r + 3) % 50 === 0 (other than the primary) are up. */
  failoverSparse?: number;
}

const golden = JSON.parse(
  readFileSync(new URL('./fixtures/prefix-match-golden.json', import.meta.url), 'utf8'),
) as { lists: number[][]; cases: GoldenCase[] };

const hex = (bytes: Uint8Array) => Buffer.from(bytes).toString('hex');
const bigMod = (digest: Uint8Array, n: number) => Number(BigInt(`0x${hex(digest)}`) % BigInt(n));

describe('prefix_match golden vectors (Python hashlib)', () => {
  it('has at least 200 cases over many lengths, windows, prefix lengths and rank counts', () => {
    expect(golden.cases.length).toBeGreaterThanOrEqual(200);
    expect(new Set(golden.cases.map((c) => c.window)).size).toBeGreaterThanOrEqual(5);
    expect(new Set(golden.cases.map((c) => c.prefixLength)).size).toBeGreaterThanOrEqual(5);
    expect(new Set(golden.cases.map((c) => c.ranks)).size).toBeGreaterThanOrEqual(5);
    expect(new Set(golden.lists.map((l) => l.length)).size).toBeGreaterThanOrEqual(30);
  });

  it('matches every case: key length, digest (node:crypto and noble) and rank', () => {
    let checked = 0;
    for (const c of golden.cases) {
      const ids = golden.lists[c.list] ?? [];
      const label = `list ${c.list} (len ${ids.length}) window ${c.window} prefix ${c.prefixLength}`;
      expect(prefixKeyLength(ids.length, c.window, c.prefixLength), label).toBe(c.keyLength);
      expect(hex(prefixDigest(ids, c.window, c.prefixLength)), label).toBe(c.digest);
      expect(hex(tokenDigestPortable(ids, c.keyLength)), label).toBe(c.digest);
      expect(hex(prefixDigest(Uint32Array.from(ids), c.window, c.prefixLength)), label).toBe(
        c.digest,
      );
      if (c.rank !== null) {
        const digest = tokenDigest(ids, c.keyLength);
        expect(digestMod(digest, c.ranks), label).toBe(c.rank);
        expect(digestMod(digest, 16), label).toBe(c.ranks16);
      }
      checked++;
    }
    expect(checked).toBe(golden.cases.length);
  });

  it('routes every case like the Python reference through the dispatcher, failover too', () => {
    let failovers = 0;
    let sparse = 0;
    for (const c of golden.cases) {
      const ids = golden.lists[c.list] ?? [];
      const dispatcher = createDispatcher({
        method: 'prefix_match',
        window: c.window,
        prefixLength: c.prefixLength,
      });
      const d16 = dispatcher.dispatch({ inputIds: ids }, makeRanks(16));
      if (c.ranks16 === null) {
        expect(d16.reason).toBe('fallback-round-robin');
      } else {
        expect(d16).toEqual({ rank: c.ranks16, reason: 'prefix-hash' });
      }
      if (c.rank !== null && c.ranks <= 1000) {
        expect(dispatcher.dispatch({ inputIds: ids }, makeRanks(c.ranks)).rank).toBe(c.rank);
      }
      if (c.failover !== undefined && c.rank !== null) {
        expect(dispatcher.dispatch({ inputIds: ids }, makeRanks(c.ranks, [c.rank]))).toEqual({
          rank: c.failover,
          reason: 'prefix-hash-failover',
        });
        failovers++;
      }
      if (c.failoverSparse !== undefined && c.rank !== null) {
        const primary = c.rank;
        const ranks = makeRanks(c.ranks);
        for (const r of ranks) r.healthy = r.rank !== primary && (7 * r.rank + 3) % 50 === 0;
        expect(dispatcher.dispatch({ inputIds: ids }, ranks)).toEqual({
          rank: c.failoverSparse,
          reason: 'prefix-hash-failover',
        });
        sparse++;
      }
    }
    expect(failovers).toBeGreaterThanOrEqual(100);
    expect(sparse).toBeGreaterThanOrEqual(20);
  });
});

describe('digests and modulus', () => {
  it('node:crypto and @noble/hashes give identical digests', () => {
    const rand = prng(11);
    for (let i = 0; i < 300; i++) {
      const length = Math.floor(rand() ** 3 * 20_000);
      const ids = Array.from({ length }, () => Math.floor(rand() * 2 ** 32));
      expect(hex(tokenDigest(ids, length))).toBe(hex(tokenDigestPortable(ids, length)));
    }
  });

  it('digestMod equals BigInt semantics for any rank count up to 2^32', () => {
    const rand = prng(12);
    const counts = [1, 2, 3, 5, 16, 255, 256, 257, 1_000_003, 2 ** 31 - 1, 2 ** 32 - 1, 2 ** 32];
    for (let i = 0; i < 500; i++) {
      const digest = Uint8Array.from({ length: 64 }, () => Math.floor(rand() * 256));
      if (i % 50 === 0) digest.fill(255);
      const n = counts[i % counts.length] ?? 7;
      expect(digestMod(digest, n)).toBe(bigMod(digest, n));
    }
  });

  it('reuses its scratch buffer without leaking bytes between calls', () => {
    const long = Array.from({ length: 5000 }, (_, i) => i + 1);
    const short = [9, 8, 7];
    const expected = hex(tokenDigestPortable(Uint32Array.from(short), 3));
    tokenDigest(long, long.length);
    expect(hex(tokenDigest(short, 3))).toBe(expected);
  });
});
