// Which rank holds which KV blocks, as the engines themselves report it (vLLM's and SGLang's
// BlockStored / BlockRemoved / AllBlocksCleared events): precise where cache_aware's learned
// index guesses. The indexer only records; choosing a rank stays with the method (Dynamo's
// kv-router keeps the same split).
//
// Keys: every stored block gets the chained content key of block-keys.ts (parent's key +
// its tokens), so the index is keyed by token content and a prompt is matched by hashing it
// in the engine's block size. Engine hashes are kept per rank only to resolve parents and
// removals. A block whose parent the index never saw (events missed before a replay could
// catch up, a router joining after the engine's replay buffer rolled over) cannot be keyed and
// is counted in `orphanBlocks`; the engine re-reports a prefix only once it was evicted, so a
// late joiner learns old prefixes slowly (the router reports this as partial history).
//
// Layout: `holders[w]` maps a content key to a 32-bit mask of the ranks 32w..32w+31 holding
// it, so a prompt is matched with one Map lookup per block per 32 ranks, whatever the number
// of holders; each rank keeps engine hash -> content key in insertion order.
//
// Memory: per (rank, block) one entry in the rank's hash map and a share of one holders
// entry; `pnpm --filter @kvroute/policy bench:kv-index` prints bytes per block measured.
// Bounded by maxBlocksPerRank: past it a rank's oldest-stored blocks are dropped
// (`capacityEvictions`), which only happens if removals were lost, since an engine never
// holds more blocks than its pool.
//
// LoRA: blocks stored with a lora_id chain from a root of their own, so they never match a
// base-model prompt; prompts are matched against the base-model chain only (RouteRequest
// carries no adapter). Extra keys (multimodal hashes, cache salt) are not in the content key:
// two blocks with equal tokens but different extra keys share a key (counted once per rank).

import { blockKey, chainedBlockKeys, rootKey } from '../hashing/block-keys.ts';
import { remapByRank } from '../rank-moves.ts';
import type { KvIndexView } from '../types.ts';

/** An engine's block hash: a safe integer, or a string for wider ints and byte hashes. */
export type EngineBlockHash = number | string;

export interface KvBlockIndexOptions {
  /**
   * The block size the engines must report (vLLM's --block-size, SGLang's --page-size), known
   * before any event. Default: learned from the first BlockStored that carries a block.
   * Knowing it up front matters to cache_aware: it keys its own records (learned index,
   * prefixes just sent) in the events' block size once one is known, so records made before
   * the first event would not match later prompts. A given size is never replaced: a rank
   * whose engine reports another one has its blocks refused (`blockSizeMismatch(rank)`), so
   * one misconfigured engine, or one odd event, cannot turn the index off for the others.
   */
  blockSize?: number;
  /** Blocks kept per rank at most (oldest stored go first past it). Default 4,194,304. */
  maxBlocksPerRank?: number;
  /** Match at most this many leading tokens of a prompt. Default 131,072. */
  maxPrefixTokens?: number;
}

export interface KvBlockIndexStats {
  blocks: number;
  storedBlocks: number;
  removedBlocks: number;
  clears: number;
  orphanBlocks: number;
  unknownRemovals: number;
  capacityEvictions: number;
  blockSizeMismatches: number;
}

interface RankBlocks {
  byHash: Map<EngineBlockHash, number>;
  /** Content keys this rank holds more than once (extra keys), with the extra count. */
  dup: Map<number, number>;
  live: boolean;
  /** The other block size this rank's engine last reported (its blocks refused); 0 none. */
  badBlockSize: number;
}

/** A rank's blocks before any event: none, not live. */
function emptyRank(): RankBlocks {
  return { byHash: new Map(), dup: new Map(), live: false, badBlockSize: 0 };
}

export class KvBlockIndex implements KvIndexView {
  /** The engines' block size: given, or learned from the first non-empty BlockStored. */
  blockSize: number | undefined;
  readonly maxBlocksPerRank: number;
  readonly maxPrefixTokens: number;
  private ranks: RankBlocks[] = [];
  private holders: Map<number, number>[] = [];
  private readonly counts = {
    storedBlocks: 0,
    removedBlocks: 0,
    clears: 0,
    orphanBlocks: 0,
    unknownRemovals: 0,
    capacityEvictions: 0,
    blockSizeMismatches: 0,
  };
  private readonly keys: number[] = [];
  private readonly alive: number[] = [];
  private readonly base = rootKey(null);

  constructor(options: KvBlockIndexOptions = {}) {
    const maxBlocks = options.maxBlocksPerRank ?? 4_194_304;
    if (!Number.isInteger(maxBlocks) || maxBlocks < 1) {
      throw new RangeError(
        `KvBlockIndex: maxBlocksPerRank must be an integer >= 1, got ${maxBlocks}`,
      );
    }
    const maxPrefix = options.maxPrefixTokens ?? 131_072;
    if (!Number.isInteger(maxPrefix) || maxPrefix < 1) {
      throw new RangeError(
        `KvBlockIndex: maxPrefixTokens must be an integer >= 1, got ${maxPrefix}`,
      );
    }
    this.maxBlocksPerRank = maxBlocks;
    this.maxPrefixTokens = maxPrefix;
    const bs = options.blockSize;
    if (bs !== undefined && (!Number.isInteger(bs) || bs < 1)) {
      throw new RangeError(`KvBlockIndex: blockSize must be an integer >= 1, got ${bs}`);
    }
    this.blockSize = bs;
  }

