// One suite, run against every registered method (including ones added to the registry
// later): the guarantees every host relies on, whatever the method.
import { describe, expect, it } from 'vitest';
import {
  createDispatcher,
  createLoadTracker,
  type Decision,
  type MethodContext,
  methodNames,
  methodRegistry,
  NoHealthyRankError,
  promptLength,
  type RankState,
  RoutedRankError,
  type RouteRequest,
  readOption,
} from '../src/index.ts';
import { makeRanks, prng, randomIds } from './helpers.ts';

/** A mixed, deterministic request stream: shared prefixes, keys, rooms, empty inputs. */
function requestStream(seed: number, count: number): RouteRequest[] {
  const rand = prng(seed);
  const prefixes = Array.from({ length: 6 }, () => randomIds(rand, 300 + Math.floor(rand() * 900)));
  const out: RouteRequest[] = [];
  for (let i = 0; i < count; i++) {
    const kind = Math.floor(rand() * 4);
    const prefix = prefixes[Math.floor(rand() * prefixes.length)] ?? [];
    const request: RouteRequest = {};
    if (kind > 0) request.inputIds = [...prefix, ...randomIds(rand, Math.floor(rand() * 400))];
    if (kind === 2) request.routingKey = `session-${Math.floor(rand() * 20)}`;
    if (rand() < 0.3) request.bootstrapRoom = Math.floor(rand() * 1_000_000);
    out.push(request);
  }
  return out;
}

/** Dispatches a stream with host-style accounting (complete each request 3 dispatches later). */
function run(
  method: string,
  requests: readonly RouteRequest[],
  numRanks: number,
  down: readonly number[] = [],
  affinity = false,
): Decision[] {
  const dispatcher = createDispatcher(
    affinity ? { method, affinity: { kind: 'routing_key', maxEntries: 8 } } : { method },
  );
  const tracker = createLoadTracker(numRanks);
  for (const r of down) tracker.setHealthy(r, false);
  const decisions: Decision[] = [];
  requests.forEach((request, i) => {
    const d = dispatcher.dispatch(request, tracker.ranks, { nowMs: i * 10 });
    decisions.push(d);
    tracker.onDispatch(d.rank, (request.inputIds?.length ?? 0) + 16);
    const old = decisions[i - 3];
    const oldRequest = requests[i - 3];
    if (old && oldRequest) tracker.onComplete(old.rank, (oldRequest.inputIds?.length ?? 0) + 16);
  });
  return decisions;
}

