// The prefix key of prefix_match, as upstream SGLang proposed it, and the helpers that turn
// its digest into ranks. Python reference: packages/policy/scripts/gen-golden.py.
//
// Hot path (node:crypto blake2b512): the tokens are written into one reusable Uint32Array, or,
// when the input already is a Uint32Array on a little-endian machine, hashed in place; no
// per-token allocation. The mod is streamed over the digest bytes, so no BigInt.
import * as nodeCrypto from 'node:crypto';
import { blake2b } from '@noble/hashes/blake2.js';
import { TokenIdRangeError } from '../errors.ts';

const LITTLE_ENDIAN = new Uint8Array(new Uint32Array([1]).buffer)[0] === 1;

let scratch = new Uint32Array(4096);
let scratchBytes = new Uint8Array(scratch.buffer);

/**
 * Number of leading tokens that form the key: floor(min(len, prefixLength) / window) * window,
 * or the whole input when it is shorter than one window. Assumes prefixLength >= window >= 1.
 */
export function prefixKeyLength(length: number, window: number, prefixLength: number): number {
  if (length < window) return length;
  return Math.floor(Math.min(length, prefixLength) / window) * window;
}

/** Throws TokenIdRangeError unless the first `count` ids are integers in [0, 2^32). */
export function validateTokenIds(inputIds: ArrayLike<number>, count = inputIds.length): void {
  if (inputIds instanceof Uint32Array) return;
  for (let i = 0; i < count; i++) {
    const v = inputIds[i] as number;
    // `v >>> 0 === v` holds exactly for integers in [0, 2^32) (false for NaN, fractions, -0 is 0).
    if (v >>> 0 !== v) throw new TokenIdRangeError(i, v);
  }
}

/** The little-endian uint32 bytes of the first `count` ids, validated; a view, valid until the next call. */
export function tokenBytes(inputIds: ArrayLike<number>, count: number): Uint8Array {
  if (count > inputIds.length)
    throw new RangeError(`count ${count} exceeds input length ${inputIds.length}`);
  if (LITTLE_ENDIAN && inputIds instanceof Uint32Array) {
    return new Uint8Array(inputIds.buffer, inputIds.byteOffset, count * 4);
  }
  if (scratch.length < count) {
    scratch = new Uint32Array(Math.max(count, scratch.length * 2));
    scratchBytes = new Uint8Array(scratch.buffer);
  }
  if (LITTLE_ENDIAN) {
    for (let i = 0; i < count; i++) {
      const v = inputIds[i] as number;
      if (v >>> 0 !== v) throw new TokenIdRangeError(i, v);
      scratch[i] = v;
    }
  } else {
    const view = new DataView(scratch.buffer);
    for (let i = 0; i < count; i++) {
      const v = inputIds[i] as number;
      if (v >>> 0 !== v) throw new TokenIdRangeError(i, v);
      view.setUint32(i * 4, v, true);
    }
  }
  return scratchBytes.subarray(0, count * 4);
}

// node:crypto's one-shot hash() (Node >= 20.12 / 21.7) skips the Hash object, its stream
// plumbing and two extra native calls: about a third of the digest's cost on the router's hot
// path. Same algorithm and bytes; createHash where hash() is missing.
type OneShotHash = (algorithm: string, data: Uint8Array, outputEncoding: 'buffer') => Buffer;
const oneShotHash = (nodeCrypto as { hash?: OneShotHash }).hash;

/** BLAKE2b-512 (node:crypto) of the first `count` ids as little-endian uint32s. */
export function tokenDigest(inputIds: ArrayLike<number>, count: number): Buffer {
  const bytes = tokenBytes(inputIds, count);
  if (oneShotHash) return oneShotHash('blake2b512', bytes, 'buffer');
  return nodeCrypto.createHash('blake2b512').update(bytes).digest();
}

/** Same digest through @noble/hashes, for runtimes without node:crypto's blake2b512. */
export function tokenDigestPortable(inputIds: ArrayLike<number>, count: number): Uint8Array {
  return blake2b(tokenBytes(inputIds, count), { dkLen: 64 });
}

/** BLAKE2b-512 of prefix_match's key tokens (see prefixKeyLength). */
export function prefixDigest(
  inputIds: ArrayLike<number>,
  window: number,
  prefixLength: number,
): Buffer {
  return tokenDigest(inputIds, prefixKeyLength(inputIds.length, window, prefixLength));
}

/**
 * The digest read as a big-endian unsigned integer, mod `n` (1 <= n <= 2^32), equal to
 * BigInt semantics: r stays below n, so r * 256 + byte stays below 2^40, exact in a double.
 */
export function digestMod(digest: Uint8Array, n: number): number {
  let r = 0;
  for (let i = 0; i < digest.length; i++) r = (r * 256 + (digest[i] as number)) % n;
  return r;
}

/** Reads a big-endian uint32 at `offset` (used to seed the failover order from a digest). */
export function digestWord(digest: Uint8Array, offset: number): number {
  return (
    (((digest[offset] as number) << 24) |
      ((digest[offset + 1] as number) << 16) |
      ((digest[offset + 2] as number) << 8) |
      (digest[offset + 3] as number)) >>>
    0
  );
}
