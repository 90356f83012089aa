import { describe, expect, it } from 'vitest';
import { runComparison } from '../src/compare.ts';
import { costModelFromSpec } from '../src/cost/cost-model.ts';
import { getProfile } from '../src/cost/profiles.ts';
import { EventQueue } from '../src/engine/event-queue.ts';
import { DpAttentionGroup } from '../src/entities/dp-attention-group.ts';
import { simulatePlan } from '../src/simulate.ts';
import { buildWorkload } from '../src/workloads/registry.ts';
import type { WorkloadPlan } from '../src/workloads/types.ts';
import { REQUIRED_POLICY_KEYS } from './report-fixtures.ts';

const profile = getProfile('h200-llama-3.1-8b');

function agenticPlan(events: WorkloadPlan['events'] = []): WorkloadPlan {
  const plan = buildWorkload('agentic', { sessions: 40, sessionsPerS: 2, ranks: 4 }, 11);
  plan.events = events;
  return plan;
}

describe('simulatePlan', () => {
  it('completes every request with consistent accounting', () => {
    const plan = agenticPlan();
    const total = plan.clients.reduce((a, c) => a + c.length, 0);
    const { summary, records } = simulatePlan(plan, {
      policy: { method: 'prefix_match' },
      profile,
      seed: 11,
    });
    expect(summary.requests).toBe(total);
    expect(summary.failed).toBe(0);
    expect(records).toHaveLength(total);
    for (const r of records) {
      expect(r.cachedTokens).toBeLessThan(r.inputTokens);
      expect(r.ttftMs).toBeGreaterThan(0);
      expect(r.endMs).toBeGreaterThanOrEqual(r.arrivalMs + r.ttftMs);
      expect(r.queueMs).toBeGreaterThanOrEqual(0);
      expect(r.reason).toBe('prefix-hash');
    }
    const perRankRequests = summary.perRank.reduce((a, r) => a + r.requests, 0);
    expect(perRankRequests).toBe(total);
    const input = records.reduce((a, r) => a + r.inputTokens, 0);
    const cached = records.reduce((a, r) => a + r.cachedTokens, 0);
    expect(summary.hitRate).toBeCloseTo(cached / input, 5);
    const prefilled = summary.perRank.reduce((a, r) => a + r.prefillTokens, 0);
    expect(prefilled).toBe(input - cached);
    // Multi-turn sessions re-use their history: most input is cached under prefix_match.
    expect(summary.hitRate).toBeGreaterThan(0.5);
    expect(summary.reasons['prefix-hash']).toBe(total);
  });

  it('clients in a closed loop wait for their previous request plus think time', () => {
    const plan = agenticPlan();
    const { records } = simulatePlan(plan, {
      policy: { method: 'round_robin' },
      profile,
      seed: 11,
    });
    const byId = new Map(records.map((r) => [r.id, r]));
    for (const client of plan.clients) {
      for (let i = 1; i < client.length; i++) {
        const prev = byId.get(client[i - 1]!.id)!;
        const cur = byId.get(client[i]!.id)!;
        expect(cur.arrivalMs).toBeCloseTo(prev.endMs + client[i]!.thinkMs!, 6);
      }
    }
  });

  it('re-dispatches requests of a rank that goes down, counts them retried, and restarts it cold', () => {
    const plan = agenticPlan([
      { atMs: 20_000, kind: 'rank-down', rank: 1 },
      { atMs: 40_000, kind: 'rank-up', rank: 1 },
    ]);
    const total = plan.clients.reduce((a, c) => a + c.length, 0);
    const { summary, records } = simulatePlan(plan, {
      policy: { method: 'round_robin' },
      profile,
      seed: 11,
    });
    expect(summary.requests).toBe(total);
    expect(summary.retried).toBeGreaterThan(0);
    for (const r of records) {
      // Nothing arriving while rank 1 was down ran there (retries were moved off it).
      if (r.arrivalMs > 20_000 && r.arrivalMs < 40_000) expect(r.rank).not.toBe(1);
      if (r.retries > 0) expect(r.rank).not.toBe(1);
    }
    // The first request on rank 1 after it came back found an empty cache.
    const back = records.filter((r) => r.rank === 1 && r.arrivalMs >= 40_000);
    expect(back.length).toBeGreaterThan(0);
    back.sort((a, b) => a.arrivalMs - b.arrivalMs);
    expect(back[0]!.cachedTokens).toBe(0);
  });

  it('set-ranks scales out to cold ranks that then take traffic, and scales in', () => {
    const plan = agenticPlan([
      { atMs: 10_000, kind: 'set-ranks', ranks: 8 },
      { atMs: 60_000, kind: 'set-ranks', ranks: 2 },
    ]);
    const { summary, records } = simulatePlan(plan, {
      policy: { method: 'round_robin' },
      profile,
      seed: 11,
    });
    expect(summary.failed).toBe(0);
    expect(summary.perRank).toHaveLength(2);
    expect(records.some((r) => r.rank >= 4)).toBe(true);
    for (const r of records) if (r.arrivalMs > 60_000) expect(r.rank).toBeLessThan(2);
  });

  it('policy-switch: the router takes the new policy at that moment; requests in flight finish on the old one', () => {
    const plan = agenticPlan([
      { atMs: 30_000, kind: 'policy-switch', policy: { method: 'total_tokens' } },
    ]);
    const total = plan.clients.reduce((a, c) => a + c.length, 0);
    const { summary, records } = simulatePlan(plan, {
      policy: { method: 'round_robin' },
      profile,
      seed: 11,
    });
    expect(summary.requests).toBe(total);
    expect(summary.failed).toBe(0);
    // Dispatched (at arrival, nothing here is retried) before the switch by round robin,
    // after it by least tokens; both dispatchers' counts are in the summary.
    const before = records.filter((r) => r.arrivalMs < 30_000);
    const after = records.filter((r) => r.arrivalMs > 30_000);
    expect(before.length).toBeGreaterThan(0);
    expect(after.length).toBeGreaterThan(0);
    expect(new Set(before.map((r) => r.reason))).toEqual(new Set(['round-robin']));
    expect(new Set(after.map((r) => r.reason))).toEqual(new Set(['least-tokens']));
    expect(summary.reasons['round-robin']).toBe(before.length);
    expect(summary.reasons['least-tokens']).toBe(after.length);
    // The summary still names the policy the run was started with.
    expect(summary.policy).toBe('round_robin');
    // An invalid switch fails the run before it starts, naming the problem.
    const bad = agenticPlan([
      { atMs: 5, kind: 'policy-switch', policy: { method: 'prefix_match', window: 0 } },
    ]);
    expect(() =>
      simulatePlan(bad, { policy: { method: 'round_robin' }, profile, seed: 1 }),
    ).toThrow(/window/);
    const none = agenticPlan([{ atMs: 5, kind: 'policy-switch' }]);
    expect(() =>
      simulatePlan(none, { policy: { method: 'round_robin' }, profile, seed: 1 }),
    ).toThrow(/policy-switch event at 5 ms: needs a policy with a method/);
  });

  it('rejects impossible inputs with clear errors', () => {
    const plan = agenticPlan();
    expect(() =>
      simulatePlan(plan, { policy: { method: 'round_robin' }, ranks: 0, profile, seed: 1 }),
    ).toThrow(/ranks must be an integer >= 1/);
    expect(() => simulatePlan(plan, { policy: { method: 'nope' }, profile, seed: 1 })).toThrow(
      /unknown method/,
    );
    expect(() =>
      simulatePlan(plan, { policy: { method: 'prefix_match', window: -1 }, profile, seed: 1 }),
    ).toThrow(/window/);
    const bad = agenticPlan([{ atMs: 5, kind: 'rank-down', rank: 9 }]);
    expect(() =>
      simulatePlan(bad, { policy: { method: 'round_robin' }, profile, seed: 1 }),
    ).toThrow(/rank-down event at 5 ms: rank must be an integer in \[0, 4\)/);
  });
});