describe.each(methodNames())('conformance: %s', (method) => {
  it('declares default sweep values its own schema accepts, each setting of them buildable', () => {
    const schema = methodRegistry[method]!.options;
    for (const [name, spec] of Object.entries(schema)) {
      for (const v of spec.sweep ?? []) {
        expect(readOption(method, name, spec, v), `${method}.${name}=${v}`).toBe(v);
      }
      const values: readonly unknown[] = spec.sweep ?? [];
      expect(new Set(values).size).toBe(values.length);
    }
    // Every value alone (the others at their defaults) builds the method.
    for (const [name, spec] of Object.entries(schema)) {
      for (const v of spec.sweep ?? []) {
        expect(() => methodRegistry[method]!({ [name]: v })).not.toThrow();
      }
    }
  });

  it('decides the same when the host passes only the prompt tokens it declares using', () => {
    // Small windows and caps, so prompts of the stream run past them.
    const known = new Set(methodRegistry[method]?.optionNames ?? []);
    const small: Record<string, number> = { window: 32, prefixLength: 256, maxPrefixTokens: 256 };
    const options = Object.fromEntries(Object.entries(small).filter(([k]) => known.has(k)));
    const decide = (capped: boolean): Decision[] => {
      const dispatcher = createDispatcher({ method, options });
      const cap = dispatcher.maxPromptTokens;
      expect(cap).toBeGreaterThanOrEqual(0);
      const tracker = createLoadTracker(6);
      const requests = requestStream(3, 300).map((r) => {
        const ids = r.inputIds;
        if (!capped || !ids || ids.length <= cap) return r;
        return { ...r, inputIds: Array.from(ids).slice(0, cap), promptTokens: ids.length };
      });
      return requests.map((request, i) => {
        const d = dispatcher.dispatch(request, tracker.ranks, { nowMs: i * 10 });
        tracker.onDispatch(d.rank, promptLength(request) + 16);
        return d;
      });
    };
    expect(decide(true)).toEqual(decide(false));
  });

  it('is deterministic: the same inputs give the same decisions', () => {
    const requests = requestStream(1, 300);
    for (const affinity of [false, true]) {
      const a = run(method, requests, 8, [], affinity);
      const b = run(method, requests, 8, [], affinity);
      expect(a).toEqual(b);
    }
  });

  it('returns a rank in range with a non-empty reason', () => {
    for (const d of run(method, requestStream(2, 200), 5, [], true)) {
      expect(Number.isInteger(d.rank)).toBe(true);
      expect(d.rank).toBeGreaterThanOrEqual(0);
      expect(d.rank).toBeLessThan(5);
      expect(typeof d.reason).toBe('string');
      expect(d.reason.length).toBeGreaterThan(0);
    }
  });

  it('never chooses an unhealthy rank', () => {
    const requests = requestStream(3, 300);
    for (const down of [[0], [3], [0, 1, 2], [1, 3, 5, 7], [0, 1, 2, 3, 4, 5, 6]]) {
      for (const affinity of [false, true]) {
        for (const d of run(method, requests, 8, down, affinity)) {
          expect(down).not.toContain(d.rank);
        }
      }
    }
  });

  it('re-places affinity keys pinned to a rank that went down', () => {
    const dispatcher = createDispatcher({ method, affinity: { kind: 'routing_key' } });
    const ranks = makeRanks(4);
    const first = dispatcher.dispatch({ routingKey: 'k', inputIds: [1, 2, 3] }, ranks);
    const down = makeRanks(4, [first.rank]);
    const again = dispatcher.dispatch({ routingKey: 'k', inputIds: [1, 2, 3] }, down);
    expect(again.rank).not.toBe(first.rank);
    expect(again.reason).toBe('affinity-repick');
  });

  it('lets an explicit routed rank win over the method and affinity', () => {
    const dispatcher = createDispatcher({ method, affinity: { kind: 'routing_key' } });
    const ranks = makeRanks(6);
    const pinned = dispatcher.dispatch({ routingKey: 'k', inputIds: [5, 6, 7] }, ranks).rank;
    for (let target = 0; target < 6; target++) {
      const d = dispatcher.dispatch(
        { routedRank: target, routingKey: 'k', inputIds: [5, 6, 7], bootstrapRoom: 3 },
        ranks,
      );
      expect(d).toEqual({ rank: target, reason: 'routed' });
    }
    // Routed requests do not re-pin the key.
    expect(dispatcher.dispatch({ routingKey: 'k', inputIds: [5, 6, 7] }, ranks).rank).toBe(pinned);
  });

  it('rejects a routed rank that is out of range or unhealthy', () => {
    const dispatcher = createDispatcher({ method });
    const ranks = makeRanks(4, [2]);
    for (const bad of [4, -1, 1.5, Number.NaN]) {
      expect(() => dispatcher.dispatch({ routedRank: bad }, ranks)).toThrow(RoutedRankError);
    }
    expect(() => dispatcher.dispatch({ routedRank: 2 }, ranks)).toThrow(/unhealthy/);
  });

  it('rotates ties: equal idle ranks take turns instead of rank 0 taking the burst', () => {
    for (const down of [[], [0], [1, 4]]) {
      const dispatcher = createDispatcher({ method });
      const ranks = makeRanks(6, down);
      const healthy = 6 - down.length;
      const picked = new Set<number>();
      for (let i = 0; i < healthy; i++) picked.add(dispatcher.dispatch({}, ranks).rank);
      expect(picked.size).toBe(healthy);
    }
  });

  it('throws the typed error when no rank is healthy', () => {
    const dispatcher = createDispatcher({ method });
    for (const ranks of [makeRanks(3, [0, 1, 2]), []]) {
      try {
        dispatcher.dispatch({ inputIds: [1, 2, 3] }, ranks);
        expect.unreachable();
      } catch (error) {
        expect(error).toBeInstanceOf(NoHealthyRankError);
        expect((error as NoHealthyRankError).code).toBe('NO_HEALTHY_RANK');
      }
    }
  });

  it('follows the rank count when it changes between calls (scale out and in)', () => {
    const dispatcher = createDispatcher({ method, affinity: { kind: 'routing_key' } });
    const requests = requestStream(4, 120);
    requests.forEach((request, i) => {
      const n = i < 40 ? 4 : i < 80 ? 9 : 3;
      const d = dispatcher.dispatch(request, makeRanks(n));
      expect(d.rank).toBeLessThan(n);
    });
  });

  it('accepts Uint32Array and plain-array token ids alike', () => {
    const rand = prng(5);
    const a = createDispatcher({ method });
    const b = createDispatcher({ method });
    const ranks = makeRanks(7);
    for (let i = 0; i < 50; i++) {
      const ids = randomIds(rand, Math.floor(rand() * 2000));
      expect(a.dispatch({ inputIds: ids }, ranks)).toEqual(
        b.dispatch({ inputIds: Uint32Array.from(ids) }, ranks),
      );
    }
  });

  it('selects without side effects: state changes only in commit', () => {
    const method_ = methodRegistry[method]?.({});
    if (!method_) throw new Error(`no factory for ${method}`);
    const makeCtx = (request: RouteRequest, ranks: readonly RankState[]): MethodContext => ({
      request,
      ranks,
      healthy: ranks.filter((r) => r.healthy),
      nowMs: 0,
      tieBreak: (c) => c[0] as RankState,
    });
    const ranks = makeRanks(6);
    ranks.forEach((r, i) => {
      r.inFlightTokens = (i * 37) % 5;
      r.inFlightRequests = i % 2;
    });
    // Learn from a stream first, so stateful methods have something to (not) change.
    for (const request of requestStream(7, 80)) {
      const ctx = makeCtx(request, ranks);
      method_.commit?.(ctx, method_.select(ctx));
    }
    const probes = requestStream(8, 40);
    const before = probes.map((p) => method_.select(makeCtx(p, ranks)));
    const stats = JSON.stringify(method_.stats?.() ?? {});
    // Selecting with ranks down or added must not forget or learn anything either.
    for (const p of probes) {
      method_.select(makeCtx(p, makeRanks(6, [0, 2, 4])));
      method_.select(makeCtx(p, makeRanks(9)));
    }
    expect(JSON.stringify(method_.stats?.() ?? {})).toBe(stats);
    expect(probes.map((p) => method_.select(makeCtx(p, ranks)))).toEqual(before);
  });
});
