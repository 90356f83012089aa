import { describe, expect, it } from 'vitest';
import { jumpRank, prefixKey } from '../src/hashing/chained.ts';
import { prefixKeyLength } from '../src/hashing/prefix-digest.ts';
import {
  createDispatcher,
  createLoadTracker,
  PolicyConfigError,
  PolicyRangeError,
  TokenIdRangeError,
} from '../src/index.ts';
import type { RankState } from '../src/types.ts';
import { makeRanks, prng, randomIds } from './helpers.ts';

/**
 * The algorithm as documented, written the slow way: list the key's first 64 draws, then take
 * the first healthy one within the bound (-1 when none is: the least-loaded fallback).
 */
function drawWalk(ids: number[], ranks: readonly RankState[], epsilon: number): number {
  const key = prefixKey(ids, prefixKeyLength(ids.length, 256, 4096));
  const healthy = ranks.filter((r) => r.healthy);
  let total = ids.length;
  for (const r of healthy) total += r.inFlightTokens;
  const bound = ((1 + epsilon) * total) / healthy.length;
  const order = Array.from({ length: 64 }, (_, k) => jumpRank(key, k, ranks.length));
  for (const rank of order) {
    const r = ranks[rank] as RankState;
    if (r.healthy && r.inFlightTokens <= bound) return rank;
  }
  return -1;
}

const prompts = (seed: number, count: number, length = 600): number[][] => {
  const rand = prng(seed);
  return Array.from({ length: count }, () => randomIds(rand, length));
};

/** Rank of every prompt on an idle cluster of `n` ranks (`down` unhealthy). */
function mapping(prompts: readonly number[][], n: number, down: number[] = []): number[] {
  const d = createDispatcher({ method: 'consistent_hash' });
  const ranks = makeRanks(n, down);
  return prompts.map((p) => d.dispatch({ inputIds: p }, ranks).rank);
}

const movedFraction = (a: readonly number[], b: readonly number[]): number =>
  a.filter((rank, i) => rank !== b[i]).length / a.length;

