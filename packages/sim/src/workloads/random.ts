// Seeded random streams. Every stream is seedrandom keyed by the run seed and a purpose
// name, so adding a stream never shifts another one's numbers.
//
// seedrandom seeds each stream (its ARC4 key schedule); the draws then come from the same
// generator kept here: ARC4 over a byte permutation in a Uint8Array, and seedrandom's
// construction of a double from its bytes, step for step, so every number is the one
// seedrandom gives (test/random.test.ts checks it against seedrandom over mixed sequences of
// draws). Token ids, most of what a synthetic workload draws (a plan's prompts are millions of
// them), cost about 40 ns each this way against 55-80 ns through seedrandom's closures. ARC4
// is serial, one byte after the other: a WebAssembly port of the same loop measured no faster.
import seedrandom from 'seedrandom';

/** Synthetic token ids live in [1, VOCAB): small enough for any tokenizer-shaped consumer. */
export const VOCAB = 30_000;

export interface Rng {
  (): number;
  int(min: number, max: number): number;
  exp(mean: number): number;
  tokens(n: number): Uint32Array;
}

/** seedrandom's ARC4 state: a permutation of 0..255 and two indexes. */
class Arc4 {
  readonly s: Uint8Array;
  i: number;
  j: number;

  constructor(state: { i: number; j: number; S: number[] }) {
    this.s = Uint8Array.from(state.S);
    this.i = state.i;
    this.j = state.j;
  }

  /** The next `count` bytes as one big-endian number (count <= 6: exact). */
  g(count: number): number {
    const s = this.s;
    let i = this.i;
    let j = this.j;
    let r = 0;
    for (; count > 0; count--) {
      i = (i + 1) & 255;
      const t = s[i]!;
      j = (j + t) & 255;
      const sj = s[j]!;
      s[i] = sj;
      s[j] = t;
      r = r * 256 + s[(sj + t) & 255]!;
    }
    this.i = i;
    this.j = j;
    return r;
  }

  /** seedrandom's double in [0, 1): 52 random bits, never rounded up. */
  next(): number {
    let n = this.g(6);
    let d = 2 ** 48;
    let x = 0;
    while (n < 2 ** 52) {
      n = (n + x) * 256;
      d *= 256;
      x = this.g(1);
    }
    while (n >= 2 ** 53) {
      n /= 2;
      d /= 2;
      x >>>= 1;
    }
    return (n + x) / d;
  }
}

/** n token ids, 1 + floor(next() * (VOCAB - 1)) each. */
function arc4Tokens(a: Arc4, n: number): Uint32Array {
  if (!Number.isInteger(n) || n < 0) {
    throw new RangeError(`tokens: n must be an integer >= 0, got ${n}`);
  }
  const out = new Uint32Array(n);
  for (let k = 0; k < n; k++) out[k] = 1 + Math.floor(a.next() * (VOCAB - 1));
  return out;
}

/** The stream for (seed, purpose). */
export function stream(seed: string | number, purpose: string): Rng {
  const seeded = seedrandom(`kvroute:${String(seed)}:${purpose}`, { state: true });
  const a = new Arc4(seeded.state());
  const rng = (() => a.next()) as Rng;
  rng.int = (min, max) => min + Math.floor(a.next() * (max - min + 1));
  rng.exp = (mean) => -mean * Math.log(1 - a.next());
  rng.tokens = (n) => arc4Tokens(a, n);
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
