// Prefix digests kept across the simulations of one plan (a sweep's cells, a comparison's
// policies). prefix_match hashes each request's first tokens with BLAKE2b; a sweep over
// windows and prefix lengths asks for the same (request, key length) again in every cell
// whose prefix length is the same, and on a trace few keys repeat within a cell, so its
// per-dispatcher memo does not help. A replay's token arrays are described by their request
// (token-source.ts), and a request's tokens are a function of it, so the digest of its first
// `count` tokens is the request's for good: kept here by the request and the count. Arrays
// without a source (synthetic plans) are left to the method's own memo.
import { type PrefixDigests, tokenDigest } from '@kvroute/policy';
import { tokenSourceOf } from '../cache/token-source.ts';

export class SourceDigests implements PrefixDigests {
  /** At most this many digests (about 200 bytes each with their buffer and map entries). */
  static readonly MAX_ENTRIES = 262_144;
  private readonly bySource = new WeakMap<object, Map<number, Uint8Array>>();
  private entries = 0;
  private hits = 0;
  private misses = 0;

  digest(ids: ArrayLike<number>, count: number): Uint8Array | null {
    if (!(ids instanceof Uint32Array) || ids.byteOffset !== 0) return null;
    const source = tokenSourceOf(ids);
    if (source === null) return null;
    let kept = this.bySource.get(source);
    const known = kept?.get(count);
    if (known !== undefined) {
      this.hits++;
      return known;
    }
    this.misses++;
    if (this.entries >= SourceDigests.MAX_ENTRIES) return null;
    const digest = tokenDigest(ids, count);
    if (kept === undefined) {
      kept = new Map();
      this.bySource.set(source, kept);
    }
    kept.set(count, digest);
    this.entries++;
    return digest;
  }

  /** Digests served from the store, and computed for it. */
  stats(): { hits: number; misses: number; entries: number } {
    return { hits: this.hits, misses: this.misses, entries: this.entries };
  }
}
