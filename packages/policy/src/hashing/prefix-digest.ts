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
  return hashBytes(tokenBytes(inputIds, count));
}

function hashBytes(bytes: Uint8Array): Buffer {
  if (oneShotHash) return oneShotHash('blake2b512', bytes, 'buffer');
  return nodeCrypto.createHash('blake2b512').update(bytes).digest();
}

/**
 * Digests of keys hashed before, reused only after a byte-for-byte compare with the key:
 * agents send the same system and tools prefix again and again, so most keys were hashed
 * moments before. A hit costs a native compare of the key bytes instead of BLAKE2b (about
 * 30 us for 4,096 tokens). A key is kept from its second sighting on (a table of
 * fingerprints notes the first), so a workload whose keys never repeat pays a fingerprint per
 * key and nothing else; on the Mooncake trace with 8,192-token keys 3% of keys repeat, on an
 * agent workload 85-99%. Both tables are direct-mapped by the fingerprint (a newer key takes
 * an older one's slot): no map to grow, shrink or evict from. At most SLOTS keys of up to
 * MAX_KEY_BYTES each are held. The digests it returns are shared: read only.
 */
export class DigestMemo {
  static readonly SLOTS = 64;
  static readonly MAX_KEY_BYTES = 128 * 1024;
  private readonly seen = new Int32Array(1024);
  private readonly slots: ({ fp: number; bytes: Uint8Array; digest: Buffer } | undefined)[] =
    new Array(DigestMemo.SLOTS).fill(undefined);
  private hits = 0;
  private misses = 0;

  /** tokenDigest(inputIds, count), from the memo when the same key bytes were hashed here. */
  digest(inputIds: ArrayLike<number>, count: number): Buffer {
    const bytes = tokenBytes(inputIds, count);
    const fp = fingerprint(bytes);
    const at = fp & (DigestMemo.SLOTS - 1);
    const kept = this.slots[at];
    if (kept !== undefined && kept.fp === fp && Buffer.compare(kept.bytes, bytes) === 0) {
      this.hits++;
      return kept.digest;
    }
    this.misses++;
    const digest = hashBytes(bytes);
    if (bytes.length <= DigestMemo.MAX_KEY_BYTES) {
      const door = fp & (this.seen.length - 1);
      if (this.seen[door] === fp) this.slots[at] = { fp, bytes: bytes.slice(), digest };
      else this.seen[door] = fp;
    }
    return digest;
  }

  /** Lookups answered from the memo, and hashed. */
  stats(): { hits: number; misses: number } {
    return { hits: this.hits, misses: this.misses };
  }
}

/** A 32-bit mix of the key's length and 16 bytes spread over it (a lookup hint, not a hash). */
function fingerprint(bytes: Uint8Array): number {
  const n = bytes.length;
  let h = Math.imul(n ^ 0x2545f491, 0x9e3779b1);
  if (n === 0) return h;
  const last = n - 1;
  for (let k = 0; k < 16; k++) {
    h = Math.imul(h ^ (bytes[Math.floor((k * last) / 15)] as number), 0x85ebca6b);
    h ^= h >>> 13;
  }
  return h;
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
