// A host whose ranks renumber (service discovery numbers workers by URL, so a pod joining
// before others in that order shifts their indexes): what a dispatcher learned about a rank
// must follow the worker to its new index, not stay on the index for whoever stands there now.
import { describe, expect, it } from 'vitest';
import { ChainedPrefixIndex } from '../src/hashing/chained-index.ts';
import { createDispatcher, createLoadTracker } from '../src/index.ts';
import { KvBlockIndex } from '../src/kv-index/block-index.ts';
import { makeRanks, prng, randomIds } from './helpers.ts';

const rand = prng(7);
const SYSTEM = randomIds(rand, 2048);
const turn = (n: number) => [...SYSTEM, ...randomIds(rand, n)];

describe('ChainedPrefixIndex.remap', () => {
  it('moves each rank’s keys to its new index, forgets a rank that left, and starts new ones empty', () => {
    const index = new ChainedPrefixIndex();
    index.resize(3);
    index.insert(0, [10, 11], 100);
    index.insert(1, [20, 21, 22], 100);
    index.insert(2, [10, 30], 100);
    // Rank 0 moves to 2, rank 1 to 0, rank 2 left; rank 1 and 3 are new.
    index.remap([2, 0, -1], 4);
    expect(index.numRanks).toBe(4);
    expect([0, 1, 2, 3].map((r) => index.size(r))).toEqual([3, 0, 2, 0]);
    const ranks: number[] = [];
    const counts: number[] = [];
    index.matchHolders([10, 11], () => true, ranks, counts);
    // Only the moved rank 0 holds key 10 now: rank 2's copy left with it.
    expect(ranks).toEqual([2]);
    expect(counts).toEqual([2]);
    index.matchHolders([20, 21, 22], () => true, ranks, counts);
    expect([ranks, counts]).toEqual([[0], [3]]);
    const out = [0, 0, 0, 0];
    index.match([20, 21], [0, 1, 2, 3], out);
    expect(out).toEqual([2, 0, 0, 0]);
  });
});

describe('KvBlockIndex.remap', () => {
  it('moves each rank’s blocks and liveness to its new index and drops a rank that left', () => {
    const index = new KvBlockIndex();
    const a = Array.from({ length: 32 }, (_, i) => i + 1);
    const b = Array.from({ length: 32 }, (_, i) => 1000 + i);
    index.store(0, [11, 12], null, a, 16);
    index.store(1, [21], null, b, 16);
    index.store(2, [11], null, a, 16);
    index.setLive(0, true);
    // Rank 0 moves to 1, rank 1 to 0, rank 2 left.
    index.remap([1, 0, -1], 2);
    expect([0, 1].map((r) => index.blocks(r))).toEqual([1, 2]);
    expect([index.isLive(0), index.isLive(1)]).toEqual([false, true]);
    const out = [0, 0];
    index.match(a, [0, 1], out);
    expect(out).toEqual([0, 32]);
    index.match(b, [0, 1], out);
    expect(out).toEqual([16, 0]);
    // Removals follow the moved rank: rank 1's blocks are rank 0's old ones.
    expect(index.remove(1, [12])).toBe(1);
    index.match(a, [0, 1], out);
    expect(out).toEqual([0, 16]);
  });
});

describe('Dispatcher.remapRanks', () => {
  it('cache_aware: a learned prefix follows its worker to the worker’s new index', () => {
    const d = createDispatcher({ method: 'cache_aware' });
    const first = d.dispatch({ inputIds: turn(100) }, makeRanks(3));
    // A worker joins first in the table's order: every rank moves up one.
    d.remapRanks([1, 2, 3], 4);
    const again = d.dispatch({ inputIds: turn(300) }, makeRanks(4));
    expect(again).toEqual({ rank: first.rank + 1, reason: 'cache-hit', matchedTokens: 2048 });
  });

  it('cache_aware: what a worker that left had learned is forgotten, not handed to its successor', () => {
    const d = createDispatcher({ method: 'cache_aware' });
    const first = d.dispatch({ inputIds: turn(100) }, makeRanks(3));
    const moves = [0, 1, 2].map((r) => (r === first.rank ? -1 : r < first.rank ? r : r - 1));
    d.remapRanks(moves, 2);
    const again = d.dispatch({ inputIds: turn(300) }, makeRanks(2));
    expect(again.reason).toBe('cache-miss-least-load');
  });

  it('routing-key affinity: a pin follows its rank, and a pin to a rank that left is re-picked', () => {
    const d = createDispatcher({ method: 'round_robin', affinity: 'routing_key' });
    const ranks = makeRanks(3);
    const a = d.dispatch({ routingKey: 'a' }, ranks, { nowMs: 0 });
    const b = d.dispatch({ routingKey: 'b' }, ranks, { nowMs: 0 });
    expect(a.rank).not.toBe(b.rank);
    // a's rank moves to the end; b's rank leaves.
    const moves = [0, 1, 2].map((r) => (r === a.rank ? 2 : r === b.rank ? -1 : a.rank < r ? 0 : 1));
    d.remapRanks(moves, 3);
    expect(d.dispatch({ routingKey: 'a' }, ranks, { nowMs: 1 })).toEqual({
      rank: 2,
      reason: 'affinity',
    });
    expect(d.dispatch({ routingKey: 'b' }, ranks, { nowMs: 1 }).reason).not.toBe('affinity');
    expect(d.stats().affinity?.size).toBe(2);
  });

  for (const told of ['tracker and dispatcher', 'dispatcher alone']) {
    it(`cache_aware: a cold prompt goes to the coolest rank as the ranks stand after the renumbering (${told} told)`, () => {
      const d = createDispatcher({ method: 'cache_aware' });
      const tracker = createLoadTracker(3);
      // Ranks 0 and 1 took long new prefixes (their caches churned), rank 2 a short one: a
      // cold prompt's load tie goes to rank 2, the coolest, through the tracker's load index.
      d.begin({ inputIds: turn(100), routedRank: 0 }, tracker).done();
      d.begin({ inputIds: randomIds(rand, 2048), routedRank: 1 }, tracker).done();
      const first = d.begin({ inputIds: randomIds(rand, 600) }, tracker);
      first.done();
      expect(first.rank).toBe(2);
      // Ranks 1 and 2 swap places: the coolest is now rank 1. A host moves its load counters
      // too (the tracker first, as the router does); with every rank idle it need not.
      const moves = [0, 2, 1];
      if (told === 'tracker and dispatcher') tracker.remap(moves, 3);
      d.remapRanks(moves, 3);
      const cold = d.begin({ inputIds: randomIds(rand, 600) }, tracker);
      cold.done();
      expect(cold).toMatchObject({ rank: 1, reason: 'cache-miss-least-load' });
    });
  }

  it('refuses moves that are not a renumbering', () => {
    const d = createDispatcher({ method: 'cache_aware' });
    expect(() => d.remapRanks([0, 0], 2)).toThrow('two ranks move to rank 0');
    expect(() => d.remapRanks([0, 2], 2)).toThrow('rank 1 moves to 2, not a rank of 2 or -1');
    expect(() => d.remapRanks([0.5], 2)).toThrow('rank 0 moves to 0.5');
    expect(() => d.remapRanks([], -1)).toThrow('numRanks must be a whole number');
  });
});
