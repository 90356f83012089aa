// Dispatcher: config handling, precedence, errors and counters (methods have their own tests).
import { describe, expect, it } from 'vitest';
import {
  createDispatcher,
  createLoadTracker,
  methodNames,
  methodRegistry,
  PolicyConfigError,
  RoutedRankError,
} from '../src/index.ts';
import { makeRanks } from './helpers.ts';

describe('createDispatcher config', () => {
  it('registers the SGLang method names', () => {
    expect(methodNames()).toEqual(
      expect.arrayContaining([
        'round_robin',
        'total_requests',
        'total_tokens',
        'follow_bootstrap_room',
        'prefix_match',
      ]),
    );
    expect(methodNames()).toEqual(Object.keys(methodRegistry));
  });

  it('rejects an unknown or missing method, listing the valid names', () => {
    for (const method of ['prefix-match', 'random', undefined, 'toString', '__proto__']) {
      try {
        createDispatcher({ method } as never);
        expect.unreachable();
      } catch (error) {
        expect(error).toBeInstanceOf(PolicyConfigError);
        expect((error as PolicyConfigError).code).toBe('POLICY_CONFIG');
        for (const name of methodNames()) expect((error as Error).message).toContain(name);
      }
    }
    expect(() => createDispatcher(null as never)).toThrow(PolicyConfigError);
    expect(() => createDispatcher('prefix_match' as never)).toThrow(/valid methods/);
  });

  it('says a missing method is required instead of calling it unknown', () => {
    for (const config of [{}, { method: undefined }, { method: null }, { window: 256 }]) {
      try {
        createDispatcher(config as never);
        expect.unreachable();
      } catch (error) {
        expect(error).toBeInstanceOf(PolicyConfigError);
        expect((error as PolicyConfigError).code).toBe('POLICY_CONFIG');
        const message = (error as Error).message;
        expect(message).toMatch(/has no method: it is required/);
        expect(message).not.toMatch(/unknown method/);
        expect(message).toContain(`valid methods: ${methodNames().join(', ')}`);
      }
    }
  });

  it('rejects unknown options with the valid ones, but tolerates other methods options on top', () => {
    expect(() => createDispatcher({ method: 'prefix_match', windw: 3 })).toThrow(
      /prefix_match: unknown option 'windw'; valid options: window, prefixLength/,
    );
    expect(() => createDispatcher({ method: 'round_robin', options: { window: 256 } })).toThrow(
      /round_robin: unknown option 'window'/,
    );
    expect(createDispatcher({ method: 'round_robin', window: 256 }).method).toBe('round_robin');
    expect(() => createDispatcher({ method: 'round_robin', options: [] as never })).toThrow(
      /options must be an object/,
    );
  });

  it('merges options: `options` wins over the top level', () => {
    const d = createDispatcher({ method: 'prefix_match', window: 8, options: { window: 16 } });
    expect(d.options).toEqual({ window: 16 });
  });
});

