// A token-level radix tree of cached KV, as SGLang's RadixCache keeps one per rank.
// Edges are segments (Uint32Array views, or a range of a synthesised request's token source:
// token-source.ts), never per-token objects, so a 100k-token prompt is one node until
// another prompt diverges inside it. LRU is over a logical access counter rather than wall
// or simulated time, so ties cannot depend on event timing.

import { Buffer } from 'node:buffer';
import type { KeyChunk, KeyStore } from './key-store.ts';
import { type BlockTokenSource, tokenSourceOf } from './token-source.ts';

export interface RadixNode {
  /** The key's tokens; empty when `src` spells them. */
  key: Uint32Array;
  /** The key store chunk the key is a view of (key-store.ts); null: no store, its own buffer. */
  chunk: KeyChunk | null;
  /** When set, the key is positions [start, start + len) of this source (no copy). */
  src: BlockTokenSource | null;
  start: number;
  /** Tokens in the key. */
  len: number;
  parent: RadixNode | null;
  /** The key it is filed under in its parent's children: childKey of its first tokens. */
  first: number | string;
  /**
   * NO_CHILDREN (shared, never written) until it has one: most nodes are leaves. An array of
   * exactly its children, scanned for `first`; past INDEX_CHILDREN, `index` finds them too.
   * (A Map per node with children was a fifth of a thousand-rank replay's heap.)
   */
  children: RadixNode[];
  index: Map<number | string, RadixNode> | null;
  lockRef: number;
  lastAccess: number;
}

/** Opaque to callers: the node where a match or insert ended. */
export type RadixHandle = RadixNode;

/**
 * Observers of what enters and leaves the cache (a worker publishing KV events from it).
 * `path` is the token sequence from the root; it may be a view of a caller's buffer, valid
 * only during the call.
 */
export interface RadixCacheHooks {
  /** path[start, path.length) was added below the already cached path[0, start). */
  stored?(path: Uint32Array, start: number): void;
  /** The leaf holding path[start, path.length) was evicted; path[0, start) stays cached. */
  evicted?(path: Uint32Array, start: number): void;
  /** Everything was dropped (reset). */
  cleared?(): void;
}

export interface RadixCacheOptions {
  capacityTokens: number;
  pageSize?: number;
  /**
   * Eviction order: 'lru' (default; a match refreshes what it walked) or 'fifo' (oldest
   * inserted first; matches do not refresh). The GPU cache is LRU as in SGLang; a host tier
   * may be either.
   */
  eviction?: 'lru' | 'fifo';
  /** Called with the full token path of every evicted leaf (e.g. to write it to a host tier). */
  onEvict?(path: Uint32Array): void;
  /**
   * Where keys are copied (see key-store.ts): a simulation gives its ranks one store. Default
   * null: each key its own buffer.
   */
  keys?: KeyStore | null;
}

export interface MatchResult {
  matchedTokens: number;
  handle: RadixHandle;
}

function toU32(ids: ArrayLike<number>): Uint32Array {
  return ids instanceof Uint32Array ? ids : Uint32Array.from(ids as ArrayLike<number>);
}

// Past this many equal tokens a walk compares the rest of a segment natively (memcmp runs
// about 20x faster than a JS loop over a long shared prefix); a mismatch early in a segment
// is still found by the loop without building views.
const NATIVE_COMPARE = 64;

/** a[ai, ai + n) equals b[bi, bi + n). */
function sameTokens(a: Uint32Array, ai: number, b: Uint32Array, bi: number, n: number): boolean {
  const x = Buffer.from(a.buffer, a.byteOffset + 4 * ai, 4 * n);
  const y = Buffer.from(b.buffer, b.byteOffset + 4 * bi, 4 * n);
  return x.equals(y);
}

/**
 * How many of ids[pos, pos + lim) equal a source's tokens from position `at` on. When the
 * query is a view of a source of the same family and block size at the same positions, a
 * block with equal ids on both sides is equal as a whole; any other block is compared token
 * by token.
 */
function sourceMatch(
  s: BlockTokenSource,
  at: number,
  ids: Uint32Array,
  pos: number,
  lim: number,
  q: BlockTokenSource | null,
  off: number,
): number {
  let m = 0;
  if (q !== null && q.family === s.family && q.blockTokens === s.blockTokens && off + pos === at) {
    const b = s.blockTokens;
    while (m < lim) {
      const block = Math.floor((at + m) / b);
      const end = Math.min(lim, (block + 1) * b - at);
      if (q.blockId(block) !== s.blockId(block)) {
        while (m < end && s.tokenAt(at + m) === ids[pos + m]) m++;
        if (m < end) return m;
      }
      m = end;
    }
    return m;
  }
  while (m < lim && s.tokenAt(at + m) === ids[pos + m]) m++;
  return m;
}

