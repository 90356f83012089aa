// prefix_match's memo of key digests: whatever it serves is the digest of exactly the key's
// bytes, however keys repeat or share a fingerprint; it keeps a key from its second sighting.
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { DigestMemo, tokenDigest } from '../src/hashing/prefix-digest.ts';

const hex = (b: Uint8Array) => Buffer.from(b).toString('hex');

describe('DigestMemo', () => {
  it('always gives the digest of the key bytes, for any sequence of keys', () => {
    // Few distinct keys, many repeats, some sharing a prefix: hits, misses and replacements.
    const base = fc.array(fc.integer({ min: 0, max: 2 ** 32 - 1 }), {
      minLength: 1,
      maxLength: 40,
    });
    fc.assert(
      fc.property(
        fc.array(base, { minLength: 1, maxLength: 6 }),
        fc.array(fc.tuple(fc.nat(5), fc.nat(40), fc.boolean()), { minLength: 1, maxLength: 80 }),
        (keys, picks) => {
          const memo = new DigestMemo();
          for (const [k, cut, typed] of picks) {
            const key = keys[k % keys.length]!;
            const count = Math.min(key.length, cut + 1);
            const ids = typed ? Uint32Array.from(key) : key;
            expect(hex(memo.digest(ids, count))).toBe(hex(tokenDigest(key, count)));
          }
        },
      ),
    );
  });

  it('keeps a key from its second sighting, and a key seen once costs nothing kept', () => {
    const memo = new DigestMemo();
    const key = Uint32Array.from({ length: 4096 }, (_, i) => i * 7 + 1);
    for (let i = 0; i < 5; i++) memo.digest(key, key.length);
    // First: noted; second: hashed and kept; third to fifth: served.
    expect(memo.stats()).toEqual({ hits: 3, misses: 2 });
    const once = new DigestMemo();
    for (let i = 0; i < 200; i++) once.digest(Uint32Array.from([i, i + 1, i + 2, i + 3]), 4);
    expect(once.stats()).toEqual({ hits: 0, misses: 200 });
  });

  it('tells apart keys that share a fingerprint (same length, same sampled bytes)', () => {
    // The fingerprint samples 16 bytes; keys differing only between them share it.
    const a = Uint32Array.from({ length: 1024 }, (_, i) => i + 1);
    const b = a.slice();
    b[3] = 999_999; // bytes 12-15: between the first two samples of a 4,096-byte key
    const memo = new DigestMemo();
    for (let round = 0; round < 4; round++) {
      for (const key of [a, b, a, a, b]) {
        expect(hex(memo.digest(key, key.length))).toBe(hex(tokenDigest(key, key.length)));
      }
    }
    expect(memo.stats().hits).toBeGreaterThan(0);
  });

  it("does not keep the caller's buffer: a key written after it was kept is not served", () => {
    const memo = new DigestMemo();
    const key = Uint32Array.from({ length: 512 }, (_, i) => i + 5);
    const want = hex(tokenDigest(key, key.length));
    memo.digest(key, key.length);
    memo.digest(key, key.length);
    key[100] = 1; // the caller reuses its array for another prompt
    expect(hex(memo.digest(key, key.length))).toBe(hex(tokenDigest(key, key.length)));
    key[100] = 105;
    expect(hex(memo.digest(key, key.length))).toBe(want);
  });

  it('rejects ids out of range as tokenDigest does', () => {
    const memo = new DigestMemo();
    expect(() => memo.digest([1, -1, 2], 3)).toThrow();
    expect(() => memo.digest([1, 2 ** 32, 2], 3)).toThrow();
  });
});
