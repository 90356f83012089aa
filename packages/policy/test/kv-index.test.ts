import { describe, expect, it } from 'vitest';
import {
  blockKey,
  chainedBlockKeys,
  createDispatcher,
  createLoadTracker,
  KvBlockIndex,
  rootKey,
} from '../src/index.ts';
import { makeRanks, prng, randomIds } from './helpers.ts';

const BS = 4;

/** Stores `ids` (whole blocks) on `rank` as an engine would: one BlockStored, hashes h0+j. */
function engineStore(
  index: KvBlockIndex,
  rank: number,
  ids: number[],
  h0: number,
  fromBlock = 0,
  parent: number | null = null,
): number[] {
  const blocks = Math.floor(ids.length / BS);
  const hashes = Array.from({ length: blocks - fromBlock }, (_, j) => h0 + fromBlock + j);
  index.store(rank, hashes, parent, ids.slice(fromBlock * BS, blocks * BS), BS);
  return hashes;
}

describe('chained block keys', () => {
  it('key j names the whole prefix: equal prefixes, equal keys; any earlier change, new keys', () => {
    const a = [1, 2, 3, 4, 5, 6, 7, 8, 9];
    const b = [1, 2, 3, 4, 5, 6, 7, 9, 9];
    const ka = chainedBlockKeys(a, BS);
    const kb = chainedBlockKeys(b, BS);
    expect(ka).toHaveLength(2);
    expect(ka[0]).toBe(kb[0]);
    expect(ka[1]).not.toBe(kb[1]);
    expect(chainedBlockKeys([9, 2, 3, 4, 5, 6, 7, 8], BS)[1]).not.toBe(ka[1]);
    expect(ka[1]).toBe(blockKey(ka[0] as number, a, 4, 8));
    for (const k of ka) expect(Number.isSafeInteger(k) && k >= 0).toBe(true);
  });

  it('the inlined prompt hashing gives blockKey’s chain exactly, any block size, root and token range', () => {
    const rand = prng(31);
    for (let t = 0; t < 60; t++) {
      const bs = [1, 3, 16, 32][t % 4] as number;
      const ids = randomIds(rand, 1 + Math.floor(rand() * 400)).map((x, i) =>
        t % 2 === 0 ? x : (x * 65_537 + i) >>> 0,
      );
      const root = t % 3 === 0 ? rootKey(t) : rootKey(null);
      const keys = chainedBlockKeys(ids, bs, Number.POSITIVE_INFINITY, [], root);
      expect(keys).toHaveLength(Math.floor(ids.length / bs));
      let parent = root;
      keys.forEach((k, j) => {
        parent = blockKey(parent, ids, j * bs, (j + 1) * bs);
        expect(k).toBe(parent);
      });
    }
  });

  it('LoRA adapters chain from roots of their own', () => {
    expect(rootKey(null)).not.toBe(rootKey(1));
    expect(rootKey(1)).not.toBe(rootKey(2));
    expect(chainedBlockKeys([1, 2, 3, 4], BS, 4, [], rootKey(7))[0]).not.toBe(
      chainedBlockKeys([1, 2, 3, 4], BS)[0],
    );
  });
});