const EMPTY = new Uint32Array(0);

/** The children of every leaf; attach() gives a node its own array. */
const NO_CHILDREN: RadixNode[] = [];

/** Past this many children a node indexes them by first key (a scan is cheaper up to here). */
const INDEX_CHILDREN = 8;

function childOf(node: RadixNode, key: number | string): RadixNode | undefined {
  if (node.index !== null) return node.index.get(key);
  const kids = node.children;
  for (let i = 0; i < kids.length; i++) if (kids[i]!.first === key) return kids[i];
  return undefined;
}

/** Files `child` under `parent` by child.first, which no child of `parent` has yet. */
function attach(parent: RadixNode, child: RadixNode): void {
  const kids = parent.children;
  if (parent.index !== null) {
    kids.push(child);
    parent.index.set(child.first, child);
    return;
  }
  // Exactly sized: push() would give a one-child array room for seventeen.
  const n = kids.length;
  const next = new Array<RadixNode>(n + 1);
  for (let i = 0; i < n; i++) next[i] = kids[i]!;
  next[n] = child;
  parent.children = next;
  if (n + 1 > INDEX_CHILDREN) parent.index = new Map(next.map((c) => [c.first, c]));
}

/** Puts `next` where `old` was filed (a split: both have the same first key). */
function replaceChild(parent: RadixNode, old: RadixNode, next: RadixNode): void {
  parent.children[parent.children.indexOf(old)] = next;
  parent.index?.set(next.first, next);
}

function detach(parent: RadixNode, child: RadixNode): void {
  const kids = parent.children;
  const i = kids.indexOf(child);
  if (i < 0) return;
  if (kids.length === 1) {
    parent.children = NO_CHILDREN;
    parent.index = null;
    return;
  }
  if (parent.index !== null && kids.length > INDEX_CHILDREN / 2 + 1) {
    // Order among children does not matter: nothing reads it.
    kids[i] = kids[kids.length - 1]!;
    kids.pop();
    parent.index.delete(child.first);
    return;
  }
  parent.children = kids.filter((c) => c !== child);
  parent.index = null;
}

export class RadixCache {
  readonly capacity: number;
  readonly pageSize: number;
  private readonly root: RadixNode;
  private readonly leaves = new Set<RadixNode>();
  /**
   * Eviction candidates as a min-heap on lastAccess, kept across evict() calls: rebuilding it
   * from every leaf on each call made a full cache cost O(leaves) per admitted request, which
   * grew with trace length. Entries go stale (node touched, locked, no longer a leaf, gone)
   * and are skipped when popped; a leaf's entry is pushed whenever it becomes an unlocked leaf
   * or is touched, so every current candidate has one entry carrying its current lastAccess.
   * Leaves' lastAccess values are distinct (each walk takes a new tick and touches one path),
   * so the pop order is the order a fresh heap of the same leaves would give.
   */
  private heapNodes: RadixNode[] = [];
  private heapTimes: number[] = [];
  private tick = 0;
  private size = 0;
  private evictableSize = 0;
  /** Set to observe stores, evictions and resets; unset costs nothing. */
  hooks: RadixCacheHooks | undefined;
  /** Tokens and nodes removed by evict() since creation. */
  evictedTokens = 0;
  evictedNodes = 0;
  private readonly touch: boolean;
  private readonly onEvict: ((path: Uint32Array) => void) | null;
  private readonly keys: KeyStore | null;

  constructor(opts: RadixCacheOptions) {
    const pageSize = opts.pageSize ?? 1;
    if (!Number.isInteger(opts.capacityTokens) || opts.capacityTokens <= 0) {
      throw new RangeError(`capacityTokens must be a positive integer, got ${opts.capacityTokens}`);
    }
    if (!Number.isInteger(pageSize) || pageSize < 1) {
      throw new RangeError(`pageSize must be an integer >= 1, got ${pageSize}`);
    }
    this.capacity = opts.capacityTokens;
    this.pageSize = pageSize;
    const eviction = opts.eviction ?? 'lru';
    if (eviction !== 'lru' && eviction !== 'fifo') {
      throw new RangeError(`eviction must be 'lru' or 'fifo', got '${String(eviction)}'`);
    }
    this.touch = eviction === 'lru';
    this.onEvict = opts.onEvict ?? null;
    this.keys = opts.keys ?? null;
    this.root = {
      key: EMPTY,
      chunk: null,
      src: null,
      start: 0,
      len: 0,
      parent: null,
      first: 0,
      children: NO_CHILDREN,
      index: null,
      lockRef: 1,
      lastAccess: 0,
    };
  }

