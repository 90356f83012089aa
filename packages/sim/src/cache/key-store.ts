// Where radix keys live. A key copied into its own ArrayBuffer is an external allocation, and
// V8 starts a full garbage collection at every fixed step (64 MB) of external memory growth,
// marking the whole heap each time: a long replay on many ranks spent most of its CPU there,
// and as both the number of steps and the heap grow with the trace, its time grew
// superlinearly. Below 256 MiB of keys (by default) they stay in their own buffers, which is
// as fast there: the allocator reuses freed memory and few full collections happen. Above it,
// keys are copied into chunks of an eighth of what the store holds (up to 256 MiB), so the
// full collections it triggers are few; a chunk only takes resident memory as it fills. A
// chunk that lost half its keys (evicted) is compacted: its live keys move to the current
// chunk and the emptied chunk is kept for reuse (up to a quarter of the live keys), not left
// for a collection to free and fresh pages to fault in, so the store holds about 2x its live
// keys at most.

/** A holder of one key (a radix node): the store may move its key to another chunk. */
export interface KeyOwner {
  key: Uint32Array;
  /** The chunk its key is a view of, OWN_BUFFER for its own buffer, null: not in a store. */
  chunk: KeyChunk | null;
}

export class KeyChunk {
  /** Tokens handed out, live or not. */
  used = 0;
  /** Tokens of keys still held. */
  live = 0;
  readonly owners = new Set<KeyOwner>();
  constructor(readonly data: Uint32Array) {}
}

/** What a key in its own buffer points to: counted as live, never compacted. */
export const OWN_BUFFER = new KeyChunk(new Uint32Array(0));

export interface KeyStoreOptions {
  /** Smallest chunk, in tokens (default 2^18: 1 MiB). */
  minChunkTokens?: number;
  /** Largest chunk, in tokens (default 2^26: 256 MiB of address space, resident as it fills). */
  maxChunkTokens?: number;
  /** Live tokens from which keys go into chunks (default 2^26: 256 MiB); own buffers below. */
  chunkFromTokens?: number;
}

export class KeyStore {
  private current: KeyChunk | null = null;
  /** Compacted chunks, empty and reused before allocating: their memory is ours to reuse at
   * once, where a dropped chunk would wait for a full collection to be freed. */
  private spare: KeyChunk[] = [];
  private spareTokens = 0;
  private readonly minChunk: number;
  private readonly maxChunk: number;
  private readonly chunkFrom: number;
  /** Live tokens over all chunks (keys placed and not released). */
  private liveTokens = 0;
  /** Chunks created and keys moved by compaction since creation (for tests and benches). */
  chunksCreated = 0;
  tokensMoved = 0;

  constructor(opts: KeyStoreOptions = {}) {
    this.minChunk = opts.minChunkTokens ?? 1 << 18;
    this.maxChunk = opts.maxChunkTokens ?? 1 << 26;
    this.chunkFrom = opts.chunkFromTokens ?? 1 << 26;
    if (!Number.isInteger(this.chunkFrom) || this.chunkFrom < 0) {
      throw new RangeError(`chunkFromTokens must be an integer >= 0, got ${this.chunkFrom}`);
    }
    if (!Number.isInteger(this.minChunk) || this.minChunk < 1) {
      throw new RangeError(`minChunkTokens must be a positive integer, got ${this.minChunk}`);
    }
    if (!Number.isInteger(this.maxChunk) || this.maxChunk < this.minChunk) {
      throw new RangeError(
        `maxChunkTokens must be an integer >= minChunkTokens (${this.minChunk}), got ${this.maxChunk}`,
      );
    }
  }

  /** Live tokens held (placed and not released). */
  get live(): number {
    return this.liveTokens;
  }

  /** Copies ids[pos, len) into the store as `owner`'s key. */
  place(owner: KeyOwner, ids: Uint32Array, pos: number, len: number): void {
    const n = len - pos;
    if (this.liveTokens < this.chunkFrom || n > this.maxChunk >> 2) {
      // A small store, or a key too large to share a chunk usefully: its own buffer.
      owner.key = ids.slice(pos, len);
      owner.chunk = OWN_BUFFER;
      this.liveTokens += n;
      return;
    }
    let c = this.current;
    if (c === null || c.used + n > c.data.length) c = this.grow(n);
    const key = c.data.subarray(c.used, c.used + n);
    key.set(ids.subarray(pos, len));
    c.used += n;
    c.live += n;
    this.liveTokens += n;
    c.owners.add(owner);
    owner.key = key;
    owner.chunk = c;
  }

  /** `other` now holds part of `owner`'s key (a split): both keys are views of one chunk. */
  share(owner: KeyOwner, other: KeyOwner): void {
    other.chunk = owner.chunk;
    if (owner.chunk !== null && owner.chunk !== OWN_BUFFER) owner.chunk.owners.add(other);
  }

  /** `owner`'s key is no longer held (evicted or dropped). */
  release(owner: KeyOwner): void {
    const c = owner.chunk;
    if (c === null) return;
    owner.chunk = null;
    if (c === OWN_BUFFER) {
      this.liveTokens -= owner.key.length;
      return;
    }
    c.owners.delete(owner);
    c.live -= owner.key.length;
    this.liveTokens -= owner.key.length;
    if (c !== this.current && c.live * 2 < c.used) this.compact(c);
  }

  /** Moves a chunk's live keys to the current chunk and keeps the emptied one for reuse. */
  private compact(c: KeyChunk): void {
    const owners = [...c.owners];
    c.owners.clear();
    for (const o of owners) {
      const k = o.key;
      // place() counts it live again where it lands.
      this.liveTokens -= k.length;
      this.tokensMoved += k.length;
      this.place(o, k, 0, k.length);
    }
    // Nothing views it now (keys moved, released ones gone): reuse it.
    c.used = 0;
    c.live = 0;
    this.spare.push(c);
    this.spareTokens += c.data.length;
    while (this.spare.length > 1 && this.spareTokens * 4 > this.liveTokens) {
      this.spareTokens -= this.spare.shift()!.data.length;
    }
  }

  private grow(n: number): KeyChunk {
    // A compacted chunk first: its pages are resident already.
    const i = this.spare.findIndex((c) => c.data.length >= n);
    if (i >= 0) {
      const c = this.spare.splice(i, 1)[0]!;
      this.spareTokens -= c.data.length;
      this.current = c;
      return c;
    }
    // An eighth of what is held: V8's external-memory collections as the store grows from
    // 0 to L tokens are then O(log L) until chunks reach the largest size.
    let size = this.minChunk;
    while (size * 8 < this.liveTokens && size < this.maxChunk) size *= 2;
    const c = new KeyChunk(new Uint32Array(Math.max(size, n)));
    this.current = c;
    this.chunksCreated++;
    return c;
  }
}
