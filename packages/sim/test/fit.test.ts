// The fitter on exact timings: the fit-probe scenario simulated with a known profile must give
// the profile back; noise-free, the regression has nothing to average out.
import { describe, expect, it } from 'vitest';
import { type CostProfileSpec, costModelFromSpec } from '../src/cost/cost-model.ts';
import { fitProfile } from '../src/fit/fit.ts';
import type { ObservedRequest } from '../src/fit/observations.ts';
import { simulatePlan } from '../src/simulate.ts';
import { buildWorkload } from '../src/workloads/registry.ts';

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
    policy: { method: 'round_robin' },
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