  /** Tokens held in the tree (locked and unlocked). */
  get used(): number {
    return this.size;
  }

  /** Tokens in unlocked nodes: what eviction could free. */
  get evictable(): number {
    return this.evictableSize;
  }

  /** Tokens in locked nodes (in use by running requests). */
  get protectedSize(): number {
    return this.size - this.evictableSize;
  }

  get nodeCount(): number {
    let n = 0;
    const stack = [this.root];
    while (stack.length > 0) {
      const node = stack.pop()!;
      n++;
      for (const c of node.children) stack.push(c);
    }
    return n - 1;
  }

  private childKey(ids: Uint32Array, offset: number): number | string {
    if (this.pageSize === 1) return ids[offset]!;
    return ids.subarray(offset, offset + this.pageSize).join(',');
  }

  /** The key `node` is filed under in its parent's children (childKey of its first tokens). */
  private firstKey(node: RadixNode): number | string {
    const s = node.src;
    if (s === null) return this.childKey(node.key, 0);
    if (this.pageSize === 1) return s.tokenAt(node.start);
    const page: number[] = [];
    for (let i = 0; i < this.pageSize; i++) page.push(s.tokenAt(node.start + i));
    return page.join(',');
  }

  private floorPage(n: number): number {
    return this.pageSize === 1 ? n : n - (n % this.pageSize);
  }

  /** Splits `child` after `at` tokens; returns the new upper node. */
  private split(child: RadixNode, at: number): RadixNode {
    const parent = child.parent!;
    const upper: RadixNode = {
      key: child.src === null ? child.key.subarray(0, at) : EMPTY,
      chunk: null,
      src: child.src,
      start: child.start,
      len: at,
      parent,
      first: child.first,
      children: NO_CHILDREN,
      index: null,
      lockRef: child.lockRef,
      lastAccess: child.lastAccess,
    };
    replaceChild(parent, child, upper);
    if (child.src === null) {
      child.key = child.key.subarray(at);
      this.keys?.share(child, upper);
    } else {
      child.start += at;
    }
    child.len -= at;
    child.parent = upper;
    child.first = this.firstKey(child);
    attach(upper, child);
    return upper;
  }

  /**
   * Walks the common prefix of `ids` (page-aligned); splits so the result ends on a node.
   * `src` is the source `ids` is a view of (token-source.ts) and `off` the source position
   * of ids[0].
   */
  private walk(
    ids: Uint32Array,
    len: number,
    from: RadixNode,
    fromPos: number,
    src: BlockTokenSource | null,
    off: number,
  ): { node: RadixNode; pos: number } {
    const t = ++this.tick;
    let node = from;
    let pos = fromPos;
    while (pos < len) {
      const child = childOf(node, this.childKey(ids, pos));
      if (child === undefined) break;
      const lim = Math.min(child.len, len - pos);
      let m = 0;
      if (child.src === null) {
        const key = child.key;
        while (m < lim && m < NATIVE_COMPARE && key[m] === ids[pos + m]) m++;
        if (m === NATIVE_COMPARE) {
          if (sameTokens(key, m, ids, pos + m, lim - m)) m = lim;
          else while (m < lim && key[m] === ids[pos + m]) m++;
        }
      } else {
        m = sourceMatch(child.src, child.start, ids, pos, lim, src, off);
      }
      m = this.floorPage(m);
      if (m === 0) break;
      if (this.touch) {
        child.lastAccess = t;
        if (child.children.length === 0 && child.lockRef === 0) this.candidate(child);
      }
      if (m < child.len) {
        node = this.split(child, m);
        pos += m;
        break;
      }
      pos += m;
      node = child;
    }
    return { node, pos };
  }

  /** Longest cached prefix of `ids`, rounded down to whole pages. Touches it for LRU. */
  match(ids: ArrayLike<number>): MatchResult {
    const u = toU32(ids);
    const src = tokenSourceOf(u);
    const { node, pos } = this.walk(
      u,
      this.floorPage(u.length),
      this.root,
      0,
      src,
      u.byteOffset >>> 2,
    );
    return { matchedTokens: pos, handle: node };
  }

