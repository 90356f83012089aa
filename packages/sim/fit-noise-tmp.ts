import { costModelFromSpec, type CostProfileSpec } from './src/cost/cost-model.ts';
import { fitProfile } from './src/fit/fit.ts';
import { simulatePlan } from './src/simulate.ts';
import { buildWorkload } from './src/workloads/registry.ts';
import seedrandom from 'seedrandom';
const HIDDEN: CostProfileSpec = { format: 'kvroute-cost-profile/v1', name: 'hidden', description: '',
  prefill: { floorMs: 100, perTokenMs: 0.1, attnMsPerMTokenPairs: 40, perKCachedTokenMs: 40 },
  decode: { floorMs: 30, perSeqMs: 6, perKContextTokenMs: 5 }, overheadMs: 150, kvCapacityTokens: 200_000, chunkedPrefillSize: 512 };
const opts = JSON.parse(process.argv[2] ?? '{}');
const noiseMean = Number(process.argv[3] ?? 8);
const plan = buildWorkload('fit-probe', { singles: 40, minTokens: 32, maxTokens: 2000, singleOutputTokens: 4, bursts: '2,4,6', burstContextTokens: '256,2048', burstOutputTokens: 16, gapMs: 1200, burstGapMs: 2500, ...opts }, 1);
const { records } = simulatePlan(plan, { policy: { method: 'round_robin' }, profile: costModelFromSpec(HIDDEN), seed: 1 });
for (let seed = 0; seed < 4; seed++) {
  const rnd = seedrandom(String(seed));
  const obs = records.map((r) => { const n1 = 4 - noiseMean * Math.log(1 - rnd()); const n2 = -noiseMean * Math.log(1 - rnd());
    return { startMs: r.arrivalMs, ttftMs: r.ttftMs + n1, e2eMs: r.endMs - r.arrivalMs + n1 + n2, inputTokens: r.inputTokens, cachedTokens: r.cachedTokens, outputTokens: r.outputTokens, rank: r.rank }; });
  const fit = fitProfile(obs, { chunkedPrefillSize: 512, kvCapacityTokens: 200000 });
  const s = fit.spec; const e = (a: number, b: number) => `${(((a - b) / b) * 100).toFixed(1)}%`;
  console.log(`rows ${fit.prefill.rows} ov ${e(s.overheadMs!, 150)} floor ${e(s.prefill.floorMs, 100)} tok ${e(s.prefill.perTokenMs, 0.1)} attn ${e(s.prefill.attnMsPerMTokenPairs, 40)} cached ${e(s.prefill.perKCachedTokenMs!, 40)} | dec ${e(s.decode.floorMs,30)} ${e(s.decode.perSeqMs,6)} ${e(s.decode.perKContextTokenMs,5)}`);
}
