import fc from 'fast-check';
import seedrandom from 'seedrandom';
import { describe, expect, it } from 'vitest';
import { stream, VOCAB } from '../src/workloads/random.ts';

// Every synthetic workload is drawn from these streams, so they must give exactly the numbers
// seedrandom gives: the reference below is the stream as it was built on seedrandom itself.
function reference(seed: string | number, purpose: string) {
  const prng = seedrandom(`kvroute:${String(seed)}:${purpose}`);
  return {
    next: () => prng(),
    int: (min: number, max: number) => min + Math.floor(prng() * (max - min + 1)),
    exp: (mean: number) => -mean * Math.log(1 - prng()),
    tokens: (n: number) => {
      const out = new Uint32Array(n);
      for (let i = 0; i < n; i++) out[i] = 1 + Math.floor(prng() * (VOCAB - 1));
      return out;
    },
  };
}

type Op =
  | { kind: 'next' }
  | { kind: 'int'; min: number; max: number }
  | { kind: 'exp'; mean: number }
  | { kind: 'tokens'; n: number };

const op: fc.Arbitrary<Op> = fc.oneof(
  fc.constant({ kind: 'next' as const }),
  fc
    .tuple(fc.integer({ min: -1000, max: 1000 }), fc.nat(100_000))
    .map(([min, span]) => ({ kind: 'int' as const, min, max: min + span })),
  fc.double({ min: 0.001, max: 1e6, noNaN: true }).map((mean) => ({ kind: 'exp' as const, mean })),
  fc.nat(700).map((n) => ({ kind: 'tokens' as const, n })),
);

function same(a: Uint32Array, b: Uint32Array): boolean {
  return Buffer.from(a.buffer, a.byteOffset, a.byteLength).equals(
    Buffer.from(b.buffer, b.byteOffset, b.byteLength),
  );
}

describe('seeded streams', () => {
  it("give seedrandom's numbers over any sequence of draws", () => {
    fc.assert(
      fc.property(
        fc.oneof(fc.string({ maxLength: 300 }), fc.integer()),
        fc.string({ maxLength: 40 }),
        fc.array(op, { maxLength: 40 }),
        (seed, purpose, ops) => {
          const ref = reference(seed, purpose);
          const rng = stream(seed, purpose);
          for (const o of ops) {
            if (o.kind === 'tokens') {
              expect(same(rng.tokens(o.n), ref.tokens(o.n))).toBe(true);
            } else if (o.kind === 'int') {
              expect(rng.int(o.min, o.max)).toBe(ref.int(o.min, o.max));
            } else if (o.kind === 'exp') {
              expect(rng.exp(o.mean)).toBe(ref.exp(o.mean));
            } else {
              // The whole double, bit for bit (token ids read only its high bits).
              expect(rng()).toBe(ref.next());
            }
          }
          // Streams interleaved keep their own states.
          const a = stream(seed, `${purpose}:a`);
          const b = stream(seed, `${purpose}:b`);
          const ra = reference(seed, `${purpose}:a`);
          const rb = reference(seed, `${purpose}:b`);
          expect(same(a.tokens(50), ra.tokens(50))).toBe(true);
          expect(same(b.tokens(70), rb.tokens(70))).toBe(true);
          expect(a()).toBe(ra.next());
          expect(same(b.tokens(3), rb.tokens(3))).toBe(true);
        },
      ),
      { numRuns: 200 },
    );
  });

  it('long runs of token ids match, and the doubles after them', () => {
    const rng = stream(7, 'long');
    const ref = reference(7, 'long');
    expect(same(rng.tokens(100_000), ref.tokens(100_000))).toBe(true);
    expect(same(rng.tokens(5), ref.tokens(5))).toBe(true);
    for (let k = 0; k < 10_000; k++) expect(rng()).toBe(ref.next());
  });

  it('refuses a token count that is not a whole number', () => {
    expect(() => stream(1, 'x').tokens(-1)).toThrow(RangeError);
    expect(() => stream(1, 'x').tokens(1.5)).toThrow(/integer >= 0/);
  });
});