  /** Inserts `ids[0:length]` (whole pages); returns the handle of the node it ends at. */
  insert(ids: ArrayLike<number>, length = ids.length): RadixHandle {
    return this.insertFrom(null, 0, ids, length);
  }

  /**
   * insert() resuming from `handle`, a node the caller holds locked whose path spells
   * `ids[0:depth]`: a request growing by chunks then costs O(chunk), not O(prompt) per chunk.
   */
  insertFrom(
    handle: RadixHandle | null,
    depth: number,
    ids: ArrayLike<number>,
    length = ids.length,
  ): RadixHandle {
    const u = toU32(ids);
    const len = this.floorPage(Math.min(length, u.length));
    const start = handle !== null && handle.parent !== null && depth <= len ? handle : this.root;
    const src = tokenSourceOf(u);
    const off = u.byteOffset >>> 2;
    const { node, pos } = this.walk(u, len, start, start === this.root ? 0 : depth, src, off);
    if (pos >= len) return node;
    const leaf = this.addLeaf(node, u, pos, len, src, off);
    this.hooks?.stored?.(u.subarray(0, len), pos);
    return leaf;
  }

  /** Hangs ids[pos, len) below `node` as a new leaf (see walk() for `src` and `off`). */
  private addLeaf(
    node: RadixNode,
    ids: Uint32Array,
    pos: number,
    len: number,
    src: BlockTokenSource | null,
    off: number,
  ): RadixNode {
    const leaf: RadixNode = {
      key: EMPTY,
      chunk: null,
      src,
      start: src === null ? 0 : off + pos,
      len: len - pos,
      parent: node,
      first: this.childKey(ids, pos),
      children: NO_CHILDREN,
      index: null,
      lockRef: 0,
      lastAccess: this.tick,
    };
    // Else copy: a view would pin the caller's whole buffer for as long as the node lives.
    if (src === null) {
      if (this.keys !== null) this.keys.place(leaf, ids, pos, len);
      else leaf.key = ids.slice(pos, len);
    }
    if (node !== this.root && node.children.length === 0) this.leaves.delete(node);
    attach(node, leaf);
    this.leaves.add(leaf);
    this.candidate(leaf);
    this.size += leaf.len;
    this.evictableSize += leaf.len;
    return leaf;
  }

  /**
   * insertFrom() given only the part past `depth`: `tail[i]` is the token at depth + i and
   * `handle` (held locked by the caller, or null with depth 0) spells the path up to depth,
   * which is page aligned. A caller appending a short reply to a long prompt then copies the
   * reply, not the prompt. Observers are given the full path, rebuilt from the tree.
   */
  extend(handle: RadixHandle | null, depth: number, tail: Uint32Array): RadixHandle {
    const start = handle ?? this.root;
    if (start !== this.root && start.parent === null) {
      throw new Error('RadixCache.extend: the handle was dropped (evicted or reset)');
    }
    if (start === this.root ? depth !== 0 : depth % this.pageSize !== 0) {
      throw new Error(`RadixCache.extend: depth ${depth} does not match the handle`);
    }
    if (this.hooks?.stored) {
      const head = start === this.root ? EMPTY : this.pathOf(start);
      if (head.length !== depth) {
        throw new Error(`RadixCache.extend: handle spells ${head.length} tokens, not ${depth}`);
      }
      const full = new Uint32Array(depth + tail.length);
      full.set(head, 0);
      full.set(tail, depth);
      return this.insertFrom(start === this.root ? null : start, depth, full);
    }
    const len = this.floorPage(tail.length);
    const src = tokenSourceOf(tail);
    const off = tail.byteOffset >>> 2;
    const { node, pos } = this.walk(tail, len, start, 0, src, off);
    if (pos >= len) return node;
    return this.addLeaf(node, tail, pos, len, src, off);
  }

  lock(handle: RadixHandle): void {
    for (let n: RadixNode | null = handle; n !== null && n !== this.root; n = n.parent) {
      if (n.lockRef++ === 0) this.evictableSize -= n.len;
    }
  }

  unlock(handle: RadixHandle): void {
    // A handle from before a reset: its tree is gone, nothing to unlock.
    if (handle.parent === null && handle !== this.root) return;
    for (let n: RadixNode | null = handle; n !== null && n !== this.root; n = n.parent) {
      if (n.lockRef <= 0) throw new Error('RadixCache.unlock: node is not locked');
      if (--n.lockRef === 0) {
        this.evictableSize += n.len;
        if (n.children.length === 0) this.candidate(n);
      }
    }
  }

