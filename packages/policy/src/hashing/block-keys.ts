// Chained block keys over token content, computed the same way from an engine's BlockStored
// event (parent key + the block's tokens) and from a prompt (block after block), so a router
// can match prompts against what engines report without knowing the engine's own block hash
// (vLLM's seeded sha256 over CBOR, SGLang's): engine hashes are only used to find a block's
// parent and to apply removals. Every router replica computes identical keys from identical
// events, which is what lets replicas agree without talking to each other.
//
// key(block j) = mix(key(block j - 1), tokens of block j, j), key(block -1) = rootKey(lora).
// Two 32-bit lanes seeded from the parent key run over the block's tokens; the result is a
// 53-bit safe integer (fastest Map key). A collision needs ~10^8 distinct blocks and costs one
// wrong cache guess, never a wrong answer.

import { fmix32 } from './chained.ts';

const TWO_POW_32 = 4294967296;

/** The parent key of a prompt's first block: the base model, or one chain per LoRA adapter. */
export function rootKey(loraId: number | null = null): number {
  if (loraId === null) return 0x1b873593;
  const a = fmix32(loraId ^ 0x5bd1e995);
  const b = fmix32(Math.imul(loraId, 0x27d4eb2f) ^ a);
  return a + (b & 0x1fffff) * TWO_POW_32;
}

/** The key of tokens[start, end) whose parent block's key is `parent`. */
export function blockKey(
  parent: number,
  tokens: ArrayLike<number>,
  start: number,
  end: number,
): number {
  const lo = parent >>> 0;
  const hi = Math.floor(parent / TWO_POW_32);
  let h1 = lo ^ 0x9747b28c;
  let h2 = (hi * 0x9e3779b1) ^ 0x5bd1e995;
  for (let i = start; i < end; i++) {
    const t = tokens[i] as number;
    let k = Math.imul(t, 0xcc9e2d51);
    k = (k << 15) | (k >>> 17);
    k = Math.imul(k, 0x1b873593);
    h1 ^= k;
    h1 = (h1 << 13) | (h1 >>> 19);
    h1 = (Math.imul(h1, 5) + 0xe6546b64) | 0;
    let j = Math.imul(t ^ 0x7f4a7c15, 0x16a8802d);
    j = (j << 17) | (j >>> 15);
    h2 = (Math.imul(h2 ^ j, 0x01000193) + 0x165667b1) | 0;
  }
  const n = end - start;
  const a = fmix32(h1 ^ n ^ hi);
  const b = fmix32((h2 ^ Math.imul(n, 0x27d4eb2f) ^ lo) + a);
  return a + (b & 0x1fffff) * TWO_POW_32;
}

/**
 * Appends to `out` (cleared first) the chained key of every full block among the first
 * `maxTokens` tokens: `out[j]` names tokens [0, (j + 1) * blockSize). A partial last block
 * has no key: engines only report full blocks.
 */
export function chainedBlockKeys(
  inputIds: ArrayLike<number>,
  blockSize: number,
  maxTokens: number = Number.POSITIVE_INFINITY,
  out: number[] = [],
  root: number = rootKey(null),
): number[] {
  out.length = 0;
  const blocks = Math.floor(Math.min(inputIds.length, maxTokens) / blockSize);
  // blockKey inlined: this loop is the events path's per-decision hashing. The parent key's
  // two halves are carried as integers (a key is a + (b & 0x1fffff) * 2^32 with a = its low
  // 32 bits), and hi * 0x9e3779b1 < 2^53 is exact, so Math.imul gives the same low 32 bits:
  // the keys equal blockKey's, without a float division and a large-double ToInt32 per block.
  let lo = root >>> 0;
  let hi = Math.floor(root / TWO_POW_32);
  let pos = 0;
  for (let j = 0; j < blocks; j++) {
    let h1 = lo ^ 0x9747b28c;
    let h2 = Math.imul(hi, 0x9e3779b1) ^ 0x5bd1e995;
    const end = pos + blockSize;
    for (; pos < end; pos++) {
      const t = inputIds[pos] as number;
      let k = Math.imul(t, 0xcc9e2d51);
      k = (k << 15) | (k >>> 17);
      k = Math.imul(k, 0x1b873593);
      h1 ^= k;
      h1 = (h1 << 13) | (h1 >>> 19);
      h1 = (Math.imul(h1, 5) + 0xe6546b64) | 0;
      let x = Math.imul(t ^ 0x7f4a7c15, 0x16a8802d);
      x = (x << 17) | (x >>> 15);
      h2 = (Math.imul(h2 ^ x, 0x01000193) + 0x165667b1) | 0;
    }
    const a = fmix32(h1 ^ blockSize ^ hi);
    const b = fmix32((h2 ^ Math.imul(blockSize, 0x27d4eb2f) ^ lo) + a);
    lo = a;
    hi = b & 0x1fffff;
    out.push(a + hi * TWO_POW_32);
  }
  return out;
}
