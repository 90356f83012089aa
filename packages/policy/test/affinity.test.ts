// routing_key affinity: pinning, re-picking, bounds (max entries, idle TTL) and counters.
import { describe, expect, it } from 'vitest';
import { createDispatcher, PolicyConfigError, PolicyRangeError } from '../src/index.ts';
import { makeRanks } from './helpers.ts';

const withAffinity = (affinity: Record<string, unknown>, method = 'round_robin') =>
  createDispatcher({ method, affinity: { kind: 'routing_key', ...affinity } });

describe('routing_key affinity', () => {
  it('places the first request by the method and pins later ones to it', () => {
    const d = withAffinity({});
    const ranks = makeRanks(4);
    expect(d.dispatch({ routingKey: 'agent-1' }, ranks)).toEqual({
      rank: 0,
      reason: 'round-robin',
    });
    expect(d.dispatch({ routingKey: 'agent-2' }, ranks)).toEqual({
      rank: 1,
      reason: 'round-robin',
    });
    for (let i = 0; i < 5; i++) {
      expect(d.dispatch({ routingKey: 'agent-1' }, ranks)).toEqual({ rank: 0, reason: 'affinity' });
    }
    expect(d.stats().affinity).toMatchObject({ size: 2, hits: 5, misses: 2, repicks: 0 });
  });

  it('overrides the method: a key stays even when prefix_match would move it', () => {
    const d = withAffinity({}, 'prefix_match');
    const ranks = makeRanks(16);
    const first = d.dispatch({ routingKey: 's', inputIds: [1, 2, 3] }, ranks);
    for (let i = 0; i < 20; i++) {
      expect(d.dispatch({ routingKey: 's', inputIds: [i, i + 1, 5] }, ranks).rank).toBe(first.rank);
    }
  });

  it('re-picks and re-pins a key whose rank went unhealthy or was removed', () => {
    const d = withAffinity({});
    expect(d.dispatch({ routingKey: 'k' }, makeRanks(4)).rank).toBe(0);
    d.dispatch({ routingKey: 'x' }, makeRanks(4));
    d.dispatch({ routingKey: 'y' }, makeRanks(4));
    const repicked = d.dispatch({ routingKey: 'k' }, makeRanks(4, [0]));
    expect(repicked).toEqual({ rank: 3, reason: 'affinity-repick' });
    // Re-pinned: stays on 3 once 0 is back.
    expect(d.dispatch({ routingKey: 'k' }, makeRanks(4))).toEqual({ rank: 3, reason: 'affinity' });
    // Scale-in below the pinned rank.
    expect(d.dispatch({ routingKey: 'k' }, makeRanks(2)).reason).toBe('affinity-repick');
    expect(d.stats().affinity?.repicks).toBe(2);
  });

  it('never grows past maxEntries over 1,000,000 distinct keys, and counts evictions', () => {
    const maxEntries = 1000;
    const d = withAffinity({ maxEntries });
    const ranks = makeRanks(16);
    let largest = 0;
    for (let i = 0; i < 1_000_000; i++) {
      d.dispatch({ routingKey: `session-${i}` }, ranks);
      largest = Math.max(largest, d.stats().affinity?.size ?? 0);
    }
    const stats = d.stats().affinity;
    expect(largest).toBe(maxEntries);
    expect(stats?.size).toBe(maxEntries);
    expect(stats?.misses).toBe(1_000_000);
    expect(stats?.evictions).toBe(1_000_000 - maxEntries);
  });

  it('evicts the least recently used key', () => {
    const d = withAffinity({ maxEntries: 2 });
    const ranks = makeRanks(8);
    d.dispatch({ routingKey: 'a' }, ranks);
    d.dispatch({ routingKey: 'b' }, ranks);
    d.dispatch({ routingKey: 'a' }, ranks); // a is now more recent than b
    d.dispatch({ routingKey: 'c' }, ranks); // evicts b
    expect(d.dispatch({ routingKey: 'a' }, ranks).reason).toBe('affinity');
    expect(d.dispatch({ routingKey: 'b' }, ranks).reason).toBe('round-robin');
    expect(d.stats().affinity?.evictions).toBe(2);
  });

  it('forgets keys idle for ttlMs of host time, and each hit refreshes the key', () => {
    const d = withAffinity({ ttlMs: 1000 });
    const ranks = makeRanks(4);
    d.dispatch({ routingKey: 'k' }, ranks, { nowMs: 0 });
    expect(d.dispatch({ routingKey: 'k' }, ranks, { nowMs: 900 }).reason).toBe('affinity');
    // Refreshed at 900, so still pinned at 1800.
    expect(d.dispatch({ routingKey: 'k' }, ranks, { nowMs: 1800 }).reason).toBe('affinity');
    // Idle from 1800 to 2801: expired, placed afresh.
    expect(d.dispatch({ routingKey: 'k' }, ranks, { nowMs: 2801 }).reason).toBe('round-robin');
    expect(d.stats().affinity).toMatchObject({ hits: 2, misses: 2, expirations: 1 });
  });

  it('keeps keys forever with ttlMs 0', () => {
    const d = withAffinity({ ttlMs: 0 });
    const ranks = makeRanks(4);
    d.dispatch({ routingKey: 'k' }, ranks, { nowMs: 0 });
    expect(d.dispatch({ routingKey: 'k' }, ranks, { nowMs: 1e12 }).reason).toBe('affinity');
  });

  it('ignores empty keys, rejects non-string keys, and is off without config', () => {
    const d = withAffinity({});
    const ranks = makeRanks(3);
    d.dispatch({ routingKey: '' }, ranks);
    expect(d.stats().affinity?.size).toBe(0);
    expect(() => d.dispatch({ routingKey: 42 as unknown as string }, ranks)).toThrow(TypeError);
    const off = createDispatcher({ method: 'round_robin' });
    off.dispatch({ routingKey: 'k' }, ranks);
    expect(off.dispatch({ routingKey: 'k' }, ranks).rank).toBe(1);
    expect(off.stats().affinity).toBeUndefined();
    expect(createDispatcher({ method: 'round_robin', affinity: 'none' }).stats().affinity).toBe(
      undefined,
    );
  });

  it('validates its config', () => {
    for (const [affinity, field] of [
      [{ maxEntries: 0 }, 'maxEntries'],
      [{ maxEntries: 'many' }, 'maxEntries'],
      [{ ttlMs: -1 }, 'ttlMs'],
    ] as const) {
      try {
        withAffinity(affinity);
        expect.unreachable();
      } catch (error) {
        expect(error).toBeInstanceOf(PolicyRangeError);
        expect((error as PolicyRangeError).field).toBe(field);
      }
    }
    expect(() =>
      createDispatcher({ method: 'round_robin', affinity: { kind: 'session' } }),
    ).toThrow(/unknown affinity kind "session"; valid kinds: routing_key/);
    expect(() => withAffinity({ maxEntry: 5 })).toThrow(PolicyConfigError);
    expect(() => createDispatcher({ method: 'round_robin', affinity: 5 as never })).toThrow(
      PolicyConfigError,
    );
  });
});