describe('consistent_hash', () => {
  it('keys on the prefix like prefix_match: same leading windows, same rank', () => {
    const d = createDispatcher({ method: 'consistent_hash', window: 256, prefixLength: 1024 });
    const ranks = makeRanks(16);
    const rand = prng(7);
    const prefix = randomIds(rand, 1024);
    const first = d.dispatch({ inputIds: [...prefix, ...randomIds(rand, 50)] }, ranks);
    expect(first.reason).toBe('consistent-hash');
    for (let i = 0; i < 20; i++) {
      const tail = randomIds(rand, 1 + Math.floor(rand() * 3000));
      expect(d.dispatch({ inputIds: [...prefix, ...tail] }, ranks).rank).toBe(first.rank);
    }
  });

  it('spreads keys evenly: 10,000 prefixes, no rank over 1.3x the mean, all 16 used', () => {
    const counts = new Array<number>(16).fill(0);
    for (const r of mapping(prompts(8, 10_000, 300), 16)) counts[r] = (counts[r] as number) + 1;
    expect(Math.max(...counts)).toBeLessThanOrEqual(1.3 * 625);
    expect(Math.min(...counts)).toBeGreaterThan(0);
  });

  it('moves about 1/N of keys when one rank is added, and only its own when one is lost', () => {
    const ps = prompts(9, 4000, 300);
    const at16 = mapping(ps, 16);
    const at17 = mapping(ps, 17);
    const added = movedFraction(at16, at17);
    expect(added).toBeGreaterThan(0.03);
    expect(added).toBeLessThan(0.09); // 1/17 = 0.059
    // Every moved key moved to the new rank.
    at17.forEach((r, i) => {
      if (r !== at16[i]) expect(r).toBe(16);
    });
    const lost = mapping(ps, 16, [5]);
    at16.forEach((r, i) => {
      if (r !== 5) expect(lost[i]).toBe(r);
      else expect(lost[i]).not.toBe(5);
    });
    // The dead rank's keys spread: no single survivor takes more than a fifth of them.
    const heirs = new Map<number, number>();
    lost.forEach((r, i) => {
      if (at16[i] === 5) heirs.set(r, (heirs.get(r) ?? 0) + 1);
    });
    const orphaned = at16.filter((r) => r === 5).length;
    expect(heirs.size).toBeGreaterThanOrEqual(10);
    expect(Math.max(...heirs.values())).toBeLessThan(orphaned / 5);
  });

  it('moves at most 1.5x the ideal share of keys from 8 to 12 ranks (modulo moves 2/3)', () => {
    const ps = prompts(10, 4000, 300);
    const moved = movedFraction(mapping(ps, 8), mapping(ps, 12));
    expect(moved).toBeLessThanOrEqual(1.5 * (4 / 12));
    expect(moved).toBeGreaterThan(0.25);
  });

  it('walks a key to its next rank while the first is over (1 + epsilon) x mean', () => {
    const d = createDispatcher({ method: 'consistent_hash', epsilon: 0.25 });
    const tracker = createLoadTracker(8);
    const prompt = randomIds(prng(11), 512);
    const home = d.dispatch({ inputIds: prompt }, tracker.ranks).rank;
    // Load the home rank far above the mean: the key overflows, always to the same next rank.
    tracker.onDispatch(home, 100_000);
    const next = d.dispatch({ inputIds: prompt }, tracker.ranks);
    expect(next.reason).toBe('consistent-hash-overflow');
    expect(next.rank).not.toBe(home);
    expect(d.dispatch({ inputIds: prompt }, tracker.ranks).rank).toBe(next.rank);
    // Back under the bound, the key returns home.
    tracker.onComplete(home, 100_000);
    expect(d.dispatch({ inputIds: prompt }, tracker.ranks)).toEqual({
      rank: home,
      reason: 'consistent-hash',
    });
  });

  it('keeps a hot key within the bound: no rank above (1 + epsilon) x mean + one request', () => {
    const d = createDispatcher({ method: 'consistent_hash', epsilon: 0.25 });
    const tracker = createLoadTracker(16);
    const hot = randomIds(prng(12), 2000);
    const rand = prng(13);
    const cold = prompts(14, 200, 2000);
    for (let i = 0; i < 2000; i++) {
      const ids = rand() < 0.4 ? hot : (cold[i % 200] as number[]);
      const rank = d.dispatch({ inputIds: ids }, tracker.ranks).rank;
      tracker.onDispatch(rank, ids.length);
    }
    const loads = tracker.ranks.map((r) => r.inFlightTokens);
    const mean = loads.reduce((a, b) => a + b, 0) / loads.length;
    expect(Math.max(...loads)).toBeLessThanOrEqual(1.25 * mean + 2000);
    // The hot key walked over several ranks, but not all of them.
    const stats = d.stats();
    expect(stats.reasons['consistent-hash-overflow']).toBeGreaterThan(0);
  });

  it('keeps the key home within an absolute slack when asked', () => {
    const d = createDispatcher({ method: 'consistent_hash', options: { slack: 50_000 } });
    const tracker = createLoadTracker(8);
    const prompt = randomIds(prng(16), 512);
    const home = d.dispatch({ inputIds: prompt }, tracker.ranks).rank;
    tracker.onDispatch(home, 40_000); // far over 1.25 x mean, but within the slack
    expect(d.dispatch({ inputIds: prompt }, tracker.ranks).rank).toBe(home);
    tracker.onDispatch(home, 40_000);
    expect(d.dispatch({ inputIds: prompt }, tracker.ranks).reason).toBe('consistent-hash-overflow');
    expect(() => createDispatcher({ method: 'consistent_hash', slack: -1 })).toThrow(/slack/);
  });

  it('counts load in requests when asked', () => {
    const d = createDispatcher({ method: 'consistent_hash', options: { load: 'requests' } });
    const tracker = createLoadTracker(4);
    const prompt = randomIds(prng(15), 300);
    const home = d.dispatch({ inputIds: prompt }, tracker.ranks).rank;
    // One huge request on home: tokens would overflow, requests see 1 <= 1.25 * (4 + 1) / 4.
    for (const r of tracker.ranks) tracker.onDispatch(r.rank, r.rank === home ? 1_000_000 : 1);
    expect(d.dispatch({ inputIds: prompt }, tracker.ranks)).toEqual({
      rank: home,
      reason: 'consistent-hash',
    });
    tracker.onDispatch(home, 1); // 2 > 1.25 * 6 / 4
    expect(d.dispatch({ inputIds: prompt }, tracker.ranks).reason).toBe('consistent-hash-overflow');
  });

  it('falls back to the least-loaded rank without a key, and hashes routing keys', () => {
    const d = createDispatcher({ method: 'consistent_hash' });
    const tracker = createLoadTracker(4);
    tracker.onDispatch(0, 10);
    tracker.onDispatch(1, 5);
    tracker.onDispatch(3, 7);
    expect(d.dispatch({}, tracker.ranks)).toEqual({ rank: 2, reason: 'least-tokens' });
    const a = d.dispatch({ routingKey: 'agent-1' }, makeRanks(8));
    expect(a.reason).toBe('consistent-hash');
    expect(d.dispatch({ routingKey: 'agent-1' }, makeRanks(8)).rank).toBe(a.rank);
  });

  it('rejects bad options and token ids with errors naming them', () => {
    expect(() => createDispatcher({ method: 'consistent_hash', epsilon: -1 })).toThrow(
      PolicyRangeError,
    );
    expect(() => createDispatcher({ method: 'consistent_hash', epsilon: -1 })).toThrow(/epsilon/);
    expect(() => createDispatcher({ method: 'consistent_hash', window: 0 })).toThrow(/window/);
    expect(() =>
      createDispatcher({ method: 'consistent_hash', options: { load: 'watts' } }),
    ).toThrow(PolicyConfigError);
    const d = createDispatcher({ method: 'consistent_hash' });
    expect(() => d.dispatch({ inputIds: [1, 2.5, 3] }, makeRanks(2))).toThrow(TokenIdRangeError);
    expect(() => d.dispatch({ inputIds: [1, -1] }, makeRanks(2))).toThrow(/inputIds\[1\]/);
  });

  it('picks exactly what the walk down each key draw order picks, under any load', () => {
    const rand = prng(31);
    let walked = 0;
    for (let trial = 0; trial < 300; trial++) {
      const n = 1 + Math.floor(rand() * 64);
      const down = Array.from({ length: n }, (_, i) => i).filter(() => rand() < 0.2);
      const ranks = makeRanks(n, down.length === n ? [] : down);
      for (const r of ranks) r.inFlightTokens = Math.floor(rand() * 4) * 500;
      const ids = randomIds(rand, 300 + Math.floor(rand() * 600));
      const d = createDispatcher({ method: 'consistent_hash', epsilon: 0.1 });
      const expected = drawWalk(ids, ranks, 0.1);
      const got = d.dispatch({ inputIds: ids }, ranks);
      expect(expected).toBeGreaterThanOrEqual(0);
      expect(got.rank).toBe(expected);
      if (got.reason === 'consistent-hash-overflow') walked++;
    }
    expect(walked).toBeGreaterThan(30);
  });

  it("decides the same from the tracker's running totals as from a scan of the ranks", () => {
    const rand = prng(41);
    const viaIndex = createDispatcher({ method: 'consistent_hash', epsilon: 0.1 });
    const viaScan = createDispatcher({ method: 'consistent_hash', epsilon: 0.1 });
    const tracker = createLoadTracker(48);
    const open: { done(): boolean }[] = [];
    let overflow = 0;
    for (let i = 0; i < 3000; i++) {
      if (rand() < 0.02) tracker.setHealthy(Math.floor(rand() * 48), rand() < 0.7);
      if (!tracker.ranks.some((r) => r.healthy)) tracker.setHealthy(0, true);
      const request = { inputIds: randomIds(rand, 256 * (1 + Math.floor(rand() * 4))) };
      // A copy of the states: the dispatcher cannot use the tracker's index for it.
      const copy = tracker.ranks.map((r) => ({ ...r }));
      const expected = viaScan.dispatch(request, copy);
      const ticket = viaIndex.begin(request, tracker);
      expect(ticket.rank).toBe(expected.rank);
      expect(ticket.reason).toBe(expected.reason);
      if (ticket.reason === 'consistent-hash-overflow') overflow++;
      open.push(ticket);
      while (open.length > 0 && rand() < 0.5)
        open.splice(Math.floor(rand() * open.length), 1)[0]?.done();
    }
    expect(overflow).toBeGreaterThan(100);
  });

  it('takes the least-loaded rank when 64 draws find none within the bound', () => {
    const d = createDispatcher({ method: 'consistent_hash', epsilon: 0 });
    const tracker = createLoadTracker(200);
    // Every rank but 137 holds 1,000 tokens: the bound (the mean) passes only rank 137.
    for (const r of tracker.ranks) if (r.rank !== 137) tracker.onDispatch(r.rank, 1000);
    const rand = prng(43);
    let fallbacks = 0;
    for (let i = 0; i < 50; i++) {
      const ids = randomIds(rand, 512);
      const decision = d.dispatch({ inputIds: ids }, tracker.ranks);
      expect(decision.rank).toBe(137);
      if (drawWalk(ids, tracker.ranks, 0) < 0) fallbacks++;
    }
    expect(fallbacks).toBeGreaterThan(30); // 64 draws over 200 ranks usually miss the one
  });
});
