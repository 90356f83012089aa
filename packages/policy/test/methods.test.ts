// The load-only methods and follow_bootstrap_room, including the SGLang flaws they fix.
import { describe, expect, it } from 'vitest';
import { createDispatcher, createLoadTracker, type RankState } from '../src/index.ts';
import { makeRanks } from './helpers.ts';

function loaded(loads: [requests: number, tokens: number][], down: number[] = []): RankState[] {
  return loads.map(([inFlightRequests, inFlightTokens], rank) => ({
    rank,
    healthy: !down.includes(rank),
    inFlightRequests,
    inFlightTokens,
  }));
}

describe('round_robin', () => {
  it('cycles over the ranks and skips unhealthy ones', () => {
    const d = createDispatcher({ method: 'round_robin' });
    const ranks = makeRanks(5, [2]);
    const seq = Array.from({ length: 8 }, () => d.dispatch({}, ranks));
    expect(seq.map((s) => s.rank)).toEqual([0, 1, 3, 4, 0, 1, 3, 4]);
    expect(seq.every((s) => s.reason === 'round-robin')).toBe(true);
  });

  it('does not advance on routed requests or affinity hits', () => {
    const d = createDispatcher({ method: 'round_robin', affinity: 'routing_key' });
    const ranks = makeRanks(4);
    expect(d.dispatch({ routingKey: 'a' }, ranks).rank).toBe(0);
    expect(d.dispatch({ routedRank: 3 }, ranks).rank).toBe(3);
    expect(d.dispatch({ routingKey: 'a' }, ranks)).toEqual({ rank: 0, reason: 'affinity' });
    expect(d.dispatch({}, ranks).rank).toBe(1);
    expect(d.dispatch({ routingKey: 'b' }, ranks).rank).toBe(2);
    expect(d.dispatch({}, ranks).rank).toBe(3);
  });

  it('wraps when the rank count shrinks', () => {
    const d = createDispatcher({ method: 'round_robin' });
    for (let i = 0; i < 7; i++) d.dispatch({}, makeRanks(8));
    expect(d.dispatch({}, makeRanks(3)).rank).toBe(0);
  });
});

describe('total_requests', () => {
  it('picks the fewest in-flight requests', () => {
    const d = createDispatcher({ method: 'total_requests' });
    const r = d.dispatch(
      {},
      loaded([
        [3, 0],
        [1, 999],
        [2, 0],
      ]),
    );
    expect(r).toEqual({ rank: 1, reason: 'least-requests' });
  });

  it('skips an unhealthy rank even when it is the least loaded (SGLang did not)', () => {
    const d = createDispatcher({ method: 'total_requests' });
    expect(
      d.dispatch(
        {},
        loaded(
          [
            [0, 0],
            [2, 0],
            [1, 0],
          ],
          [0],
        ),
      ).rank,
    ).toBe(2);
  });

  it('rotates ties instead of sending a burst to rank 0 (SGLang list.index(min))', () => {
    const d = createDispatcher({ method: 'total_requests' });
    const ranks = loaded([
      [1, 0],
      [5, 0],
      [1, 0],
      [1, 0],
    ]);
    const picks = Array.from({ length: 6 }, () => d.dispatch({}, ranks).rank);
    expect(picks).toEqual([0, 2, 3, 0, 2, 3]);
  });

  it('balances a burst exactly when the host accounts each dispatch', () => {
    const d = createDispatcher({ method: 'total_requests' });
    const tracker = createLoadTracker(4);
    for (let i = 0; i < 40; i++) tracker.onDispatch(d.dispatch({}, tracker.ranks).rank, 10);
    expect(tracker.ranks.map((r) => r.inFlightRequests)).toEqual([10, 10, 10, 10]);
  });
});

describe('total_tokens', () => {
  it('picks the fewest in-flight tokens, then the fewest requests', () => {
    const d = createDispatcher({ method: 'total_tokens' });
    expect(
      d.dispatch(
        {},
        loaded([
          [1, 500],
          [9, 100],
          [0, 300],
        ]),
      ).rank,
    ).toBe(1);
    expect(
      d.dispatch(
        {},
        loaded([
          [4, 100],
          [2, 100],
          [3, 100],
        ]),
      ),
    ).toEqual({
      rank: 1,
      reason: 'least-tokens',
    });
  });

  it('skips unhealthy ranks and rotates exact ties', () => {
    const d = createDispatcher({ method: 'total_tokens' });
    const ranks = loaded(
      [
        [0, 0],
        [1, 50],
        [1, 50],
        [1, 50],
      ],
      [0],
    );
    expect(Array.from({ length: 4 }, () => d.dispatch({}, ranks).rank)).toEqual([1, 2, 3, 1]);
  });
});

describe('follow_bootstrap_room', () => {
  it('routes bootstrap_room % dp_size, numbers and bigints alike', () => {
    const d = createDispatcher({ method: 'follow_bootstrap_room' });
    const ranks = makeRanks(8);
    expect(d.dispatch({ bootstrapRoom: 13 }, ranks)).toEqual({ rank: 5, reason: 'bootstrap-room' });
    expect(d.dispatch({ bootstrapRoom: 13n }, ranks).rank).toBe(5);
    const huge = 2n ** 70n + 3n;
    expect(d.dispatch({ bootstrapRoom: huge }, ranks).rank).toBe(Number(huge % 8n));
    expect(d.dispatch({ bootstrapRoom: 2 ** 53 - 1 }, ranks).rank).toBe(
      Number((2n ** 53n - 1n) % 8n),
    );
  });

  it('fails over deterministically, moving only the dead rank rooms, spread out', () => {
    const a = createDispatcher({ method: 'follow_bootstrap_room' });
    const b = createDispatcher({ method: 'follow_bootstrap_room' });
    const down = makeRanks(8, [3]);
    const targets = new Set<number>();
    for (let room = 0; room < 800; room++) {
      const d = a.dispatch({ bootstrapRoom: room }, down);
      expect(b.dispatch({ bootstrapRoom: room }, down)).toEqual(d);
      if (room % 8 === 3) {
        expect(d.reason).toBe('bootstrap-room-failover');
        targets.add(d.rank);
      } else {
        expect(d).toEqual({ rank: room % 8, reason: 'bootstrap-room' });
      }
    }
    expect(targets.has(3)).toBe(false);
    expect(targets.size).toBe(7);
  });

  it('falls back to rotation without a room, and rejects invalid rooms', () => {
    const d = createDispatcher({ method: 'follow_bootstrap_room' });
    const ranks = makeRanks(3);
    expect([0, 1, 2].map(() => d.dispatch({}, ranks).rank)).toEqual([0, 1, 2]);
    expect(d.dispatch({}, ranks).reason).toBe('fallback-round-robin');
    expect(() => d.dispatch({ bootstrapRoom: -1 }, ranks)).toThrow(/bootstrapRoom/);
    expect(() => d.dispatch({ bootstrapRoom: 1.5 }, ranks)).toThrow(RangeError);
    expect(() => d.dispatch({ bootstrapRoom: -2n }, ranks)).toThrow(/bootstrapRoom/);
  });
});