describe('determinism', () => {
  it('the same arguments and seed give byte-identical JSON; another seed does not', () => {
    const args = {
      scenario: 'agentic',
      scenarioOptions: { sessions: 30 },
      policies: ['round_robin', 'total_tokens', 'prefix_match'],
      profile: 'h200-llama-3.1-8b',
    };
    const a = JSON.stringify(runComparison({ ...args, seed: 'abc' }));
    const b = JSON.stringify(runComparison({ ...args, seed: 'abc' }));
    const c = JSON.stringify(runComparison({ ...args, seed: 'abd' }));
    expect(a).toBe(b);
    expect(a).not.toBe(c);
    const parsed = JSON.parse(a);
    expect(Object.keys(parsed)).toEqual(
      expect.arrayContaining(['scenario', 'ranks', 'profile', 'seed', 'policies']),
    );
    for (const p of parsed.policies) {
      for (const key of REQUIRED_POLICY_KEYS) {
        expect(p).toHaveProperty(key);
      }
    }
  });
});

describe('DpAttentionGroup', () => {
  const unit = costModelFromSpec({
    format: 'kvroute-cost-profile/v1',
    name: 'unit',
    description: '',
    prefill: { floorMs: 100, perTokenMs: 0, attnMsPerMTokenPairs: 0 },
    decode: { floorMs: 10, perSeqMs: 0, perKContextTokenMs: 0 },
    kvCapacityTokens: 10_000,
    chunkedPrefillSize: 1000,
  });
  const ids = (from: number, n: number) => Uint32Array.from({ length: n }, (_, i) => from + i);

  it("stalls one rank's decodes for another rank's prefill, as DP attention does", () => {
    const q = new EventQueue();
    const group = new DpAttentionGroup(q);
    const r0 = group.add({ rank: 0, profile: unit });
    const r1 = group.add({ rank: 1, profile: unit });
    let end0 = 0;
    let first1 = 0;
    r0.submit({ id: 'a', inputIds: ids(1, 10), maxNewTokens: 11, onFinish: (t) => (end0 = t) });
    // r0: prefill 0..100, then 10 decode steps of 10 ms -> alone it would end at 200.
    q.at(125, () =>
      r1.submit({
        id: 'b',
        inputIds: ids(500, 10),
        maxNewTokens: 1,
        onFirstToken: (t) => (first1 = t),
      }),
    );
    q.run();
    // r1 joins at the boundary 130 and prefills 130..230 while r0 decodes one token in that
    // same pass; r0 has 4 + 1 of its 11 tokens by then and needs 6 more steps.
    expect(first1).toBe(230);
    expect(end0).toBe(230 + 6 * 10);
    // The same two requests through the host: independent ranks do not interact, lockstep
    // ranks reproduce the group's timeline.
    const twoRequests: WorkloadPlan = {
      scenario: 'x',
      mode: 'open',
      ranks: 2,
      clients: [],
      events: [],
      requests: [
        {
          id: 0,
          clientId: 0,
          inputIds: ids(1, 10),
          outputTokens: 11,
          arrivalMs: 0,
          sessionKey: 'a',
        },
        {
          id: 1,
          clientId: 1,
          inputIds: ids(500, 10),
          outputTokens: 1,
          arrivalMs: 125,
          sessionKey: 'b',
        },
      ],
    };
    const base = { policy: { method: 'round_robin' }, profile: unit, seed: 1 };
    const plan = simulatePlan(twoRequests, base);
    expect(plan.records.find((r) => r.id === 0)!.endMs).toBe(200);
    const locked = simulatePlan(twoRequests, { ...base, rank: { dpAttention: true } });
    expect(locked.records.find((r) => r.id === 0)!.endMs).toBe(290);
  });
});
