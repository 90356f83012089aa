import { describe, expect, it } from 'vitest';
import { createDispatcher, createLoadTracker } from '../src/index.ts';

describe('createLoadTracker', () => {
  it('accounts dispatches and completions per rank', () => {
    const t = createLoadTracker(3, { kvCapacityTokens: 1000 });
    t.onDispatch(1, 100);
    t.onDispatch(1, 50);
    t.onDispatch(2, 7);
    t.onComplete(1, 100);
    expect(t.ranks).toEqual([
      { rank: 0, healthy: true, inFlightRequests: 0, inFlightTokens: 0, kvCapacityTokens: 1000 },
      { rank: 1, healthy: true, inFlightRequests: 1, inFlightTokens: 50, kvCapacityTokens: 1000 },
      { rank: 2, healthy: true, inFlightRequests: 1, inFlightTokens: 7, kvCapacityTokens: 1000 },
    ]);
  });

  it('never goes below zero and ignores completions for removed ranks', () => {
    const t = createLoadTracker(4);
    t.onDispatch(3, 10);
    t.onComplete(0, 10);
    expect(t.ranks[0]).toMatchObject({ inFlightRequests: 0, inFlightTokens: 0 });
    t.resize(2);
    expect(() => t.onComplete(3, 10)).not.toThrow();
    expect(t.ranks).toHaveLength(2);
  });

  it('resizes in place, so a dispatcher sees new ranks through the same array', () => {
    const t = createLoadTracker(2);
    const ranks = t.ranks;
    t.setHealthy(1, false);
    t.resize(4);
    expect(ranks).toHaveLength(4);
    expect(ranks.map((r) => [r.rank, r.healthy])).toEqual([
      [0, true],
      [1, false],
      [2, true],
      [3, true],
    ]);
    const d = createDispatcher({ method: 'round_robin' });
    expect([0, 1, 2].map(() => d.dispatch({}, ranks).rank)).toEqual([0, 2, 3]);
  });

  it('moves in-flight load with a renumbered rank, and releases open claims where it went', () => {
    const t = createLoadTracker(3, { kvCapacityTokens: 1000 });
    const ranks = t.ranks;
    const onOne = t.claim(1, 100);
    const onTwo = t.claim(2, 40);
    const onZero = t.claim(0, 7);
    t.setHealthy(0, false);
    // Rank 1 moves to 0, rank 2 to 3, rank 0 leaves; indexes 1 and 2 are new.
    t.remap([-1, 0, 3], 4);
    expect(ranks).toHaveLength(4);
    expect(ranks.map((r) => [r.rank, r.inFlightRequests, r.inFlightTokens])).toEqual([
      [0, 1, 100],
      [1, 0, 0],
      [2, 0, 0],
      [3, 1, 40],
    ]);
    // Health stays with the index (the host sets it for the new occupant); capacity too.
    expect(ranks.map((r) => r.healthy)).toEqual([false, true, true, true]);
    expect(ranks[2]?.kvCapacityTokens).toBe(1000);
    t.release(onOne);
    t.release(onTwo);
    // The rank that left took its load with it: its claim drains nothing that stayed.
    t.release(onZero);
    expect(ranks.map((r) => r.inFlightRequests)).toEqual([0, 0, 0, 0]);
    // The load index followed: its healthy totals are the moved load.
    const busy = t.claim(3, 500);
    expect(t.index?.healthyTokens).toBe(500);
    expect(t.index?.healthyRequests).toBe(1);
    t.release(busy);
    // A claim made after the remap, then a plain resize: released at its own index.
    const late = t.claim(3, 5);
    t.resize(5);
    t.release(late);
    expect(ranks[3]?.inFlightRequests).toBe(0);
  });

  it('a claim on a rank dropped by resize releases nothing, even when a rank of its number comes back', () => {
    const t = createLoadTracker(3);
    const old = t.claim(2, 10);
    t.resize(2);
    t.resize(3);
    const fresh = t.claim(2, 3);
    t.release(old);
    expect(t.ranks[2]).toMatchObject({ inFlightRequests: 1, inFlightTokens: 3 });
    t.release(fresh);
    expect(t.ranks[2]).toMatchObject({ inFlightRequests: 0, inFlightTokens: 0 });
  });

  it('refuses a remap that is not a renumbering', () => {
    const t = createLoadTracker(2);
    expect(() => t.remap([0, 0], 2)).toThrow('rank 1 moves to 0, not a free rank of 2 or -1');
    expect(() => t.remap([0, 2], 2)).toThrow('rank 1 moves to 2');
    expect(() => t.remap([0, 1], -1)).toThrow(/numRanks/);
  });

  it('rejects bad ranks, token counts and sizes with RangeErrors', () => {
    const t = createLoadTracker(2);
    expect(() => t.onDispatch(2, 1)).toThrow(/rank must be an integer in \[0, 2\)/);
    expect(() => t.onDispatch(-1, 1)).toThrow(RangeError);
    expect(() => t.onDispatch(0.5, 1)).toThrow(RangeError);
    expect(() => t.onDispatch(0, -1)).toThrow(/tokens/);
    expect(() => t.onDispatch(0, Number.NaN)).toThrow(/tokens/);
    expect(() => t.setHealthy(5, true)).toThrow(/setHealthy/);
    expect(() => createLoadTracker(-1)).toThrow(/numRanks/);
    expect(() => createLoadTracker(2, { kvCapacityTokens: 0 })).toThrow(/kvCapacityTokens/);
    expect(() => t.resize(1.5)).toThrow(/numRanks/);
  });
});
