import { describe, expect, it } from 'vitest';
import {
  createDispatcher,
  createLoadTracker,
  PolicyRangeError,
  type RankState,
  TokenIdRangeError,
} from '../src/index.ts';
import { CACHE_AWARE_DEFAULTS } from '../src/methods/cache-aware.ts';
import { leastLoadedCool } from '../src/pickers.ts';
import { makeRanks, prng, randomIds } from './helpers.ts';

const rand = prng(21);
const SYSTEM = randomIds(rand, 2048);
const withTail = (prefix: readonly number[], n: number): number[] => [
  ...prefix,
  ...randomIds(rand, n),
];

describe('cache_aware', () => {
  it('sends a repeated prefix back to the rank it learned, with the matched length', () => {
    const d = createDispatcher({ method: 'cache_aware' });
    const ranks = makeRanks(16);
    const first = d.dispatch({ inputIds: withTail(SYSTEM, 100) }, ranks);
    expect(first.reason).toBe('cache-miss-least-load');
    const again = d.dispatch({ inputIds: withTail(SYSTEM, 700) }, ranks);
    expect(again).toEqual({ rank: first.rank, reason: 'cache-hit', matchedTokens: 2048 });
  });

  it('prefers the longest prefix: a grown conversation follows its history', () => {
    const d = createDispatcher({ method: 'cache_aware' });
    const ranks = makeRanks(8);
    const turn1 = withTail(SYSTEM, 1000); // 3048 tokens: 11 windows of 256 indexed
    const a = d.dispatch({ inputIds: turn1 }, ranks).rank;
    // The shared system prompt alone is learned on another rank (routed there explicitly).
    const other = (a + 3) % 8;
    d.dispatch({ inputIds: withTail(SYSTEM, 50), routedRank: other }, ranks);
    const turn2 = withTail(turn1, 800);
    expect(d.dispatch({ inputIds: turn2 }, ranks)).toEqual({
      rank: a,
      reason: 'cache-hit',
      matchedTokens: 2816,
    });
    // A new conversation on the same system prompt: both hold 2048 tokens, the idle one wins.
    const fresh = d.dispatch({ inputIds: withTail(SYSTEM, 900) }, ranks);
    expect([a, other]).toContain(fresh.rank);
    expect(fresh.matchedTokens).toBe(2048);
  });

  it('spreads cold requests by load instead of sending them to one rank', () => {
    const d = createDispatcher({ method: 'cache_aware' });
    const tracker = createLoadTracker(16);
    const used = new Set<number>();
    for (let i = 0; i < 16; i++) {
      const ids = randomIds(rand, 1000);
      const decision = d.dispatch({ inputIds: ids }, tracker.ranks);
      expect(decision.reason).toBe('cache-miss-least-load');
      tracker.onDispatch(decision.rank, ids.length + 100);
      used.add(decision.rank);
    }
    expect(used.size).toBe(16);
    // Idle ranks with no load accounting still take turns (rotating tie-break).
    const idle = createDispatcher({ method: 'cache_aware' });
    const picked = new Set(
      Array.from(
        { length: 6 },
        () => idle.dispatch({ inputIds: randomIds(rand, 600) }, makeRanks(6)).rank,
      ),
    );
    expect(picked.size).toBe(6);
  });

  it('keeps affinity under light load (absolute slack) but leaves an overloaded holder', () => {
    const d = createDispatcher({ method: 'cache_aware', epsilon: 0.25, slackTokens: 16384 });
    const tracker = createLoadTracker(8);
    const home = d.dispatch({ inputIds: withTail(SYSTEM, 10) }, tracker.ranks).rank;
    tracker.onDispatch(home, 12_000); // uneven, but below the slack: stay
    expect(d.dispatch({ inputIds: withTail(SYSTEM, 10) }, tracker.ranks)).toMatchObject({
      rank: home,
      reason: 'cache-hit',
    });
    tracker.onDispatch(home, 40_000); // now far above (1.25 x mean + slack)
    const spill = d.dispatch({ inputIds: withTail(SYSTEM, 10) }, tracker.ranks);
    expect(spill.reason).toBe('cache-hit-overloaded');
    expect(spill.rank).not.toBe(home);
    // The spill rank learned the prefix: of the two holders the less loaded one now wins.
    tracker.onDispatch(spill.rank, 3000);
    const next = d.dispatch({ inputIds: withTail(SYSTEM, 10) }, tracker.ranks);
    expect(next).toMatchObject({ rank: spill.rank, reason: 'cache-hit' });
    expect(next.matchedTokens).toBe(2048);
  });

  it('off an overloaded holder, picks the least uncached prefill + queued work', () => {
    const turn = withTail(SYSTEM, 1024); // 3072 tokens: 12 windows
    const next = withTail(turn, 300); // w = 3372
    const dispatchWithRank1Load = (load1: number) => {
      const d = createDispatcher({ method: 'cache_aware', epsilon: 0.25, slackTokens: 0 });
      const tracker = createLoadTracker(4);
      d.dispatch({ inputIds: turn, routedRank: 0 }, tracker.ranks); // rank 0: the whole turn
      d.dispatch({ inputIds: withTail(SYSTEM, 5), routedRank: 1 }, tracker.ranks); // rank 1: SYSTEM
      tracker.onDispatch(0, 100_000); // the longest holder is far over the bound
      tracker.onDispatch(1, load1);
      return d.dispatch({ inputIds: next }, tracker.ranks);
    };
    // rank 1: 3372 - 2048 + 1000 = 2324 beats an idle rank's 3372.
    expect(dispatchWithRank1Load(1000)).toEqual({
      rank: 1,
      reason: 'cache-hit-overloaded',
      matchedTokens: 2048,
    });
    // With 2,500 queued on rank 1 (3824 > 3372), an idle rank without the prefix wins.
    const spill = dispatchWithRank1Load(2500);
    expect(spill).toMatchObject({ reason: 'cache-hit-overloaded', matchedTokens: 0 });
    expect([2, 3]).toContain(spill.rank);
  });

  it('balances a hot prefix: bounded load while hits stay high', () => {
    const d = createDispatcher({ method: 'cache_aware' });
    const tracker = createLoadTracker(16);
    const cold = Array.from({ length: 300 }, () => randomIds(rand, 3000));
    const hotRanks = new Set<number>();
    for (let i = 0; i < 3000; i++) {
      const hot = i % 3 === 0;
      const ids = hot ? withTail(SYSTEM, 200) : (cold[i % 300] as number[]);
      const decision = d.dispatch({ inputIds: ids }, tracker.ranks);
      if (hot) hotRanks.add(decision.rank);
      tracker.onDispatch(decision.rank, ids.length);
    }
    const loads = tracker.ranks.map((r) => r.inFlightTokens);
    const mean = loads.reduce((a, b) => a + b, 0) / 16;
    expect(Math.max(...loads)).toBeLessThanOrEqual(
      1.25 * mean + CACHE_AWARE_DEFAULTS.slackTokens + 3000,
    );
    expect(hotRanks.size).toBeGreaterThan(1);
    const reasons = d.stats().reasons;
    // Most decisions still hit something cached.
    expect((reasons['cache-hit'] ?? 0) + (reasons['cache-hit-overloaded'] ?? 0)).toBeGreaterThan(
      2500,
    );
  });

  it('learns from routed and affinity decisions through commit', () => {
    const d = createDispatcher({ method: 'cache_aware', affinity: { kind: 'routing_key' } });
    const ranks = makeRanks(8);
    const ids = withTail(SYSTEM, 300);
    d.dispatch({ inputIds: ids, routedRank: 6 }, ranks);
    expect(d.dispatch({ inputIds: withTail(SYSTEM, 5) }, ranks)).toMatchObject({
      rank: 6,
      reason: 'cache-hit',
    });
  });

  it('forgets a rank seen unhealthy (its cache is gone) and starts new ranks empty', () => {
    const d = createDispatcher({ method: 'cache_aware' });
    const ids = withTail(SYSTEM, 10);
    const home = d.dispatch({ inputIds: ids }, makeRanks(4)).rank;
    const moved = d.dispatch({ inputIds: ids }, makeRanks(4, [home]));
    expect(moved.reason).toBe('cache-miss-least-load');
    const back = makeRanks(4);
    // The rank came back: the prefix now lives on `moved.rank` only.
    expect(d.dispatch({ inputIds: ids }, back)).toMatchObject({
      rank: moved.rank,
      reason: 'cache-hit',
    });
    const grown = makeRanks(6);
    expect(d.dispatch({ inputIds: ids }, grown).rank).toBe(moved.rank);
    expect(d.stats().method?.indexEntries).toBe(8); // 2048 / 256 windows, on one rank
  });

  it('bounds the index per rank by the rank KV capacity', () => {
    const d = createDispatcher({ method: 'cache_aware', window: 64 });
    const ranks: RankState[] = makeRanks(2).map((r) => ({ ...r, kvCapacityTokens: 6400 }));
    for (let i = 0; i < 200; i++) d.dispatch({ inputIds: randomIds(rand, 640) }, ranks);
    const stats = d.stats().method ?? {};
    expect(stats.indexEntries).toBeLessThanOrEqual(2 * 100);
    expect(stats.indexEntries).toBeGreaterThan(150);
    expect(stats.indexEvictions).toBeGreaterThan(0);
    // Without kvCapacityTokens the capacityTokens option applies.
    const small = createDispatcher({ method: 'cache_aware', window: 64, capacityTokens: 640 });
    for (let i = 0; i < 50; i++) small.dispatch({ inputIds: randomIds(rand, 640) }, makeRanks(1));
    expect(small.stats().method?.indexEntries).toBe(10);
  });

  it('indexes at most maxPrefixTokens and handles short or empty input as cold', () => {
    const d = createDispatcher({ method: 'cache_aware', maxPrefixTokens: 512 });
    const ranks = makeRanks(4);
    const home = d.dispatch({ inputIds: withTail(SYSTEM, 0) }, ranks).rank;
    expect(d.dispatch({ inputIds: withTail(SYSTEM, 1) }, ranks)).toEqual({
      rank: home,
      reason: 'cache-hit',
      matchedTokens: 512,
    });
    expect(d.dispatch({ inputIds: [1, 2, 3] }, ranks).reason).toBe('cache-miss-least-load');
    expect(d.dispatch({}, ranks).reason).toBe('cache-miss-least-load');
  });

  it('breaks load ties toward the rank whose cache churns least', () => {
    const d = createDispatcher({ method: 'cache_aware' });
    const ranks = makeRanks(4);
    // Rank 2 (then 0, 1) took big new prompts; rank 3 took a small one.
    d.dispatch({ inputIds: randomIds(rand, 8192), routedRank: 2 }, ranks);
    d.dispatch({ inputIds: randomIds(rand, 4096), routedRank: 0 }, ranks);
    d.dispatch({ inputIds: randomIds(rand, 4096), routedRank: 1 }, ranks);
    d.dispatch({ inputIds: randomIds(rand, 512), routedRank: 3 }, ranks);
    // All idle: a cold prompt goes to the coolest cache, rank 3, not the rotation's next.
    expect(d.dispatch({ inputIds: randomIds(rand, 600) }, ranks)).toMatchObject({
      rank: 3,
      reason: 'cache-miss-least-load',
    });
    const ctx = { tieBreak: (c: readonly RankState[]) => c[0] as RankState } as never;
    const loaded = makeRanks(3).map((r) => ({ ...r, inFlightTokens: r.rank === 1 ? 0 : 5 }));
    expect(leastLoadedCool(ctx, loaded, [0, 100, 0]).rank).toBe(1); // load first
    expect(leastLoadedCool(ctx, makeRanks(3), [50, 100, 20]).rank).toBe(2); // then fill
  });

  it('does not reuse keys across dispatches of a reused request object and buffer', () => {
    const d = createDispatcher({ method: 'cache_aware' });
    const ranks = makeRanks(4);
    const buffer = Uint32Array.from(withTail(SYSTEM, 0));
    const request = { inputIds: buffer };
    const first = d.dispatch(request, ranks).rank;
    buffer.set(randomIds(rand, buffer.length)); // same object, same length, new prompt
    expect(d.dispatch(request, ranks)).toMatchObject({ reason: 'cache-miss-least-load' });
    expect(d.dispatch({ inputIds: withTail(SYSTEM, 3) }, ranks).rank).toBe(first);
  });

  it('rejects bad options and token ids', () => {
    expect(() => createDispatcher({ method: 'cache_aware', slackTokens: -5 })).toThrow(
      PolicyRangeError,
    );
    expect(() => createDispatcher({ method: 'cache_aware', maxPrefixTokens: 10 })).toThrow(
      /maxPrefixTokens/,
    );
    expect(() => createDispatcher({ method: 'cache_aware', options: { bogus: 1 } })).toThrow(
      /bogus/,
    );
    const d = createDispatcher({ method: 'cache_aware' });
    expect(() => d.dispatch({ inputIds: [1, 2 ** 32] }, makeRanks(2))).toThrow(TokenIdRangeError);
    expect(() => d.dispatch({ inputIds: [...SYSTEM, -3] }, makeRanks(2))).toThrow(
      TokenIdRangeError,
    );
  });
});
