// Physical invariants every simulated run must keep, on every built-in profile: no step
// prefills faster than the profile allows, no rank is busy longer than the run, Little's law
// holds between the host's measured occupancy and the records, and no request's first token
// comes before its own prefill could have finished.
import { describe, expect, it } from 'vitest';
import type { CostModel } from '../src/cost/cost-model.ts';
import { kvTransferMs, profileKvBytesPerToken } from '../src/cost/kv-transfer.ts';
import { getProfile, profileNames } from '../src/cost/profiles.ts';
import { EventQueue } from '../src/engine/event-queue.ts';
import type { StepRecord } from '../src/entities/rank.ts';
import { RankModel } from '../src/entities/rank.ts';
import type { PolicyRunResult } from '../src/metrics/types.ts';
import type { DecodeStepRecord } from '../src/pd/decode-rank.ts';
import { simulatePd } from '../src/pd/simulate-pd.ts';
import { type RankOverrides, simulatePlan } from '../src/simulate.ts';
import { buildWorkload } from '../src/workloads/registry.ts';
import type { WorkloadPlan, WorkloadRequest } from '../src/workloads/types.ts';

const EPS = 1e-6;

/** `n` cold prompts of `len` distinct tokens, all arriving at t=0 (a burst). */
function burst(n: number, len: number, out: number): WorkloadPlan {
  const requests: WorkloadRequest[] = [];
  for (let i = 0; i < n; i++) {
    requests.push({
      id: i,
      clientId: i,
      inputIds: Uint32Array.from({ length: len }, (_, j) => 1 + ((i * len + j) % 29_999)),
      outputTokens: out,
      arrivalMs: 0,
      sessionKey: `s${i}`,
    });
  }
  return { scenario: 'burst', mode: 'open', ranks: 1, clients: [], requests, events: [] };
}

/** Runs the plan and checks every invariant; returns the run for further checks. */
function checkRun(
  plan: WorkloadPlan,
  profile: CostModel,
  method: string,
  ranks?: number,
  rank?: RankOverrides,
) {
  const steps: StepRecord[] = [];
  const run: PolicyRunResult = simulatePlan(plan, {
    policy: { method },
    profile,
    seed: 1,
    ...(ranks !== undefined ? { ranks } : {}),
    ...(rank !== undefined ? { rank } : {}),
    onStep: (s) => steps.push(s),
  });
  const { summary, records } = run;
  expect(summary.failed).toBe(0);
  expect(records.length).toBeGreaterThan(0);

  // 1. No step prefills faster than the profile's per-token limit.
  let prefillSteps = 0;
  for (const s of steps) {
    expect(s.endMs - s.startMs).toBeGreaterThanOrEqual(s.prefillMs - EPS);
    if (s.prefillTokens === 0) continue;
    prefillSteps++;
    expect(s.prefillMs).toBeGreaterThanOrEqual(profile.prefillFloorMs(s.prefillTokens, 0) - EPS);
  }
  expect(prefillSteps).toBeGreaterThan(0);

  // 2. Busy time <= wall time, per rank.
  const firstArrival = Math.min(...records.map((r) => r.arrivalMs));
  const lastEnd = Math.max(...records.map((r) => r.endMs));
  for (const r of summary.perRank) {
    // perRank figures are rounded to 1e-3 ms.
    expect(r.prefillBusyMs + r.decodeBusyMs).toBeLessThanOrEqual(lastEnd + 2e-3);
  }

  // 3. Little's law: L (measured by the host) = throughput x mean time in system.
  const span = lastEnd - firstArrival;
  const lambda = records.length / span;
  const w = records.reduce((a, r) => a + (r.endMs - r.arrivalMs), 0) / records.length;
  const L = run.meanInSystem!;
  expect(L).toBeGreaterThan(0);
  expect(Math.abs(L - lambda * w) / L).toBeLessThan(0.01);

  // 4. Every TTFT is at least its request's cost floor.
  const overhead = profile.overheadMs ?? 0;
  for (const r of records) {
    const floor = overhead + profile.prefillFloorMs(r.inputTokens - r.cachedTokens, r.cachedTokens);
    expect(r.ttftMs).toBeGreaterThanOrEqual(floor - EPS);
  }
  return run;
}