describe('KvBlockIndex', () => {
  it('matches the longest stored prefix per rank, in tokens, by content', () => {
    const index = new KvBlockIndex();
    const prompt = randomIds(prng(1), 40);
    engineStore(index, 0, prompt.slice(0, 24), 100);
    engineStore(index, 2, prompt.slice(0, 8), 500);
    const out: number[] = [];
    index.match([...prompt, 1, 2], [0, 1, 2], out);
    expect(out).toEqual([24, 0, 8]);
    // A partial block is never matched; a prompt diverging inside block 1 matches block 0.
    index.match(prompt.slice(0, 7), [0], out);
    expect(out[0]).toBe(4);
  });

  it('chains a later event from its parent hash and applies removals and clears', () => {
    const index = new KvBlockIndex();
    const ids = randomIds(prng(2), 16);
    const first = engineStore(index, 1, ids.slice(0, 8), 10);
    // The engine extends the same request: blocks 2-3 chain from block 1's hash.
    engineStore(index, 1, ids, 10, 2, first[1] as number);
    const out: number[] = [];
    index.match(ids, [1], out);
    expect(out[1]).toBe(16);
    expect(index.remove(1, [13])).toBe(1);
    index.match(ids, [1], out);
    expect(out[1]).toBe(12);
    expect(index.remove(1, [999])).toBe(0);
    expect(index.stats().unknownRemovals).toBe(1);
    index.clearRank(1);
    index.match(ids, [1], out);
    expect(out[1]).toBe(0);
    expect(index.stats()).toMatchObject({
      blocks: 0,
      clears: 1,
      storedBlocks: 4,
      removedBlocks: 1,
    });
  });

  it('counts blocks whose parent it never saw instead of guessing', () => {
    const index = new KvBlockIndex();
    expect(index.store(0, [5], 4, [1, 2, 3, 4], BS)).toBe(0);
    expect(index.stats().orphanBlocks).toBe(1);
  });

  it('keeps a block shared by many ranks until the last holder removes it', () => {
    const index = new KvBlockIndex();
    const ids = randomIds(prng(3), 8);
    for (let r = 0; r < 40; r++) engineStore(index, r, ids, 1000 * r);
    const out: number[] = [];
    const all = Array.from({ length: 40 }, (_, r) => r);
    index.match(ids, all, out);
    expect(out.every((t) => t === 8)).toBe(true);
    for (let r = 0; r < 39; r++) index.remove(r, [1000 * r + 1]);
    index.match(ids, all, out);
    expect(out.slice(0, 39).every((t) => t === 4)).toBe(true);
    expect(out[39]).toBe(8);
  });

  it('counts a block stored twice on a rank (extra keys) once, until both are removed', () => {
    const index = new KvBlockIndex();
    const ids = [1, 2, 3, 4];
    index.store(0, [1], null, ids, BS);
    index.store(0, [2], null, ids, BS);
    index.remove(0, [1]);
    const out: number[] = [];
    index.match(ids, [0], out);
    expect(out[0]).toBe(4);
    index.remove(0, [2]);
    index.match(ids, [0], out);
    expect(out[0]).toBe(0);
  });

  it('is bounded: past maxBlocksPerRank the oldest stored blocks go first', () => {
    const index = new KvBlockIndex({ maxBlocksPerRank: 3 });
    const ids = randomIds(prng(4), 20);
    engineStore(index, 0, ids, 0);
    expect(index.blocks(0)).toBe(3);
    expect(index.stats().capacityEvictions).toBe(2);
    expect(() => new KvBlockIndex({ maxBlocksPerRank: 0 })).toThrow(/maxBlocksPerRank/);
  });

  it('ignores events in a different block size and says so', () => {
    const index = new KvBlockIndex();
    index.store(0, [1], null, [1, 2, 3, 4], 4);
    expect(index.store(0, [2], null, [1, 2], 2)).toBe(0);
    expect(index.stats().blockSizeMismatches).toBe(1);
  });

  it('keeps a block size given up front: another size is refused for that rank only', () => {
    const index = new KvBlockIndex({ blockSize: 4 });
    expect(index.blockSize).toBe(4);
    // A misconfigured engine on rank 1 reports first: its blocks are refused, the size stays.
    const sixteen = Array.from({ length: 16 }, (_, i) => i);
    expect(index.store(1, [9], null, sixteen, 16)).toBe(0);
    expect(index.blockSize).toBe(4);
    expect(index.blockSizeMismatch(1)).toBe(16);
    expect(index.stats().blockSizeMismatches).toBe(1);
    // The other ranks keep being indexed.
    expect(index.store(0, [1], null, [1, 2, 3, 4], 4)).toBe(1);
    expect(index.blockSizeMismatch(0)).toBeUndefined();
    const out: number[] = [];
    index.match([1, 2, 3, 4], [0, 1], out);
    expect(out).toEqual([4, 0]);
    // Rank 1's engine, restarted with the right size, is indexed again.
    expect(index.store(1, [10], null, [1, 2, 3, 4], 4)).toBe(1);
    expect(index.blockSizeMismatch(1)).toBeUndefined();
    expect(() => new KvBlockIndex({ blockSize: 0 })).toThrow(/blockSize/);
  });

  it('learns no block size from a BlockStored without blocks', () => {
    const learned = new KvBlockIndex();
    expect(learned.store(0, [], null, [], 7)).toBe(0);
    expect(learned.blockSize).toBeUndefined();
    expect(learned.store(0, [1], null, [1, 2, 3, 4], 4)).toBe(1);
    expect(learned.blockSize).toBe(4);
    const given = new KvBlockIndex({ blockSize: 4 });
    expect(given.store(2, [], null, [], 7)).toBe(0);
    expect(given.store(0, [1], null, [1, 2, 3, 4], 4)).toBe(1);
    expect(given.blockSizeMismatch(2)).toBeUndefined();
    expect(given.stats().blockSizeMismatches).toBe(0);
  });

  it('keeps LoRA blocks out of base-model matches', () => {
    const index = new KvBlockIndex();
    index.store(0, [1], null, [1, 2, 3, 4], BS, 3);
    const out: number[] = [];
    index.match([1, 2, 3, 4], [0], out);
    expect(out[0]).toBe(0);
  });
});