  get numRanks(): number {
    return this.ranks.length;
  }

  /** Tracks `numRanks` ranks; new ones start empty and not live, removed ones are dropped. */
  resize(numRanks: number): void {
    while (this.ranks.length < numRanks) this.ranks.push(emptyRank());
    while (this.ranks.length > numRanks) {
      this.clearRank(this.ranks.length - 1, false);
      this.ranks.pop();
    }
    const words = Math.ceil(numRanks / 32);
    while (this.holders.length < words) this.holders.push(new Map());
  }

  /**
   * The host renumbered its ranks: rank `old`'s blocks, liveness and block-size state now
   * belong to `moves[old]`, or are dropped where it left (-1); indexes no move reaches start
   * empty and not live. O(blocks held), for a change of the rank set, never per request.
   */
  remap(moves: readonly number[], numRanks: number): void {
    const ranks = remapByRank(this.ranks, moves, numRanks, emptyRank);
    this.ranks = ranks;
    const words = Math.max(this.holders.length, Math.ceil(numRanks / 32));
    this.holders = Array.from({ length: words }, () => new Map());
    for (let r = 0; r < ranks.length; r++) {
      const map = this.holders[r >>> 5] as Map<number, number>;
      const bit = 1 << (r & 31);
      // A key held more than once is one bit here; its extra count stays in the rank's dup.
      for (const key of (ranks[r] as RankBlocks).byHash.values()) {
        map.set(key, (map.get(key) ?? 0) | bit);
      }
    }
  }

  private rankOf(rank: number): RankBlocks {
    if (!Number.isInteger(rank) || rank < 0) {
      throw new RangeError(`KvBlockIndex: rank must be an integer >= 0, got ${rank}`);
    }
    if (rank >= this.ranks.length) this.resize(rank + 1);
    return this.ranks[rank] as RankBlocks;
  }

  /** Whether the host vouches for this rank's events now (connected, in sequence, fresh). */
  isLive(rank: number): boolean {
    return this.ranks[rank]?.live === true;
  }

  setLive(rank: number, live: boolean): void {
    this.rankOf(rank).live = live;
  }

  blocks(rank: number): number {
    return this.ranks[rank]?.byHash.size ?? 0;
  }

  /**
   * The block size this rank's engine last reported when it is not the index's (its blocks
   * are refused until it stores blocks of the right size), else undefined.
   */
  blockSizeMismatch(rank: number): number | undefined {
    const bad = this.ranks[rank]?.badBlockSize ?? 0;
    return bad === 0 ? undefined : bad;
  }

  private dropHolder(rank: number, key: number, r: RankBlocks): void {
    const extra = r.dup.get(key);
    if (extra !== undefined) {
      if (extra <= 1) r.dup.delete(key);
      else r.dup.set(key, extra - 1);
      return;
    }
    const map = this.holders[rank >>> 5] as Map<number, number>;
    const mask = (map.get(key) ?? 0) & ~(1 << (rank & 31));
    if (mask === 0) map.delete(key);
    else map.set(key, mask);
  }

  /**
   * Applies a BlockStored: `blockHashes[i]` holds tokens[i*blockSize, (i+1)*blockSize) and
   * chains from `parent` (null: a prompt's first block). Returns the blocks indexed.
   */
  store(
    rank: number,
    blockHashes: readonly EngineBlockHash[],
    parent: EngineBlockHash | null,
    tokenIds: ArrayLike<number>,
    blockSize: number,
    loraId: number | null = null,
  ): number {
    const r = this.rankOf(rank);
    // An event without blocks says nothing about the engine's blocks.
    if (blockHashes.length === 0) return 0;
    if (this.blockSize === undefined) this.blockSize = blockSize;
    else if (blockSize !== this.blockSize) {
      this.counts.blockSizeMismatches++;
      r.badBlockSize = blockSize;
      return 0;
    }
    r.badBlockSize = 0;
    let parentKey: number | undefined;
    if (parent === null) parentKey = loraId === null ? this.base : rootKey(loraId);
    else parentKey = r.byHash.get(parent);
    if (parentKey === undefined) {
      this.counts.orphanBlocks += blockHashes.length;
      return 0;
    }
    let n = 0;
    for (let i = 0; i < blockHashes.length; i++) {
      const h = blockHashes[i] as EngineBlockHash;
      const key = blockKey(parentKey, tokenIds, i * blockSize, (i + 1) * blockSize);
      parentKey = key;
      const old = r.byHash.get(h);
      if (old !== undefined) {
        if (old === key) continue; // re-stored (at-least-once delivery, replay overlap)
        this.dropHolder(rank, old, r);
        r.byHash.delete(h);
      }
      if (r.byHash.size >= this.maxBlocksPerRank) {
        const oldest = r.byHash.entries().next();
        if (!oldest.done) {
          r.byHash.delete(oldest.value[0]);
          this.dropHolder(rank, oldest.value[1], r);
          this.counts.capacityEvictions++;
        }
      }
      r.byHash.set(h, key);
      const map = this.holders[rank >>> 5] as Map<number, number>;
      const mask = map.get(key) ?? 0;
      const bit = 1 << (rank & 31);
      if (mask & bit) r.dup.set(key, (r.dup.get(key) ?? 0) + 1);
      else map.set(key, mask | bit);
      n++;
    }
    this.counts.storedBlocks += n;
    return n;
  }

