import type { RankState } from '../src/index.ts';

/** `n` idle ranks; those listed in `down` are unhealthy. */
export function makeRanks(n: number, down: readonly number[] = []): RankState[] {
  return Array.from({ length: n }, (_, rank) => ({
    rank,
    healthy: !down.includes(rank),
    inFlightRequests: 0,
    inFlightTokens: 0,
  }));
}

/** A small deterministic PRNG (mulberry32) so tests never depend on Math.random. */
export function prng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** `length` token ids in [1, 30000) from `rand`. */
export function randomIds(rand: () => number, length: number): number[] {
  return Array.from({ length }, () => 1 + Math.floor(rand() * 29_999));
}
