// The fit's known answer and the probe that finds it: the profile the mock workers of the fit
// e2e tests run (the fit never reads it) and the closed-loop fit-probe recorded against them.
// The fitter's unit test, the fit-accuracy script (whose noise file was measured on this
// setup) and the e2e tests at the repository root (by relative path) must all agree on both.
import type { CostProfileSpec } from '../../src/cost/cost-model.ts';

/**
 * Every term contributes around 100 ms somewhere in the probe, against 10-30 ms of timing
 * noise (always late) on a busy machine; no fit could find a term smaller than the noise.
 */
export const HIDDEN_PROFILE = {
  format: 'kvroute-cost-profile/v1',
  name: 'hidden',
  description: '',
  prefill: { floorMs: 100, perTokenMs: 0.1, attnMsPerMTokenPairs: 40, perKCachedTokenMs: 40 },
  decode: { floorMs: 30, perSeqMs: 6, perKContextTokenMs: 5 },
  overheadMs: 150,
  kvCapacityTokens: 200_000,
  chunkedPrefillSize: 512,
} satisfies CostProfileSpec;

/**
 * The closed-loop probe: 20 lone-request clients (one rank each) and the burst groups (2
 * contexts x 3 burst sizes, one rank each), every part side by side on 26 ranks.
 */
export const CLOSED_PROBE = {
  clients: 20,
  singles: 128,
  followUps: 1,
  minTokens: 32,
  maxTokens: 3000,
  // Fresh suffixes of 16 up to one prefill chunk on the cached prompts: what tells attention
  // over new tokens from reading the cached ones.
  suffixTokens: 16,
  suffixMaxTokens: 512,
  singleOutputTokens: 10,
  bursts: '2,4,8',
  burstContextTokens: '256,2048',
  burstOutputTokens: 16,
  // A 2048-token context alone takes about 1 s of model time on the hidden profile.
  burstDelayMs: 2000,
  ranks: 26,
};

/**
 * [constant, fitted, hidden] for each constant of the hidden profile, overheadMs first (what
 * a client sees of it: `overheadMs` when the HTTP path adds to the model's).
 */
export function againstHidden(
  fitted: { overheadMs: number; prefill: Record<string, number>; decode: Record<string, number> },
  overheadMs: number = HIDDEN_PROFILE.overheadMs,
): [string, number, number][] {
  return [
    ['overheadMs', fitted.overheadMs, overheadMs],
    ...Object.entries(HIDDEN_PROFILE.prefill).map(
      ([k, v]) => [`prefill.${k}`, fitted.prefill[k], v] as [string, number, number],
    ),
    ...Object.entries(HIDDEN_PROFILE.decode).map(
      ([k, v]) => [`decode.${k}`, fitted.decode[k], v] as [string, number, number],
    ),
  ];
}
