// Chained window hashes: key i names the whole prefix of windows 0..i (tokens
// [0, (i+1) * window)), so "which ranks hold this prefix" is one map lookup per window,
// like a radix tree flattened into a hash set (Dynamo's kv-router uses the same trick with
// block hashes).
//
// Why not BLAKE2b as prefix_match does: these keys never leave the process (they index the
// dispatcher's own decisions), so they need speed and few collisions, not cross-language
// agreement. Two independent 32-bit murmur3-style lanes run over the tokens once, and each
// window boundary finalizes copies of the running state, so the cost is linear in tokens
// (about 2-3 ns per token) however many windows there are. Keys are 53-bit numbers (safe
// integers) because Map<number> is the fastest JS lookup; with 2^53 keys a collision is
// expected only after ~10^8 distinct prefixes, and one would only cost a wrong cache guess.

const TWO_POW_32 = 4294967296;

/** murmur3's 32-bit finalizer (full avalanche); also the jump-hash draws' mixer. */
export function fmix32(h: number): number {
  let x = h;
  x ^= x >>> 16;
  x = Math.imul(x, 0x85ebca6b);
  x ^= x >>> 13;
  x = Math.imul(x, 0xc2b2ae35);
  x ^= x >>> 16;
  return x >>> 0;
}

function toKey(h1: number, h2: number, length: number): number {
  const a = fmix32(h1 ^ length);
  const b = fmix32((h2 ^ Math.imul(length, 0x27d4eb2f)) + a);
  return a + (b & 0x1fffff) * TWO_POW_32;
}

/**
 * Appends to `out` (cleared first) the chained key of every full window among the first
 * `maxTokens` tokens: `out[i]` covers tokens [0, (i + 1) * window). A partial last window is
 * not keyed (an engine's radix cache may hold it, but the next request's window will differ).
 */
export function chainedWindowHashes(
  inputIds: ArrayLike<number>,
  window: number,
  maxTokens: number = Number.POSITIVE_INFINITY,
  out: number[] = [],
): number[] {
  out.length = 0;
  const limit = Math.min(inputIds.length, maxTokens);
  const windows = Math.floor(limit / window);
  let h1 = 0x9747b28c;
  let h2 = 0x5bd1e995;
  let pos = 0;
  for (let w = 0; w < windows; w++) {
    const end = pos + window;
    for (; pos < end; pos++) {
      const t = inputIds[pos] as number;
      let k = Math.imul(t, 0xcc9e2d51);
      k = (k << 15) | (k >>> 17);
      k = Math.imul(k, 0x1b873593);
      h1 ^= k;
      h1 = (h1 << 13) | (h1 >>> 19);
      h1 = (Math.imul(h1, 5) + 0xe6546b64) | 0;
      let j = Math.imul(t ^ 0x7f4a7c15, 0x16a88000 | 0x2d);
      j = (j << 17) | (j >>> 15);
      h2 = (Math.imul(h2 ^ j, 0x01000193) + 0x165667b1) | 0;
    }
    out.push(toKey(h1, h2, end));
  }
  return out;
}

/**
 * One 53-bit key for the first `length` tokens. A prefix's key does not depend on the window
 * size: it equals `chainedWindowHashes(ids, w)[length / w - 1]` for any w dividing `length`.
 * Used by methods that key on a single prefix (consistent hashing) rather than every window.
 */
export function prefixKey(inputIds: ArrayLike<number>, length: number): number {
  if (length === 0) return toKey(0x9747b28c, 0x5bd1e995, 0);
  const out = chainedWindowHashes(inputIds, length, length, scratch);
  return out[0] as number;
}

const scratch: number[] = [];

/** The key of a string (a routing key), in the same 53-bit space; for requests without tokens. */
export function stringKey(text: string): number {
  let h1 = 0x3c6ef372;
  let h2 = 0xa54ff53a;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    h1 = Math.imul(h1 ^ c, 0x01000193);
    h2 = (Math.imul(h2 ^ c, 0x5bd1e995) + 0x6b43a9b5) | 0;
  }
  return toKey(h1, h2, text.length);
}

/**
 * Jump consistent hash (Lamping and Veach, 2014) of a 53-bit key over `n` ranks, for the
 * key's `attempt`-th independent draw. O(ln n) steps and no table. Ranks get equal shares;
 * growing `n` to `n + 1` moves a key only to the new rank `n` (about 1/(n + 1) of keys), and
 * shrinking it moves only the keys of the rank removed. Draws 0, 1, 2, ... are the key's own
 * order over ranks, the same on every router replica. The random stream is a 32-bit
 * splitmix (a Weyl sequence through fmix32) seeded by the key and the attempt.
 */
export function jumpRank(key: number, attempt: number, n: number): number {
  return jumpRankOf(key >>> 0, Math.floor(key / TWO_POW_32), attempt, n);
}

/**
 * jumpRank for a key given as two uint32 words (low, high): the same draws jumpRank gives a
 * 53-bit key with those words. Used to fail over seeded by a digest or a bootstrap room.
 */
export function jumpRankOf(lo: number, hi: number, attempt: number, n: number): number {
  let state = fmix32(lo ^ fmix32(hi ^ Math.imul(attempt + 1, 0x9e3779b1)));
  let b = 0;
  let j = 0;
  while (j < n) {
    b = j;
    state = (state + 0x9e3779b9) | 0;
    // A uniform draw in (0, 1], scaled: the next rank this key would jump to. Floating-point
    // division, as the Python reference computes it too.
    j = Math.floor(((b + 1) * TWO_POW_32) / (fmix32(state) + 1));
  }
  return b;
}
