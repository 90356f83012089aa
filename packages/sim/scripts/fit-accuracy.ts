// How far `kvroute-sim fit` lands from the constants that produced the timings when those
// timings carry the noise of a real client: the fit-probe plan is simulated with a known
// profile, every request's first-token and last-token times get a delay drawn from measured
// timing noise (a JSON file of {timeScale, ttft: [...], window: [...]}, model ms: how late each
// lone request's first token was against the exact model, and how much its decode window was
// off), and the fit is repeated on many such draws. Prints, per constant, the median and 90th
// percentile relative error and the share of draws within 10%.
//
// Run (pnpm --filter @kvroute/sim fit-accuracy -- ...):
//   fit-accuracy [--noise FILE] [--time-scale S] [--draws N] [--set key=value ...]
// --noise defaults to fit-noise.mock-worker.json beside this script: lateness measured in a
// recording of the probe against a mock worker at time scale 2 (test/fit.e2e.test.ts's
// setup) on this project's shared 2-core machine; --time-scale S rescales it to a worker run
// at time scale S (the same wall-clock lateness is 2/S times as many model ms).
//   fit-accuracy --measure RECORD.jsonl --out FILE
// writes such a file from a `validate --record` of the fit-probe against a worker running
// the hidden profile of test/helpers/fit-probe.ts (lone requests are those of the sessions named single-*, which the
// probe sends one at a time per rank).
import { readFileSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import seedrandom from 'seedrandom';
import { type CostProfileSpec, costModelFromSpec } from '../src/cost/cost-model.ts';
import { fitProfile, prefillTerms } from '../src/fit/fit.ts';
import type { ObservedRequest } from '../src/fit/observations.ts';
import { simulatePlan } from '../src/simulate.ts';
import { buildWorkload } from '../src/workloads/registry.ts';
import { HIDDEN_PROFILE as HIDDEN } from '../test/helpers/fit-probe.ts';

const { values } = parseArgs({
  args: process.argv.slice(2).filter((a) => a !== '--'),
  options: {
    noise: { type: 'string' },
    'time-scale': { type: 'string' },
    draws: { type: 'string' },
    set: { type: 'string', multiple: true },
    ranks: { type: 'string' },
    measure: { type: 'string' },
    out: { type: 'string' },
  },
});

if (values.measure !== undefined) {
  if (values.out === undefined) throw new Error('--measure needs --out FILE');
  const ttft: number[] = [];
  const window: number[] = [];
  let timeScale = 1;
  for (const line of readFileSync(values.measure, 'utf8').split('\n')) {
    if (line.trim() === '') continue;
    const o = JSON.parse(line);
    if (o.format !== undefined) timeScale = o.timeScale ?? 1;
    if (o.type !== 'request' || !String(o.sessionKey).startsWith('single-')) continue;
    const ob = o.observed;
    if (ob.ok !== true) continue;
    const [chunks, tokens, pairs, cachedK] = prefillTerms(
      ob.promptTokens,
      ob.cachedTokens,
      HIDDEN.chunkedPrefillSize,
    );
    const p = HIDDEN.prefill;
    const exact =
      HIDDEN.overheadMs +
      p.floorMs * chunks! +
      p.perTokenMs * tokens! +
      p.attnMsPerMTokenPairs * pairs! +
      p.perKCachedTokenMs! * cachedK!;
    ttft.push(Number((ob.ttftMs - exact).toFixed(3)));
    // Alone on its rank, the request decodes at batch 1 over its own growing context.
    const d = HIDDEN.decode;
    let steps = 0;
    for (let j = 0; j < ob.outputTokens - 1; j++) {
      steps += d.floorMs + d.perSeqMs + (d.perKContextTokenMs * (ob.promptTokens + 1 + j)) / 1000;
    }
    window.push(Number((ob.e2eMs - ob.ttftMs - steps).toFixed(3)));
  }
  writeFileSync(values.out, `${JSON.stringify({ timeScale, ttft, window })}\n`);
  const sorted = [...ttft].sort((a, b) => a - b);
  const at = (p: number) => sorted[Math.floor(p * (sorted.length - 1))]!.toFixed(1);
  console.log(
    `${ttft.length} lone requests at time scale ${timeScale}: first token late by (model ms) min ${at(0)}, p10 ${at(0.1)}, median ${at(0.5)}, p90 ${at(0.9)}, max ${at(1)}`,
  );
  process.exit(0);
}

const noiseFile =
  values.noise ?? join(dirname(fileURLToPath(import.meta.url)), 'fit-noise.mock-worker.json');
const noise = JSON.parse(readFileSync(noiseFile, 'utf8')) as {
  timeScale: number;
  ttft: number[];
  window: number[];
};
// Noise is wall-clock lateness: in model ms it shrinks as the time scale grows.
const scale = noise.timeScale / Number(values['time-scale'] ?? noise.timeScale);
const draws = Number(values.draws ?? 100);
const options: Record<string, string> = {};
for (const kv of values.set ?? []) {
  const i = kv.indexOf('=');
  options[kv.slice(0, i)] = kv.slice(i + 1);
}
const plan = buildWorkload('fit-probe', options, 1);
const ranks = Number(values.ranks ?? plan.ranks);
const { records } = simulatePlan(plan, {
  policy: { method: 'total_requests', affinity: 'routing_key' },
  profile: costModelFromSpec(HIDDEN),
  seed: 1,
  ranks,
});
const span = Math.max(...records.map((r) => r.endMs));
console.log(
  `${records.length} requests, ${ranks} ranks, ${(span / 1000).toFixed(1)} s of model time`,
);

const truth: [string, (s: CostProfileSpec) => number, number][] = [
  ['overheadMs', (s) => s.overheadMs ?? 0, HIDDEN.overheadMs],
  ['prefill.floorMs', (s) => s.prefill.floorMs, HIDDEN.prefill.floorMs],
  ['prefill.perTokenMs', (s) => s.prefill.perTokenMs, HIDDEN.prefill.perTokenMs],
  ['prefill.attn', (s) => s.prefill.attnMsPerMTokenPairs, HIDDEN.prefill.attnMsPerMTokenPairs],
  ['prefill.cachedRead', (s) => s.prefill.perKCachedTokenMs ?? 0, HIDDEN.prefill.perKCachedTokenMs],
  ['decode.floorMs', (s) => s.decode.floorMs, HIDDEN.decode.floorMs],
  ['decode.perSeqMs', (s) => s.decode.perSeqMs, HIDDEN.decode.perSeqMs],
  ['decode.perKContext', (s) => s.decode.perKContextTokenMs, HIDDEN.decode.perKContextTokenMs],
];
const rng = seedrandom('fit-accuracy');
const pick = (xs: number[]) => xs[Math.floor(rng() * xs.length)]! * scale;
const errs: number[][] = truth.map(() => []);
let allWithin = 0;
for (let d = 0; d < draws; d++) {
  const obs: ObservedRequest[] = records.map((r) => {
    const first = pick(noise.ttft);
    return {
      startMs: r.arrivalMs,
      ttftMs: r.ttftMs + first,
      e2eMs: r.endMs - r.arrivalMs + first + pick(noise.window),
      inputTokens: r.inputTokens,
      cachedTokens: r.cachedTokens,
      outputTokens: r.outputTokens,
      rank: r.rank,
    };
  });
  const fit = fitProfile(obs, { chunkedPrefillSize: 512, kvCapacityTokens: 200_000 });
  let ok = true;
  truth.forEach(([, get, want], i) => {
    const e = (get(fit.spec) - want) / want;
    errs[i]!.push(e);
    if (Math.abs(e) > 0.1) ok = false;
  });
  if (ok) allWithin++;
}
const q = (xs: number[], p: number) =>
  [...xs].sort((a, b) => a - b)[Math.floor(p * (xs.length - 1))]!;
const pct = (v: number) => `${(v * 100).toFixed(1)}%`.padStart(7);
console.log('constant              median err   |err| p90   within 10%');
truth.forEach(([k], i) => {
  const e = errs[i]!;
  const within = e.filter((x) => Math.abs(x) <= 0.1).length / e.length;
  console.log(
    `${k.padEnd(22)}${pct(q(e, 0.5))}     ${pct(q(e.map(Math.abs), 0.9))}     ${pct(within)}`,
  );
});
console.log(`draws with every constant within 10%: ${allWithin}/${draws}`);
