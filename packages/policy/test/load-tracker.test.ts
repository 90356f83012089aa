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