  /** Evicts least-recently-used unlocked leaves until `tokens` are freed; returns tokens freed. */
  evict(tokens: number): number {
    if (tokens <= 0 || this.evictableSize === 0) return 0;
    let freed = 0;
    while (freed < tokens) {
      const leaf = this.popCandidate();
      if (leaf === undefined) break;
      const parent = leaf.parent!;
      if (this.onEvict !== null || this.hooks?.evicted) {
        const path = this.pathOf(leaf);
        this.onEvict?.(path);
        this.hooks?.evicted?.(path, path.length - leaf.len);
      }
      detach(parent, leaf);
      this.leaves.delete(leaf);
      leaf.parent = null;
      this.size -= leaf.len;
      this.evictableSize -= leaf.len;
      freed += leaf.len;
      this.keys?.release(leaf);
      this.evictedNodes++;
      if (parent !== this.root && parent.children.length === 0) {
        this.leaves.add(parent);
        if (parent.lockRef === 0) this.candidate(parent);
      }
    }
    this.evictedTokens += freed;
    return freed;
  }

  private candidate(node: RadixNode): void {
    // Stale entries pile up with touches; past a bound, start again from the live leaves.
    if (this.heapNodes.length > 4 * this.leaves.size + 1024) {
      this.heapNodes = [];
      this.heapTimes = [];
      for (const leaf of this.leaves) {
        if (leaf !== node && leaf.lockRef === 0) heapPush(this.heapNodes, this.heapTimes, leaf);
      }
    }
    heapPush(this.heapNodes, this.heapTimes, node);
  }

  /** The unlocked leaf with the oldest lastAccess, skipping stale entries. */
  private popCandidate(): RadixNode | undefined {
    for (;;) {
      const t = this.heapTimes[0];
      const node = heapPop(this.heapNodes, this.heapTimes);
      if (node === undefined) return undefined;
      if (
        node.parent !== null &&
        node.children.length === 0 &&
        node.lockRef === 0 &&
        node.lastAccess === t &&
        this.leaves.has(node)
      ) {
        return node;
      }
    }
  }

  private pathOf(node: RadixNode): Uint32Array {
    let len = 0;
    for (let n: RadixNode | null = node; n !== null; n = n.parent) len += n.len;
    const out = new Uint32Array(len);
    for (let n: RadixNode | null = node; n !== null; n = n.parent) {
      len -= n.len;
      const s = n.src;
      if (s === null) out.set(n.key, len);
      else for (let i = 0; i < n.len; i++) out[len + i] = s.tokenAt(n.start + i);
    }
    return out;
  }

  /** Drops everything (a rank restart); locked nodes included. */
  reset(): void {
    // Detach every node (a handle still held is then known to be dropped) and give its key
    // back to the store.
    const stack = [...this.root.children];
    while (stack.length > 0) {
      const node = stack.pop()!;
      for (const c of node.children) stack.push(c);
      node.parent = null;
      this.keys?.release(node);
    }
    this.root.children = NO_CHILDREN;
    this.root.index = null;
    this.leaves.clear();
    this.heapNodes = [];
    this.heapTimes = [];
    this.size = 0;
    this.evictableSize = 0;
    this.hooks?.cleared?.();
  }
}

function heapPush(nodes: RadixNode[], times: number[], n: RadixNode): void {
  const t = n.lastAccess;
  let i = nodes.length;
  nodes.push(n);
  times.push(t);
  while (i > 0) {
    const p = (i - 1) >> 1;
    if (times[p]! <= t) break;
    nodes[i] = nodes[p]!;
    times[i] = times[p]!;
    i = p;
  }
  nodes[i] = n;
  times[i] = t;
}

function heapPop(nodes: RadixNode[], times: number[]): RadixNode | undefined {
  const top = nodes[0];
  const last = nodes.pop();
  const lastT = times.pop();
  if (top === undefined || last === undefined || lastT === undefined || nodes.length === 0) {
    return top;
  }
  let i = 0;
  for (;;) {
    const l = 2 * i + 1;
    if (l >= nodes.length) break;
    const r = l + 1;
    const c = r < nodes.length && times[r]! < times[l]! ? r : l;
    if (times[c]! >= lastT) break;
    nodes[i] = nodes[c]!;
    times[i] = times[c]!;
    i = c;
  }
  nodes[i] = last;
  times[i] = lastT;
  return top;
}
