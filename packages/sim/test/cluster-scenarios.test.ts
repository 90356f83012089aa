// hot-prefix, rank-failure and scale-out, at small sizes.
import { describe, expect, it } from 'vitest';
import { keysMoved } from '../src/compare/keys-moved.ts';
import { getProfile } from '../src/cost/profiles.ts';
import { simulatePlan } from '../src/simulate.ts';
import { zipfTopShare } from '../src/workloads/hot-prefix.ts';
import { buildWorkload, scenarioNames } from '../src/workloads/registry.ts';

const profile = getProfile('h200-llama-3.1-8b');

describe('hot-prefix', () => {
  it('gives the top tenant at least 30% of requests, each prompt = tenant prefix + own turn', () => {
    const plan = buildWorkload('hot-prefix', { requests: 400 }, 3);
    expect(scenarioNames()).toContain('hot-prefix');
    expect(plan.mode).toBe('open');
    expect(plan.requests).toHaveLength(400);
    const byTenant = new Map<string, number>();
    for (const r of plan.requests) byTenant.set(r.tenant!, (byTenant.get(r.tenant!) ?? 0) + 1);
    const top = Math.max(...byTenant.values());
    expect(top / 400).toBeGreaterThanOrEqual(0.3);
    expect(zipfTopShare(20, 1.2)).toBeGreaterThan(0.34);
    // Same tenant: same leading tokens; arrivals sorted.
    const hot = [...byTenant.entries()].find(([, n]) => n === top)![0];
    const reqs = plan.requests.filter((r) => r.tenant === hot);
    const a = reqs[0]!.inputIds;
    const b = reqs[1]!.inputIds;
    let shared = 0;
    while (a[shared] === b[shared]) shared++;
    expect(shared).toBeGreaterThanOrEqual(2048);
    for (let i = 1; i < plan.requests.length; i++) {
      expect(plan.requests[i]!.arrivalMs!).toBeGreaterThanOrEqual(plan.requests[i - 1]!.arrivalMs!);
    }
  });

  it('is deterministic from the seed and rejects a tenant mix without a 30% top tenant', () => {
    const a = buildWorkload('hot-prefix', { requests: 50 }, 'x');
    const b = buildWorkload('hot-prefix', { requests: 50 }, 'x');
    expect(a.requests.map((r) => [r.arrivalMs, r.inputIds.length, r.tenant])).toEqual(
      b.requests.map((r) => [r.arrivalMs, r.inputIds.length, r.tenant]),
    );
    expect(() => buildWorkload('hot-prefix', { tenants: 50, zipfS: 0.5 }, 1)).toThrow(/30%/);
    expect(() => buildWorkload('hot-prefix', { ratePerS: 0 }, 1)).toThrow(/ratePerS/);
  });

  it('drowns prefix_match on one rank while cache_aware spreads the hot tenant', () => {
    const plan = buildWorkload('hot-prefix', { requests: 500, ratePerS: 60 }, 1);
    const pm = simulatePlan(plan, { policy: { method: 'prefix_match' }, profile, seed: 1 });
    const ca = simulatePlan(plan, { policy: { method: 'cache_aware' }, profile, seed: 1 });
    expect(ca.summary.imbalance).toBeLessThan(pm.summary.imbalance);
    expect(ca.summary.ttftMs.p99).toBeLessThan(pm.summary.ttftMs.p99);
    expect(ca.summary.hitRate).toBeGreaterThan(0.9 * pm.summary.hitRate);
  });
});

describe('rank-failure', () => {
  it('kills one rank mid-run and brings it back; requests in flight are retried, none lost', () => {
    const plan = buildWorkload('rank-failure', { sessions: 20, sessionsPerS: 2, turnsMax: 4 }, 2);
    expect(plan.events.map((e) => [e.kind, e.rank])).toEqual([
      ['rank-down', 3],
      ['rank-up', 3],
    ]);
    const [down, up] = plan.events;
    expect(down!.atMs).toBeLessThan(up!.atMs);
    const total = plan.clients.reduce((n, c) => n + c.length, 0);
    const run = simulatePlan(plan, { policy: { method: 'cache_aware' }, profile, seed: 2 });
    expect(run.summary.requests + run.summary.failed).toBe(total);
    expect(run.summary.failed).toBe(0);
    // While it is down, nothing is placed on rank 3.
    for (const r of run.records) {
      if (r.arrivalMs > down!.atMs && r.arrivalMs < up!.atMs) expect(r.rank).not.toBe(3);
    }
    // It served before it died, and serves again (cold) after it returns.
    expect(run.records.some((r) => r.arrivalMs < down!.atMs && r.rank === 3)).toBe(true);
    // (cache_aware keeps live sessions where their history is; a load-only method shows it back.)
    const rr = simulatePlan(plan, { policy: { method: 'round_robin' }, profile, seed: 2 });
    expect(rr.records.some((r) => r.arrivalMs >= up!.atMs && r.rank === 3)).toBe(true);
    expect(rr.summary.failed).toBe(0);
    expect(() => buildWorkload('rank-failure', { failRank: 16 }, 1)).toThrow(/failRank/);
    expect(() => buildWorkload('rank-failure', { downAt: 0.8, upAt: 0.5 }, 1)).toThrow(/upAt/);
  });
});

describe('scale-out', () => {
  it('starts on 8 ranks and grows to 12: hashing hands new ranks keys, cache_aware keeps sessions', () => {
    const plan = buildWorkload('scale-out', { sessions: 30, sessionsPerS: 3, turnsMax: 4 }, 4);
    expect(plan.ranks).toBe(8);
    expect(plan.events).toEqual([{ atMs: expect.any(Number), kind: 'set-ranks', ranks: 12 }]);
    const at = plan.events[0]!.atMs;
    const ch = simulatePlan(plan, { policy: { method: 'consistent_hash' }, profile, seed: 4 });
    expect(ch.records.filter((r) => r.arrivalMs < at).every((r) => r.rank < 8)).toBe(true);
    expect(ch.records.some((r) => r.arrivalMs >= at && r.rank >= 8)).toBe(true);
    // cache_aware: a live session's next turn stays where its history is.
    const ca = simulatePlan(plan, { policy: { method: 'cache_aware' }, profile, seed: 4 });
    const moved = keysMoved(ca.records, at);
    expect(moved.sessions).toBeGreaterThan(0);
    expect(moved.fraction).toBeLessThanOrEqual(1.5 / 12);
  });
});
