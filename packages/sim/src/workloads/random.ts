// Seeded random streams. Every stream is seedrandom keyed by the run seed and a purpose
// name, so adding a stream never shifts another one's numbers.
import seedrandom from 'seedrandom';

/** Synthetic token ids live in [1, VOCAB): small enough for any tokenizer-shaped consumer. */
export const VOCAB = 30_000;

export interface Rng {
  (): number;
  int(min: number, max: number): number;
  exp(mean: number): number;
  tokens(n: number): Uint32Array;
}

export function stream(seed: string | number, purpose: string): Rng {
  const prng = seedrandom(`kvroute:${String(seed)}:${purpose}`);
  const rng = (() => prng()) as Rng;
  rng.int = (min, max) => min + Math.floor(prng() * (max - min + 1));
  rng.exp = (mean) => -mean * Math.log(1 - prng());
  rng.tokens = (n) => {
    const out = new Uint32Array(n);
    for (let i = 0; i < n; i++) out[i] = 1 + Math.floor(prng() * (VOCAB - 1));
    return out;
  };
  return rng;
}

/** Zipf(s) over ranks 0..n-1, by inverse CDF. */
export function zipfSampler(n: number, s: number): (u: number) => number {
  const cdf = new Float64Array(n);
  let total = 0;
  for (let k = 0; k < n; k++) {
    total += 1 / (k + 1) ** s;
    cdf[k] = total;
  }
  return (u) => {
    const x = u * total;
    let lo = 0;
    let hi = n - 1;
    while (lo < hi) {
      const mid = (lo + hi) >> 1;
      if (cdf[mid]! < x) lo = mid + 1;
      else hi = mid;
    }
    return lo;
  };
}

export function concat(parts: readonly Uint32Array[]): Uint32Array {
  let n = 0;
  for (const p of parts) n += p.length;
  const out = new Uint32Array(n);
  let o = 0;
  for (const p of parts) {
    out.set(p, o);
    o += p.length;
  }
  return out;
}