describe('cache_aware with an events index', () => {
  it('scores live ranks by the engines’ real blocks and the others by what it learned', () => {
    const d = createDispatcher({ method: 'cache_aware', window: 4 });
    const index = new KvBlockIndex();
    const ranks = makeRanks(4);
    const prompt = randomIds(prng(5), 64);
    // The learned index would send this prefix back to where it first went...
    const first = d.dispatch({ inputIds: prompt }, ranks, { kvIndex: index, nowMs: 0 });
    // ...but the engines say rank (first+1)%4 holds it (another replica routed it there) and
    // the first rank evicted it.
    const holder = (first.rank + 1) % 4;
    for (let r = 0; r < 4; r++) index.setLive(r, true);
    engineStore(index, holder, prompt, 1);
    // (Past pendingMs: what it sent itself no longer counts as held.)
    const d2 = d.dispatch({ inputIds: prompt }, ranks, { kvIndex: index, nowMs: 60_000 });
    expect(d2).toEqual({ rank: holder, reason: 'cache-hit', matchedTokens: 64 });
    // Events stale for every rank: back to the learned index (which saw both decisions).
    for (let r = 0; r < 4; r++) index.setLive(r, false);
    index.clearRank(holder);
    const d3 = d.dispatch({ inputIds: prompt }, ranks, { kvIndex: index, nowMs: 120_000 });
    expect(d3.reason).toBe('cache-hit');
    expect([first.rank, holder]).toContain(d3.rank);
    const stats = d.stats().method ?? {};
    expect(stats.eventsRankScores).toBe(4);
    expect(stats.fallbackRankScores).toBe(8);
  });

  it('matches in the engine block size when it does not divide the window', () => {
    const d = createDispatcher({ method: 'cache_aware', window: 6 });
    const index = new KvBlockIndex();
    const prompt = randomIds(prng(7), 30);
    index.setLive(2, true);
    engineStore(index, 2, prompt.slice(0, 20), 1);
    const ranks = makeRanks(3);
    for (let i = 0; i < 3; i++) {
      const ctx = { kvIndex: index, nowMs: i * 60_000 };
      expect(d.dispatch({ inputIds: prompt }, ranks, ctx)).toEqual({
        rank: 2,
        reason: 'cache-hit',
        matchedTokens: 20,
      });
    }
  });

  it('counts prefixes it just sent as held until the engine reports them (pendingMs)', () => {
    const d = createDispatcher({ method: 'cache_aware', window: 4, pendingMs: 1000 });
    const index = new KvBlockIndex();
    index.store(0, [1], null, [9, 9, 9, 9], 4); // sets the block size
    for (let r = 0; r < 4; r++) index.setLive(r, true);
    const ranks = makeRanks(4);
    const prompt = randomIds(prng(8), 40);
    // A burst before any BlockStored for this prompt: all to the first one's rank.
    const first = d.dispatch({ inputIds: prompt }, ranks, { kvIndex: index, nowMs: 0 });
    for (let i = 1; i < 4; i++) {
      expect(
        d.dispatch({ inputIds: [...prompt, i] }, ranks, { kvIndex: index, nowMs: 10 * i }),
      ).toMatchObject({ rank: first.rank, reason: 'cache-hit', matchedTokens: 40 });
    }
    // Past pendingMs with no event confirming it, the prefix is no longer assumed held.
    const late = d.dispatch({ inputIds: prompt }, ranks, { kvIndex: index, nowMs: 5000 });
    expect(late.reason).toBe('cache-miss-hash');
  });

  it('keeps what it sent before the first event when the block size is known up front', () => {
    // The index's block size decides the keys cache_aware records its decisions under; learned
    // only from the first event, the records made before it would never match again.
    const index = new KvBlockIndex({ blockSize: 4 });
    for (let r = 0; r < 4; r++) index.setLive(r, true);
    const d = createDispatcher({ method: 'cache_aware', window: 8 });
    const ranks = makeRanks(4);
    const turn1 = randomIds(prng(12), 40);
    const first = d.dispatch({ inputIds: turn1 }, ranks, { kvIndex: index, nowMs: 0 });
    // The first events arrive (another prompt) and confirm the size; turn 1's are still due.
    index.store(1, [77], null, [5, 5, 5, 5], 4);
    const turn2 = [...turn1, ...randomIds(prng(13), 16)];
    expect(d.dispatch({ inputIds: turn2 }, ranks, { kvIndex: index, nowMs: 50 })).toEqual({
      rank: first.rank,
      reason: 'cache-hit',
      matchedTokens: 40,
    });
  });

  it('sends a cold prefix to the same rank from every replica, within the load bound', () => {
    const index = new KvBlockIndex({ blockSize: 4 });
    for (let r = 0; r < 8; r++) index.setLive(r, true);
    const system = randomIds(prng(14), 64);
    const replicas = [0, 1, 2].map(() =>
      createDispatcher({ method: 'cache_aware', window: 16, slackTokens: 1000 }),
    );
    const loads = [0, 1, 2].map(() => createLoadTracker(8));
    // Each replica has its own, different view of the load.
    for (let i = 0; i < 3; i++)
      (loads[i] as ReturnType<typeof createLoadTracker>).onDispatch(i, 500);
    const picks = replicas.map((d, i) => {
      const session = [...system, ...randomIds(prng(20 + i), 30)];
      const dec = d.dispatch(
        { inputIds: session },
        (loads[i] as ReturnType<typeof createLoadTracker>).ranks,
        {
          kvIndex: index,
          nowMs: i,
        },
      );
      expect(dec.reason).toBe('cache-miss-hash');
      return dec.rank;
    });
    expect(new Set(picks).size).toBe(1);
    // A rank past the overload bound is passed over for the next choice.
    const busy = createLoadTracker(8);
    busy.onDispatch(picks[0] as number, 100_000);
    const other = createDispatcher({ method: 'cache_aware', window: 16, slackTokens: 1000 });
    const dec = other.dispatch({ inputIds: [...system, 1, 2, 3] }, busy.ranks, { kvIndex: index });
    expect(dec.reason).toBe('cache-miss-hash');
    expect(dec.rank).not.toBe(picks[0]);
    // Different prefixes spread over the ranks.
    const spread = new Set<number>();
    for (let i = 0; i < 32; i++) {
      const fresh = createDispatcher({ method: 'cache_aware', window: 16 });
      spread.add(
        fresh.dispatch({ inputIds: randomIds(prng(100 + i), 32) }, makeRanks(8), { kvIndex: index })
          .rank,
      );
    }
    expect(spread.size).toBeGreaterThan(4);
    // coldPick chooses the rule whatever the index source.
    const prompt = [...system, 9];
    const least = createDispatcher({ method: 'cache_aware', window: 16, coldPick: 'least-load' });
    expect(least.dispatch({ inputIds: prompt }, makeRanks(8), { kvIndex: index }).reason).toBe(
      'cache-miss-least-load',
    );
    // Without an events index too (the keys are then the learned index's window hashes, so
    // the rank may differ from the events path's, but replicas agree among themselves).
    const learned = [1, 2].map(() => {
      const d = createDispatcher({ method: 'cache_aware', window: 16, coldPick: 'hash' });
      return d.dispatch({ inputIds: prompt }, makeRanks(8));
    });
    expect(learned[0]?.reason).toBe('cache-miss-hash');
    expect(learned[1]).toEqual(learned[0]);
    expect(() => createDispatcher({ method: 'cache_aware', coldPick: 'random' })).toThrow(
      /coldPick/,
    );
  });

  it('never picks an unhealthy or overloaded holder and stays deterministic', () => {
    const run = () => {
      const d = createDispatcher({ method: 'cache_aware', window: 4, slackTokens: 0 });
      const index = new KvBlockIndex();
      const tracker = createLoadTracker(6);
      tracker.setHealthy(2, false);
      for (let r = 0; r < 6; r++) index.setLive(r, r % 2 === 0);
      const rand = prng(6);
      const shared = randomIds(rand, 32);
      for (let r = 0; r < 6; r++) engineStore(index, r, shared, r * 100);
      const out: number[] = [];
      for (let i = 0; i < 200; i++) {
        const ids = [...shared, ...randomIds(rand, 8)];
        const dec = d.dispatch({ inputIds: ids }, tracker.ranks, { kvIndex: index });
        expect(dec.rank).not.toBe(2);
        tracker.onDispatch(dec.rank, ids.length);
        if (i % 3 === 0) tracker.onComplete(dec.rank, ids.length);
        out.push(dec.rank);
      }
      return out;
    };
    const a = run();
    expect(run()).toEqual(a);
    expect(new Set(a).size).toBeGreaterThan(2);
  });
});
