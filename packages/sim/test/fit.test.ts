// The fitter on exact timings: the fit-probe scenario simulated with a known profile must give
// the profile back; noise-free, the regression has nothing to average out. And on timings with
// the one-sided, long-tailed lateness a real client adds (seeded, so the test is exact): every
// constant within 10%.
import seedrandom from 'seedrandom';
import { describe, expect, it } from 'vitest';
import { type CostProfileSpec, costModelFromSpec } from '../src/cost/cost-model.ts';
import { fitProfile } from '../src/fit/fit.ts';
import type { ObservedRequest } from '../src/fit/observations.ts';
import { simulatePlan } from '../src/simulate.ts';
import { buildWorkload } from '../src/workloads/registry.ts';
// The closed-loop probe the e2e test records against a mock worker, and the profile it runs.
import { CLOSED_PROBE as CLOSED, HIDDEN_PROFILE as CLOSED_HIDDEN } from './helpers/fit-probe.ts';

const HIDDEN: CostProfileSpec = {
  format: 'kvroute-cost-profile/v1',
  name: 'hidden',
  description: '',
  prefill: { floorMs: 100, perTokenMs: 0.08, attnMsPerMTokenPairs: 8, perKCachedTokenMs: 10 },
  decode: { floorMs: 30, perSeqMs: 6, perKContextTokenMs: 3 },
  overheadMs: 150,
  kvCapacityTokens: 200_000,
  chunkedPrefillSize: 1024,
};

export function observe(
  spec: CostProfileSpec,
  options: Record<string, unknown>,
): ObservedRequest[] {
  const plan = buildWorkload('fit-probe', options, 1);
  const { records } = simulatePlan(plan, {
    // Routing-key affinity over total_requests, as the e2e test's worker: each closed-loop
    // client and burst group on a rank of its own (open-loop plans without keys: round robin
    // over their one rank).
    policy: { method: 'total_requests', affinity: 'routing_key' },
    profile: costModelFromSpec(spec),
    seed: 1,
  });
  return records.map((r) => ({
    startMs: r.arrivalMs,
    ttftMs: r.ttftMs,
    e2eMs: r.endMs - r.arrivalMs,
    inputTokens: r.inputTokens,
    cachedTokens: r.cachedTokens,
    outputTokens: r.outputTokens,
    rank: r.rank,
  }));
}

describe('fitProfile', () => {
  it('recovers every constant of the profile that produced the timings', () => {
    const obs = observe(HIDDEN, {
      singles: 24,
      maxTokens: 2000,
      singleOutputTokens: 10,
      bursts: '2,4,6',
      burstContextTokens: '256,2048',
      burstOutputTokens: 16,
      gapMs: 1100,
      burstGapMs: 2800,
    });
    // A chunk the profile loader would refuse is refused before fitting, not written out.
    expect(() => fitProfile(obs, { chunkedPrefillSize: 32, kvCapacityTokens: 200_000 })).toThrow(
      'chunkedPrefillSize must be an integer >= 64, got 32',
    );
    const fit = fitProfile(obs, { chunkedPrefillSize: 1024, kvCapacityTokens: 200_000 });
    const s = fit.spec;
    expect(s.overheadMs).toBeCloseTo(150, 3);
    expect(s.prefill.floorMs).toBeCloseTo(100, 3);
    expect(s.prefill.perTokenMs).toBeCloseTo(0.08, 6);
    expect(s.prefill.attnMsPerMTokenPairs).toBeCloseTo(8, 3);
    expect(s.prefill.perKCachedTokenMs).toBeCloseTo(10, 3);
    // Decode is fitted from time-averaged batch and context over each window: close, not exact.
    expect(Math.abs(s.decode.floorMs! - 30) / 30).toBeLessThan(0.02);
    expect(Math.abs(s.decode.perSeqMs! - 6) / 6).toBeLessThan(0.02);
    expect(Math.abs(s.decode.perKContextTokenMs! - 3) / 3).toBeLessThan(0.1);
    expect(fit.prefill.maxAbsRelError).toBeLessThan(1e-6);
  });
});

const constants = (s: CostProfileSpec) => ({
  overheadMs: s.overheadMs ?? 0,
  ...Object.fromEntries(Object.entries(s.prefill).map(([k, v]) => [`prefill.${k}`, v])),
  ...Object.fromEntries(Object.entries(s.decode).map(([k, v]) => [`decode.${k}`, v])),
});