describe('physical invariants on every built-in profile', () => {
  for (const name of profileNames()) {
    const profile = getProfile(name);
    it(`${name}: a burst of short cold prompts on one rank`, () => {
      checkRun(burst(64, 700, 4), profile, 'round_robin', 1);
    });
    it(`${name}: agentic sessions on 4 ranks under prefix_match and round_robin`, () => {
      const plan = buildWorkload(
        'agentic',
        { sessions: 12, sessionsPerS: 2, turnsMax: 4, ranks: 4 },
        7,
      );
      for (const method of ['prefix_match', 'round_robin']) checkRun(plan, profile, method);
    });
    it(`${name}: a small KV pool under each admission mode, with and without a host tier`, () => {
      const plan = buildWorkload(
        'agentic',
        { sessions: 10, sessionsPerS: 4, turnsMax: 3, ranks: 2, thinkMinMs: 50, thinkMaxMs: 100 },
        5,
      );
      for (const admission of ['reserve', 'optimistic', 'preempt'] as const) {
        for (const hostKv of [undefined, { capacityTokens: 200_000, loadTokensPerMs: 50 }]) {
          const run = checkRun(plan, profile, 'round_robin', undefined, {
            kvCapacityTokens: 40_000,
            admission,
            maxRunningRequests: 8,
            ...(hostKv ? { hostKv } : {}),
          });
          expect(run.summary.requests).toBe(plan.clients.reduce((a, c) => a + c.length, 0));
        }
      }
    });
    it(`${name}: a rank fails and comes back mid-run`, () => {
      const plan = buildWorkload(
        'rank-failure',
        { sessions: 16, sessionsPerS: 4, turnsMax: 3, ranks: 4, thinkMinMs: 100, thinkMaxMs: 400 },
        3,
      );
      checkRun(plan, profile, 'cache_aware');
    });
  }

  it('a profile with a per-request overhead adds it to every TTFT, and Little still holds', () => {
    const base = getProfile('h200-llama-3.1-8b');
    const withOverhead: CostModel = { ...base, overheadMs: 40 };
    const a = checkRun(burst(8, 300, 2), base, 'round_robin', 2);
    const b = checkRun(burst(8, 300, 2), withOverhead, 'round_robin', 2);
    const ttft = (r: PolicyRunResult) => r.records.map((x) => x.ttftMs).sort((x, y) => x - y);
    const before = ttft(a);
    expect(ttft(b).map((t, i) => t - before[i]!)).toEqual(before.map(() => expect.closeTo(40, 6)));
  });
});

/**
 * The same invariants on the prefill/decode-disaggregated layout: every prefill step within
 * the profile, every prefill and decode rank busy no longer than the run, Little's law over
 * the host's occupancy, and every TTFT at least its prefill floor plus its KV transfer.
 */
