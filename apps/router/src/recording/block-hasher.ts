// The recorded trace's hash_ids: one id per block of `blockTokens` prompt tokens, chained, so
// equal leading ids mean an equal prefix (what a Mooncake trace's hash_ids mean). Each id is
// the first 6 bytes, big-endian, of HMAC-SHA256(secret, previous id's 6 bytes || the block's
// token ids as little-endian uint32); the first block has no previous id. Keyed with a
// per-deployment secret, so nobody without it can confirm a guessed short prompt by hashing it.
//
// Cost: HMAC-SHA256 is two SHA-256 digests (a microsecond or more each, whatever the length)
// over the block at about 1 GB/s with the CPU's SHA extensions, a few hundred MB/s without,
// which for a 100 KB prompt is more than the router spends on the whole request. But traffic that is worth
// recording repeats its prefixes (an agent's system prompt and tools, a conversation's earlier
// turns), and an id depends only on (previous id, block content). So ids are memoized on
// exactly that pair: a cheap fingerprint of a few of the block's tokens picks a bucket, and
// the stored copy of the block is compared byte for byte (memcmp speed) before an id is
// reused, so a memoized id is always the id the HMAC would give. Only new blocks pay the HMAC.
// The memo holds block contents in memory (never on disk), bounded by `memoBytes` with a
// two-generation approximation of LRU: a hit in the older generation moves to the newer one,
// and when the newer one fills, the older one is dropped.
import { createHash, hash } from 'node:crypto';

export interface BlockHasherOptions {
  secret: Buffer;
  blockTokens: number;
  /** Memory for memoized blocks, bytes (both generations together). Default 64 MiB. */
  memoBytes?: number;
}

interface MemoEntry {
  prev: number;
  /** The block's bytes (little-endian uint32 token ids), a private copy. */
  bytes: Buffer;
  id: number;
  next: MemoEntry | undefined;
}

const LITTLE_ENDIAN = new Uint8Array(new Uint32Array([1]).buffer)[0] === 1;
const NO_PREV = -1;

export class BlockHasher {
  readonly blockTokens: number;
  private readonly generationBytes: number;
  private young = new Map<number, MemoEntry>();
  private old = new Map<number, MemoEntry>();
  private youngBytes = 0;
  /**
   * HMAC (RFC 2104) as two one-shot SHA-256 calls over reused buffers: the inner input is
   * the key XOR ipad, the previous id and the block, the outer one the key XOR opad and the
   * inner digest. The same bytes as createHmac, at about half its cost for a short block: no
   * HMAC or Hash object per id, only the two digests.
   */
  private readonly innerIn: Buffer;
  private readonly outerIn = Buffer.alloc(64 + 32);
  /** Blocks hashed with the HMAC / answered from the memo (for the bench and tests). */
  hashed = 0;
  memoHits = 0;

  constructor(opts: BlockHasherOptions) {
    if (!Number.isInteger(opts.blockTokens) || opts.blockTokens < 1) {
      throw new Error(`block tokens must be an integer >= 1, got ${opts.blockTokens}`);
    }
    if (opts.secret.length < 16) {
      throw new Error(`the trace secret must be at least 16 bytes, got ${opts.secret.length}`);
    }
    // RFC 2104: a key longer than the block is hashed first, then both pads are XORed in.
    const key =
      opts.secret.length > 64 ? createHash('sha256').update(opts.secret).digest() : opts.secret;
    const ipad = Buffer.alloc(64, 0x36);
    const opad = Buffer.alloc(64, 0x5c);
    for (let i = 0; i < key.length; i++) {
      ipad[i] = ipad[i]! ^ key[i]!;
      opad[i] = opad[i]! ^ key[i]!;
    }
    this.innerIn = Buffer.alloc(64 + 6 + opts.blockTokens * 4);
    ipad.copy(this.innerIn, 0);
    opad.copy(this.outerIn, 0);
    this.blockTokens = opts.blockTokens;
    this.generationBytes = Math.max(0, Math.floor((opts.memoBytes ?? 64 * 1024 * 1024) / 2));
  }

  /** The chained block ids of a prompt (the last block may be partial). */
  hashIds(ids: Uint32Array): number[] {
    const le = LITTLE_ENDIAN ? ids : swapped(ids);
    const bytes = Buffer.from(le.buffer, le.byteOffset, le.length * 4);
    const step = this.blockTokens * 4;
    const out: number[] = [];
    let prev = NO_PREV;
    for (let at = 0; at < bytes.length; at += step) {
      const end = Math.min(bytes.length, at + step);
      prev = this.blockId(prev, bytes.subarray(at, end), end - at === step);
      out.push(prev);
    }
    return out;
  }

