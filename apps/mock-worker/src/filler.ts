// Deterministic filler output: the same prompt (token ids) gives the same text, token by
// token, so tests and clients can compare responses across runs, ranks and workers.
// One output token = one word plus a space.

const WORDS = [
  'the',
  'cache',
  'prefix',
  'router',
  'rank',
  'token',
  'batch',
  'decode',
  'prefill',
  'kv',
  'page',
  'tree',
  'radix',
  'model',
  'agent',
  'tool',
  'turn',
  'session',
  'window',
  'hash',
  'load',
  'queue',
  'step',
  'stream',
  'chunk',
  'hit',
  'miss',
  'evict',
  'lock',
  'node',
  'alpha',
  'beta',
  'gamma',
  'delta',
  'omega',
  'lambda',
  'sigma',
  'theta',
  'kappa',
  'zeta',
] as const;

/** FNV-1a over the ids' 32-bit values: a stable seed for the filler of one prompt. */
export function promptSeed(ids: ArrayLike<number>): number {
  let h = 0x811c9dc5;
  for (let i = 0; i < ids.length; i++) {
    let v = (ids[i] as number) >>> 0;
    for (let b = 0; b < 4; b++) {
      h ^= v & 0xff;
      h = Math.imul(h, 0x01000193) >>> 0;
      v >>>= 8;
    }
  }
  return h;
}

/**
 * The id of output token `index` for a prompt with this seed: its word's place in the filler
 * vocabulary (SGLang's `output_ids`). The same (seed, index) always gives the same id.
 */
export function fillerTokenId(seed: number, index: number): number {
  // xorshift-multiply mix of (seed, index): neighbouring indexes give unrelated words.
  let x = (seed ^ Math.imul(index + 1, 0x9e3779b1)) >>> 0;
  x ^= x >>> 16;
  x = Math.imul(x, 0x85ebca6b) >>> 0;
  x ^= x >>> 13;
  return (x >>> 0) % WORDS.length;
}

/** The text of output token `index` for a prompt with this seed. */
export function fillerToken(seed: number, index: number): string {
  return `${WORDS[fillerTokenId(seed, index)]} `;
}

/** The first `count` output tokens as one string. */
export function fillerText(seed: number, count: number): string {
  let out = '';
  for (let i = 0; i < count; i++) out += fillerToken(seed, i);
  return out;
}