describe('fit-probe closed loop', () => {
  it('keeps each client on one rank, one request at a time, and runs the bursts together', () => {
    const plan = buildWorkload('fit-probe', CLOSED, 1);
    expect(plan.mode).toBe('closed');
    // 20 lone-request clients, then per (context, burst size) one context and its burst.
    expect(plan.clients.length).toBe(20 + 2 * (1 + 2 + 1 + 4 + 1 + 8));
    for (const c of plan.clients.slice(0, 20)) {
      expect(new Set(c.map((r) => r.routingKey)).size).toBe(1);
      expect(c.length).toBeGreaterThanOrEqual(6);
      // One request at a time, each after the previous one ended.
      expect(c.slice(1).every((r) => r.thinkMs === 20)).toBe(true);
    }
    const keys = plan.clients.slice(0, 20).map((c) => c[0]!.routingKey);
    expect(new Set(keys).size).toBe(20);
    const { records } = simulatePlan(plan, {
      policy: { method: 'total_requests', affinity: 'routing_key' },
      profile: costModelFromSpec(CLOSED_HIDDEN),
      seed: 1,
    });
    // Every client and every burst group on a rank of its own.
    const byKey = new Map<string, Set<number>>();
    const all = plan.clients.flat();
    for (const r of records) {
      const key = all.find((q) => q.id === r.id)!.routingKey!;
      byKey.set(key, (byKey.get(key) ?? new Set()).add(r.rank));
    }
    expect(byKey.size).toBe(26);
    const ranks = [...byKey.values()].map((s) => [...s]);
    expect(ranks.every((s) => s.length === 1)).toBe(true);
    expect(new Set(ranks.map((s) => s[0])).size).toBe(26);
    // A cached follow-up hits its whole predecessor (input - 1 at most, as SGLang matches).
    const follow = records.filter((r) => r.sessionKey.startsWith('single-') && r.cachedTokens > 0);
    expect(follow.length).toBe(64);
  });

  it('gives the profile back from exact timings', () => {
    const fit = fitProfile(observe(CLOSED_HIDDEN, CLOSED), {
      chunkedPrefillSize: 512,
      kvCapacityTokens: 200_000,
    });
    const want = constants(CLOSED_HIDDEN);
    for (const [k, v] of Object.entries(constants(fit.spec))) {
      expect(
        Math.abs(v - want[k as keyof typeof want]!) / want[k as keyof typeof want]!,
        k,
      ).toBeLessThan(1e-6);
    }
  });

  it('comes within 10% of every constant when each delivery is late by a long-tailed delay', () => {
    const rng = seedrandom('late');
    // Lateness as recorded against a mock worker on a loaded host, in model ms: most
    // deliveries a few ms late, one in five 10-50 ms, one in twenty up to 100.
    const late = () => {
      const u = rng();
      if (u < 0.05) return 50 + 50 * rng();
      if (u < 0.25) return 10 + 40 * rng();
      return 1 + 6 * rng();
    };
    const exact = observe(CLOSED_HIDDEN, CLOSED);
    const obs = exact.map((r) => {
      const first = late();
      return { ...r, ttftMs: r.ttftMs + first, e2eMs: r.e2eMs + first + late() - late() };
    });
    const fit = fitProfile(obs, { chunkedPrefillSize: 512, kvCapacityTokens: 200_000 });
    const want = constants(CLOSED_HIDDEN);
    for (const [k, v] of Object.entries(constants(fit.spec))) {
      const w = want[k as keyof typeof want]!;
      // The overhead carries the fastest requests' lateness (a few ms), as a live fit does.
      expect(Math.abs(v - w) / w, `${k}: ${v} against ${w}`).toBeLessThan(0.1);
    }
  });
});

describe('fitProfile decode windows', () => {
  it('is not pulled to 0 by a window whose first token came so late that it looks empty', () => {
    const obs = observe(CLOSED_HIDDEN, CLOSED);
    // One lone request's first token delivered a moment before its last: its window says
    // its 9 steps took 0.2 ms.
    const i = obs.findIndex((r) => r.outputTokens === 10 && r.cachedTokens === 0);
    obs[i] = { ...obs[i]!, ttftMs: obs[i]!.e2eMs - 0.2 };
    const s = fitProfile(obs, { chunkedPrefillSize: 512, kvCapacityTokens: 200_000 }).spec;
    expect(Math.abs(s.decode.floorMs - 30) / 30).toBeLessThan(0.02);
    expect(Math.abs(s.decode.perSeqMs - 6) / 6).toBeLessThan(0.02);
    expect(Math.abs(s.decode.perKContextTokenMs - 5) / 5).toBeLessThan(0.02);
  });
});
