// the seed measurements, reproduced by the model rather than asserted into it.
// The profile's prefill constants come from two seed numbers (cold 22,651-token prefill, and
// a hit); everything checked here (what round_robin finds cached, the steady state, the
// ratios, concurrency) follows from the rank model, the workload and the policies.
import { describe, expect, it } from 'vitest';
import { runComparison } from '../src/compare.ts';

const within = (value: number, target: number, tol: number) =>
  expect(Math.abs(value - target) / target).toBeLessThanOrEqual(tol);

describe('seed-sequential on seed-qwen3-moe-dp16', () => {
  const result = runComparison({
    scenario: 'seed-sequential',
    policies: ['round_robin', 'total_tokens', 'prefix_match'],
    profile: 'seed-qwen3-moe-dp16',
    seed: 1,
  });
  const [rr, tt, pm] = result.policies;

  it('round_robin: cold TTFT 7400 ms within 15%, and finds the prefix again after 16 requests', () => {
    expect(rr!.coldTtftMs).not.toBeNull();
    within(rr!.coldTtftMs!.mean, 7400, 0.15);
    // 16 ranks: the first 16 requests are cold, request 17 lands on rank 0 again and hits.
    expect(rr!.coldTtftMs!.count).toBe(16);
    expect(rr!.steadyTtftMs!.p50).toBeLessThan(rr!.coldTtftMs!.p50 / 4);
  });

  it('prefix_match: steady-state p50 1290 ms within 15%, >= 4.5x better than round_robin over the first 16', () => {
    within(pm!.steadyTtftMs!.p50, 1290, 0.15);
    expect(pm!.coldTtftMs!.count).toBe(1);
    expect(rr!.warmupTtftMs!.count).toBe(16);
    expect(rr!.warmupTtftMs!.mean / pm!.steadyTtftMs!.p50).toBeGreaterThanOrEqual(4.5);
  });

  it('total_tokens with a fair tie-break spreads idle-cluster traffic like round_robin', () => {
    // Upstream, ties went to rank 0, so strictly sequential traffic stuck to rank 0 and hit.
    expect(tt!.coldTtftMs!.count).toBe(16);
    expect(tt!.hitRate).toBeCloseTo(rr!.hitRate, 6);
  });
});

describe('seed-concurrent on seed-qwen3-moe-dp16', () => {
  it("prefix_match's requests/s is at least 1.8x round_robin's", () => {
    const result = runComparison({
      scenario: 'seed-concurrent',
      policies: ['round_robin', 'prefix_match'],
      profile: 'seed-qwen3-moe-dp16',
      seed: 1,
    });
    const [rr, pm] = result.policies;
    expect(rr!.throughputRps).toBeGreaterThan(0);
    // Requests past durationMs are never sent; none that were sent may be lost.
    expect(rr!.failed).toBe(0);
    expect(pm!.failed).toBe(0);
    expect(pm!.throughputRps / rr!.throughputRps).toBeGreaterThanOrEqual(1.8);
    expect(pm!.hitRate).toBeGreaterThan(rr!.hitRate);
  });
});