describe('dispatch', () => {
  it('checks that ranks are indexed by rank', () => {
    const d = createDispatcher({ method: 'round_robin' });
    const ranks = makeRanks(3);
    const swapped = [ranks[1], ranks[0], ranks[2]] as typeof ranks;
    expect(() => d.dispatch({}, swapped)).toThrow(/ranks\[0\]\.rank must be 0/);
  });

  it('gives routed-rank errors a code and a message naming the range', () => {
    const d = createDispatcher({ method: 'total_tokens' });
    try {
      d.dispatch({ routedRank: 9 }, makeRanks(4));
      expect.unreachable();
    } catch (error) {
      expect(error).toBeInstanceOf(RoutedRankError);
      expect((error as RoutedRankError).code).toBe('ROUTED_RANK_INVALID');
      expect((error as Error).message).toMatch(/routed rank 9 is out of range: there are 4 ranks/);
    }
  });

  it('names the problem with a non-integer routed rank and a bad clock', () => {
    const d = createDispatcher({ method: 'round_robin' });
    expect(() => d.dispatch({ routedRank: '2' as never }, makeRanks(4))).toThrow(
      /routed rank "2" is not an integer \(valid 0..3\)/,
    );
    expect(() => d.dispatch({ routedRank: 1.5 }, makeRanks(4))).toThrow(/1.5 is not an integer/);
    expect(() => d.dispatch({}, makeRanks(4), { nowMs: Number.NaN })).toThrow(/nowMs/);
  });

  it('rejects a non-string routing key for every method, with or without affinity', () => {
    const bad: [unknown, RegExp][] = [
      [5, /routingKey must be a string, got number 5/],
      [{}, /routingKey must be a string, got an object/],
      [null, /routingKey must be a string, got null/],
      [['a'], /routingKey must be a string, got an array/],
    ];
    for (const method of methodNames()) {
      for (const affinity of ['none', 'routing_key'] as const) {
        const d = createDispatcher({ method, affinity });
        for (const [routingKey, message] of bad) {
          const request = { routingKey, inputIds: [1, 2, 3] } as never;
          expect(() => d.dispatch(request, makeRanks(4))).toThrow(TypeError);
          expect(() => d.dispatch(request, makeRanks(4))).toThrow(message);
          // consistent_hash falls back to the key only without inputIds.
          expect(() => d.dispatch({ routingKey } as never, makeRanks(4))).toThrow(message);
        }
        // A rejected request is not a decision.
        expect(d.stats().decisions).toBe(0);
      }
    }
  });

  it('rejects a non-string routing key in begin before claiming load', () => {
    const d = createDispatcher({ method: 'consistent_hash' });
    const tracker = createLoadTracker(4);
    expect(() => d.begin({ routingKey: 7 } as never, tracker)).toThrow(TypeError);
    expect(tracker.ranks.every((r) => r.inFlightRequests === 0)).toBe(true);
    expect(d.begin({ routingKey: 'agent-7' }, tracker).open).toBe(true);
  });

  it('refuses a faulty method decision instead of passing it to the host', () => {
    const d = createDispatcher({ method: 'round_robin' });
    const ranks = makeRanks(3);
    // Rank 0 reads healthy to the dispatcher and the method, then unhealthy to the guard:
    // from the guard's view the method picked an unhealthy rank.
    let reads = 0;
    const flaky = {
      rank: 0,
      inFlightRequests: 0,
      inFlightTokens: 0,
      get healthy() {
        return reads++ < 2;
      },
    };
    ranks[0] = flaky;
    expect(() => d.dispatch({}, ranks)).toThrow(/round_robin chose rank .*not a healthy rank/);
  });

  it('counts decisions per reason', () => {
    const d = createDispatcher({ method: 'prefix_match', affinity: 'routing_key' });
    const ranks = makeRanks(4);
    d.dispatch({ inputIds: [1, 2] }, ranks);
    d.dispatch({}, ranks);
    d.dispatch({ routedRank: 1 }, ranks);
    d.dispatch({ routingKey: 'a', inputIds: [3] }, ranks);
    d.dispatch({ routingKey: 'a', inputIds: [3] }, ranks);
    expect(d.stats()).toMatchObject({
      decisions: 5,
      reasons: { 'prefix-hash': 2, 'fallback-round-robin': 1, routed: 1, affinity: 1 },
      affinity: { size: 1, hits: 1, misses: 1 },
    });
  });

  it('rotates ties across methods with one cursor per dispatcher', () => {
    const a = createDispatcher({ method: 'total_tokens' });
    const b = createDispatcher({ method: 'total_tokens' });
    const ranks = makeRanks(3);
    expect([1, 2, 3, 4].map(() => a.dispatch({}, ranks).rank)).toEqual([0, 1, 2, 0]);
    // A fresh dispatcher starts its own rotation: state, not globals, decides.
    expect(b.dispatch({}, ranks).rank).toBe(0);
  });
});