  /**
   * The HMAC of one string under the same secret (routing keys), its first 16 hex digits.
   * Sessions send many requests, so recent keys are remembered (a bounded map, emptied when
   * full), and each new one is the same two-digest HMAC as the block ids.
   */
  keyHash(value: string): string {
    const known = this.keys.get(value);
    if (known !== undefined) return known;
    const text = Buffer.from(value, 'utf8');
    const inner = hash(
      'sha256',
      Buffer.concat([this.innerIn.subarray(0, 64), text], 64 + text.length),
      'buffer',
    );
    inner.copy(this.outerIn, 64);
    const out = hash('sha256', this.outerIn, 'hex').slice(0, 16);
    if (this.keys.size >= KEYS_KEPT) this.keys.clear();
    this.keys.set(value, out);
    return out;
  }

  private readonly keys = new Map<string, string>();

  /**
   * One block's id. Only whole blocks are memoized: a prompt's partial last block is where the
   * next turn goes on, so it is seldom seen twice, and remembering every one would churn the
   * memo; it costs one HMAC.
   */
  private blockId(prev: number, block: Buffer, whole: boolean): number {
    const key = whole ? fingerprint(prev, block) : 0;
    if (whole) return this.memoized(key, prev, block) ?? this.hmac(key, prev, block, true);
    return this.hmac(key, prev, block, false);
  }

  private memoized(key: number, prev: number, block: Buffer): number | undefined {
    for (let e = this.young.get(key); e !== undefined; e = e.next) {
      if (e.prev === prev && e.bytes.equals(block)) {
        this.memoHits++;
        return e.id;
      }
    }
    for (let e = this.old.get(key); e !== undefined; e = e.next) {
      if (e.prev === prev && e.bytes.equals(block)) {
        this.memoHits++;
        this.remember(key, prev, e.bytes, e.id);
        return e.id;
      }
    }
    return undefined;
  }

  private hmac(key: number, prev: number, block: Buffer, whole: boolean): number {
    const input = this.innerIn;
    let at = 64;
    if (prev !== NO_PREV) {
      input.writeUIntBE(prev, 64, 6);
      at = 70;
    }
    block.copy(input, at);
    at += block.length;
    hash('sha256', input.subarray(0, at), 'buffer').copy(this.outerIn, 64);
    const id = hash('sha256', this.outerIn, 'buffer').readUIntBE(0, 6);
    this.hashed++;
    if (whole && this.generationBytes > 0) {
      // A native copy (Buffer.from of a Buffer copies byte by byte in JavaScript).
      const copy = Buffer.allocUnsafe(block.length);
      block.copy(copy);
      this.remember(key, prev, copy, id);
    }
    return id;
  }

  private remember(key: number, prev: number, bytes: Buffer, id: number): void {
    if (this.youngBytes + bytes.length > this.generationBytes) {
      this.old = this.young;
      this.young = new Map();
      this.youngBytes = 0;
    }
    const head: MemoEntry = { prev, bytes, id, next: this.young.get(key) };
    this.young.set(key, head);
    this.youngBytes += bytes.length + 64;
    // A bucket stays short (newest first): lookups never walk a long chain.
    let e = head;
    for (let n = 1; e.next !== undefined; n++) {
      if (n === BUCKET_MAX) {
        e.next = undefined;
        break;
      }
      e = e.next;
    }
  }
}

/** Routing-key hashes remembered (a few hundred KB at most). */
const KEYS_KEPT = 4096;

/** Blocks kept per fingerprint bucket: blocks differing only where none is sampled. */
const BUCKET_MAX = 8;

/**
 * A bucket key from the previous id, the length, 32 words spread over the block and its last
 * 8 (where a conversation's next turn differs from the last one): blocks that differ only
 * elsewhere share a bucket and are told apart by the byte comparison.
 */
function fingerprint(prev: number, block: Buffer): number {
  let h = Math.imul((prev % 0x7fffffff) ^ block.length, 0x9e3779b1);
  const words = block.length >>> 2;
  const stride = Math.max(1, words >>> 5);
  for (let w = 0; w < words; w += stride) {
    h = Math.imul(h ^ block.readUInt32LE(w * 4), 0x85ebca6b);
    h ^= h >>> 13;
  }
  for (let w = Math.max(0, words - 8); w < words; w++) {
    h = Math.imul(h ^ block.readUInt32LE(w * 4), 0xc2b2ae35);
    h ^= h >>> 16;
  }
  return h | 0;
}

function swapped(ids: Uint32Array): Uint32Array {
  const out = new Uint32Array(ids.length);
  const view = new DataView(out.buffer);
  for (let i = 0; i < ids.length; i++) view.setUint32(i * 4, ids[i]!, true);
  return out;
}