function checkPdRun(
  plan: WorkloadPlan,
  profile: CostModel,
  prefillRanks: number,
  decodeRanks: number,
  rank?: RankOverrides,
) {
  const steps: StepRecord[] = [];
  const decodeSteps: DecodeStepRecord[] = [];
  const link = { gbps: 100, setupMs: 1 };
  const run = simulatePd(plan, {
    prefillPolicy: { method: 'cache_aware' },
    decodePolicy: { method: 'total_tokens' },
    prefillRanks,
    decodeRanks,
    profile,
    seed: 1,
    link,
    ...(rank !== undefined ? { rank } : {}),
    onStep: (s) => steps.push(s),
    onDecodeStep: (s) => decodeSteps.push(s),
  });
  const { summary, records } = run;
  expect(summary.failed).toBe(0);
  expect(records.length).toBeGreaterThan(0);
  for (const s of steps) {
    expect(s.endMs - s.startMs).toBeGreaterThanOrEqual(s.prefillMs - EPS);
    if (s.prefillTokens > 0) {
      expect(s.prefillMs).toBeGreaterThanOrEqual(profile.prefillFloorMs(s.prefillTokens, 0) - EPS);
    }
  }
  for (const s of decodeSteps) {
    let floor = 0;
    for (let j = 0; j < s.steps; j++) floor += profile.decodeStepMs(s.batch, 0);
    expect(s.endMs - s.startMs).toBeGreaterThanOrEqual(floor - EPS);
  }
  const firstArrival = Math.min(...records.map((r) => r.arrivalMs));
  const lastEnd = Math.max(...records.map((r) => r.endMs));
  for (const r of summary.perRank) {
    expect(r.prefillBusyMs + r.decodeBusyMs).toBeLessThanOrEqual(lastEnd + 2e-3);
  }
  for (const d of run.pd.decodePerRank) expect(d.decodeBusyMs).toBeLessThanOrEqual(lastEnd + 2e-3);
  const span = lastEnd - firstArrival;
  const lambda = records.length / span;
  const w = records.reduce((a, r) => a + (r.endMs - r.arrivalMs), 0) / records.length;
  const L = run.meanInSystem;
  expect(L).toBeGreaterThan(0);
  expect(Math.abs(L - lambda * w) / L).toBeLessThan(0.01);
  const overhead = profile.overheadMs ?? 0;
  const bytes = profileKvBytesPerToken(profile);
  for (const r of records) {
    const floor =
      overhead +
      profile.prefillFloorMs(r.inputTokens - r.cachedTokens, r.cachedTokens) +
      kvTransferMs(r.inputTokens, bytes, link);
    expect(r.ttftMs).toBeGreaterThanOrEqual(floor - EPS);
  }
  return run;
}

describe('physical invariants of the prefill/decode layout on every built-in profile', () => {
  for (const name of profileNames()) {
    const profile = getProfile(name);
    it(`${name}: a burst of cold prompts, one prefill and one decode rank`, () => {
      checkPdRun(burst(64, 700, 4), profile, 1, 1);
    });
    it(`${name}: agentic sessions on 2 prefill and 2 decode ranks, roomy and tight KV pools`, () => {
      const plan = buildWorkload(
        'agentic',
        { sessions: 12, sessionsPerS: 2, turnsMax: 4, ranks: 4 },
        7,
      );
      checkPdRun(plan, profile, 2, 2);
      checkPdRun(plan, profile, 2, 2, { kvCapacityTokens: 60_000, maxRunningRequests: 8 });
    });
  }
});

describe('batched prefill', () => {
  it('64 cold 700-token prompts on one rank prefill no faster than the per-token rate', () => {
    // The bug this guards: each extra chunk in a step used to be discounted the launch floor,
    // so this burst finished its prefill in 168 ms (266 tokens/ms, 8.5x a single chunk's rate).
    const profile = getProfile('h200-llama-3.1-8b');
    const q = new EventQueue();
    const rank = new RankModel({ rank: 0, profile, scheduler: q });
    let lastFirst = 0;
    for (const r of burst(64, 700, 1).requests) {
      rank.submit({
        id: r.id,
        inputIds: r.inputIds,
        maxNewTokens: 1,
        onFirstToken: (t) => {
          lastFirst = Math.max(lastFirst, t);
        },
      });
    }
    q.run();
    const tokens = 64 * 700;
    const single = 8192 / profile.prefillMs(8192, 0);
    expect(lastFirst).toBeGreaterThanOrEqual(profile.prefillFloorMs(tokens, 0));
    // Batching separate sequences saves attention work only: within 25% of one long chunk's rate.
    expect(tokens / lastFirst).toBeLessThan(single * 1.25);
  });

  it('one step pays the fixed cost once and every chunk its own terms', () => {
    const profile = getProfile('h200-qwen2.5-32b');
    const chunks = [
      { newTokens: 500, cachedTokens: 0 },
      { newTokens: 300, cachedTokens: 4000 },
    ];
    const batch = profile.prefillBatchMs(chunks);
    for (const c of chunks) {
      expect(batch).toBeGreaterThanOrEqual(profile.prefillMs(c.newTokens, c.cachedTokens));
    }
    expect(batch).toBeLessThanOrEqual(
      profile.prefillMs(500, 0) + profile.prefillMs(300, 4000) + EPS,
    );
    expect(profile.prefillBatchMs([chunks[0]!])).toBeCloseTo(profile.prefillMs(500, 0), 9);
  });
});
