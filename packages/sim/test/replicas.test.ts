// Router replicas and where their cache index comes from: the learned index loses hits when
// each replica sees a third of the decisions; KV events (any small lag) and the oracle do not.
import { describe, expect, it } from 'vitest';
import { getProfile } from '../src/cost/profiles.ts';
import { simulatePlan } from '../src/simulate.ts';
import { buildWorkload } from '../src/workloads/registry.ts';

const profile = getProfile('h200-llama-3.1-8b');
const plan = () => buildWorkload('agentic', { sessions: 40, sessionsPerS: 2, ranks: 4 }, 11);

function hit(replicas: number, indexSource: 'learned' | 'events' | 'oracle', eventLagMs = 5) {
  return simulatePlan(plan(), {
    policy: { method: 'cache_aware' },
    profile,
    seed: 11,
    replicas,
    indexSource,
    eventLagMs,
  }).summary;
}

describe('router replicas and index sources', () => {
  it('shows the learned index replica penalty and events recovering it', () => {
    const one = hit(1, 'learned');
    const learned3 = hit(3, 'learned');
    const events3 = hit(3, 'events');
    const oracle3 = hit(3, 'oracle');
    console.log(
      `agentic, 4 ranks: 1 router learned ${(100 * one.hitRate).toFixed(1)}%, 3 replicas learned ${(100 * learned3.hitRate).toFixed(1)}%, events (5 ms) ${(100 * events3.hitRate).toFixed(1)}%, oracle ${(100 * oracle3.hitRate).toFixed(1)}%`,
    );
    expect(learned3.hitRate).toBeLessThan(one.hitRate);
    expect(events3.hitRate).toBeGreaterThanOrEqual(0.97 * one.hitRate);
    expect(oracle3.hitRate).toBeGreaterThanOrEqual(0.97 * one.hitRate);
    expect(one.requests).toBe(learned3.requests);
  });

  it('is deterministic and rejects bad settings by name', () => {
    expect(hit(3, 'events', 50)).toEqual(hit(3, 'events', 50));
    expect(() => hit(0, 'learned')).toThrow(/replicas must be an integer >= 1/);
    expect(() => hit(2, 'psychic' as 'learned')).toThrow(/indexSource must be one of/);
    expect(() => hit(2, 'events', -1)).toThrow(/eventLagMs/);
  });

  it('draws each batch’s lag from measured samples, seeded, keeping a rank’s batches in order', () => {
    const sampled = (lags: readonly number[]) =>
      simulatePlan(plan(), {
        policy: { method: 'cache_aware' },
        profile,
        seed: 11,
        replicas: 3,
        indexSource: 'events',
        eventLagMs: lags,
      }).summary;
    // One sample is the constant lag.
    expect(sampled([50])).toEqual(hit(3, 'events', 50));
    const mixed = sampled([1, 5, 5, 2000]);
    expect(mixed).toEqual(sampled([1, 5, 5, 2000]));
    expect(mixed.requests).toBe(hit(3, 'events').requests);
    expect(() => sampled([])).toThrow(/eventLagMs samples must be a non-empty list/);
    expect(() => sampled([1, Number.NaN])).toThrow(/eventLagMs samples/);
  });
});

describe('load polls across replicas', () => {
  const run = (loadPollMs?: number) =>
    simulatePlan(plan(), {
      policy: { method: 'total_requests' },
      profile,
      seed: 11,
      replicas: 3,
      ...(loadPollMs !== undefined ? { loadPollMs } : {}),
    }).summary;

  it('changes what a request-counting policy decides, finishes every request, stays deterministic', () => {
    const none = run();
    const polled = run(100);
    const live = run(0);
    console.log(
      `total_requests, 3 replicas: TTFT p99 no poll ${none.ttftMs.p99.toFixed(0)} ms, 100 ms poll ${polled.ttftMs.p99.toFixed(0)} ms, live ${live.ttftMs.p99.toFixed(0)} ms`,
    );
    for (const s of [polled, live]) {
      expect(s.requests).toBe(none.requests);
      expect(s.failed).toBe(0);
      expect(s.perRank.map((r) => r.requests)).not.toEqual(none.perRank.map((r) => r.requests));
    }
    // Each poll is an event of its own.
    expect(polled.events).toBeGreaterThan(none.events);
    expect(run(100)).toEqual(polled);
  });

  it('rejects a negative interval by name', () => {
    expect(() => run(-1)).toThrow(/loadPollMs must be a number >= 0/);
  });
});

describe('router replicas and rank health', () => {
  it('every replica follows a rank dying, returning and ranks being added', () => {
    // Replicas copy the cluster's health only when it changed; one that kept a stale copy
    // would send a request to a dead rank, which the simulator refuses loudly.
    for (const scenario of ['rank-failure', 'scale-out']) {
      const p = buildWorkload(scenario, {}, 3);
      const run = simulatePlan(p, {
        policy: { method: 'round_robin' },
        profile,
        seed: 3,
        replicas: 3,
      });
      const perRank = run.summary.perRank;
      // Round robin on every replica reaches the returned or added ranks after the event.
      expect(perRank.every((r) => r.requests > 0)).toBe(true);
      const sent = p.requests.length + p.clients.reduce((n, c) => n + c.length, 0);
      expect(run.summary.requests).toBe(sent);
    }
  });
});