  /** Applies a BlockRemoved. Returns the blocks removed (unknown hashes are counted). */
  remove(rank: number, blockHashes: readonly EngineBlockHash[]): number {
    const r = this.rankOf(rank);
    let n = 0;
    for (const h of blockHashes) {
      const key = r.byHash.get(h);
      if (key === undefined) {
        this.counts.unknownRemovals++;
        continue;
      }
      r.byHash.delete(h);
      this.dropHolder(rank, key, r);
      n++;
    }
    this.counts.removedBlocks += n;
    return n;
  }

  /** AllBlocksCleared, an engine restart, or a rank removed: forget everything it held. */
  clearRank(rank: number, count = true): void {
    const r = this.ranks[rank];
    if (!r) return;
    if (count) this.counts.clears++;
    for (const key of r.byHash.values()) this.dropHolder(rank, key, r);
    r.byHash.clear();
    r.dup.clear();
  }

  /**
   * For each rank in `ranks`, the tokens of the longest prefix of `inputIds` it holds, written
   * to out[rank] (multiples of the block size; 0 before any event set the block size).
   */
  match(inputIds: ArrayLike<number>, ranks: readonly number[], out: number[]): void {
    const bs = this.blockSize;
    if (bs === undefined) {
      for (const r of ranks) out[r] = 0;
      return;
    }
    this.matchKeys(
      chainedBlockKeys(inputIds, bs, this.maxPrefixTokens, this.keys, this.base),
      ranks,
      out,
    );
  }

  matchKeys(keys: readonly number[], ranks: readonly number[], out: number[]): void {
    for (const r of ranks) out[r] = 0;
    const bs = this.blockSize;
    if (bs === undefined || ranks.length === 0) return;
    if (this.holders.length === 1) {
      this.matchOneWord(keys, ranks, out, bs);
      return;
    }
    const alive = this.alive;
    const words = this.holders.length;
    alive.length = words;
    alive.fill(0);
    let any = 0;
    for (const r of ranks) {
      alive[r >>> 5] = (alive[r >>> 5] as number) | (1 << (r & 31));
      any = 1;
    }
    for (let j = 0; j < keys.length && any !== 0; j++) {
      const key = keys[j] as number;
      any = 0;
      for (let w = 0; w < words; w++) {
        const a = alive[w] as number;
        if (a === 0) continue;
        const still = a & ((this.holders[w] as Map<number, number>).get(key) ?? 0);
        let gone = a & ~still;
        while (gone !== 0) {
          const low = gone & -gone;
          out[w * 32 + 31 - Math.clz32(low)] = j * bs;
          gone ^= low;
        }
        alive[w] = still;
        any |= still;
      }
    }
    if (any !== 0) {
      const full = keys.length * bs;
      for (let w = 0; w < words; w++) {
        let a = alive[w] as number;
        while (a !== 0) {
          const low = a & -a;
          out[w * 32 + 31 - Math.clz32(low)] = full;
          a ^= low;
        }
      }
    }
  }

  /** matchKeys for up to 32 ranks: one mask, one lookup per block. */
  private matchOneWord(
    keys: readonly number[],
    ranks: readonly number[],
    out: number[],
    bs: number,
  ): void {
    const map = this.holders[0] as Map<number, number>;
    let alive = 0;
    for (const r of ranks) alive |= 1 << r;
    let j = 0;
    for (; j < keys.length && alive !== 0; j++) {
      const still = alive & (map.get(keys[j] as number) ?? 0);
      let gone = alive & ~still;
      while (gone !== 0) {
        const low = gone & -gone;
        out[31 - Math.clz32(low)] = j * bs;
        gone ^= low;
      }
      alive = still;
    }
    while (alive !== 0) {
      const low = alive & -alive;
      out[31 - Math.clz32(low)] = j * bs;
      alive ^= low;
    }
  }

  /** Blocks dropped past maxBlocksPerRank so far (stats() without the walk over ranks). */
  get capacityEvictions(): number {
    return this.counts.capacityEvictions;
  }

  totalBlocks(): number {
    let n = 0;
    for (const r of this.ranks) n += r.byHash.size;
    return n;
  }

  stats(): KvBlockIndexStats {
    return { blocks: this.totalBlocks(), ...this.counts };
  }
}
