// `kvroute-sim fit` end to end: a mock worker (its own process) runs a cost profile this test
// keeps to itself; `validate --scenario fit-probe --record` drives it in real time and
// records what each request did; `fit` fits a profile to that record alone. Checked and
// printed: every hidden constant against its fitted value (within 10%; the decode terms,
// fitted from token gaps a busy host stretches, within 25%), and a fresh run
// (agentic sessions on a second worker running the same hidden profile, predicted by
// validate with the fitted profile) on TTFT p50 and p90 (within 10%).
import type { ChildProcess } from 'node:child_process';
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { PREFILL_QUANTILE } from '@kvroute/sim';
import { runValidate, type ValidateReport } from '@kvroute/validate';
import { afterAll, describe, expect, it } from 'vitest';
import { captureIo, simStep } from '../packages/sim/test/helpers/cli.ts';
import {
  againstHidden,
  CLOSED_PROBE,
  HIDDEN_PROFILE,
} from '../packages/sim/test/helpers/fit-probe.ts';
import { spawnMockWorker } from './helpers/mock-worker-process.ts';

const dir = mkdtempSync(join(tmpdir(), 'kvroute-fit-e2e-'));
const HIDDEN = { ...HIDDEN_PROFILE, description: 'the worker runs this; the fit never reads it' };
const HIDDEN_FILE = join(dir, 'hidden.json');
writeFileSync(HIDDEN_FILE, JSON.stringify(HIDDEN));
const TIME_SCALE = Number(process.env.KVROUTE_FIT_TIME_SCALE ?? 2);
const PROBE_RANKS = CLOSED_PROBE.ranks;
const FRESH_RANKS = 8;
const set = (o: Record<string, string | number>) =>
  Object.entries(o).flatMap(([k, v]) => ['--set', `${k}=${v}`]);

const io = () => captureIo(dir);

// The workers run in processes of their own, so the harness's work (streams, JSON) does not
// delay the worker's step timers, and the other way round.
const children: ChildProcess[] = [];
afterAll(() => {
  for (const c of children) c.kill();
});

function startWorker(ranks: number): Promise<string> {
  const flags = [
    '--profile-file',
    HIDDEN_FILE,
    '--time-scale',
    String(TIME_SCALE),
    '--dp-size',
    String(ranks),
    // Routing-key affinity: each probe client and each session keeps to one rank, placed on
    // the least busy one when it first appears (an idle one while there are enough).
    '--load-balance-method',
    'total_requests',
    '--policy-option',
    'affinity=routing_key',
  ];
  return spawnMockWorker(flags, children);
}

/**
 * A fresh worker process answers its first requests slowly (code compiled on first use, new
 * connections): in a recording, the first request of every probe client came 0.2-0.3 s (model
 * time) later than the model; the fit's low quantile leaves them out, but a fresh run's p90
 * would count them. Two waves of small streamed requests, one per rank each, then its cache
 * emptied, before anything is measured.
 */
async function warmUp(url: string, ranks: number): Promise<void> {
  for (let wave = 0; wave < 2; wave++) {
    await Promise.all(
      Array.from({ length: ranks }, async (_, i) => {
        const res = await fetch(`${url}/generate`, {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body: JSON.stringify({
            input_ids: Array.from(
              { length: 64 },
              (_, k) => 1 + ((wave * 977 + i * 131 + k) % 29_000),
            ),
            sampling_params: { max_new_tokens: 3 },
            stream: true,
          }),
        });
        await res.arrayBuffer();
        expect(res.status).toBe(200);
      }),
    );
  }
  const flushed = await fetch(`${url}/flush_cache`, { method: 'POST' });
  expect(flushed.status).toBe(200);
}

/**
 * The worker's own per-request time outside the model, as a client sees it: the HTTP round
 * trip of a request the model never runs (GET /health), at the same low quantile the fit
 * takes of TTFTs. The profile fitted from client-side timings carries it in overheadMs, as a
 * profile fitted on a real server carries its HTTP and tokenization time.
 */
async function httpBaselineMs(url: string, n: number): Promise<number> {
  const times: number[] = [];
  for (let i = 0; i < n; i++) {
    const t0 = performance.now();
    const res = await fetch(`${url}/health`);
    await res.arrayBuffer();
    times.push(performance.now() - t0);
  }
  times.sort((a, b) => a - b);
  return times[Math.floor(times.length * PREFILL_QUANTILE)]!;
}

describe('kvroute-sim fit against a mock worker', () => {
  it('fits a profile to a fit-probe recording and predicts a fresh run', async () => {
    const t0 = performance.now();
    const phase = (what: string) =>
      console.log(`${what}: ${((performance.now() - t0) / 1000).toFixed(1)} s into the test`);
    const [url, freshUrl] = await Promise.all([startWorker(PROBE_RANKS), startWorker(FRESH_RANKS)]);
    await Promise.all([warmUp(url, PROBE_RANKS), warmUp(freshUrl, FRESH_RANKS)]);
    phase('workers up and warm');
    const probe = io();
    const code = await runValidate(
      [
        '--target',
        url,
        '--scenario',
        'fit-probe',
        ...set(CLOSED_PROBE),
        '--policy',
        'total_requests',
        '--affinity',
        'routing_key',
        '--record',
        'probe.jsonl',
        '--json',
        'probe.json',
      ],
      probe.io,
    );
    expect(code, probe.out.stderr).toBe(0);
    phase('probe recorded');
    const baseline = (await httpBaselineMs(url, 40)) / TIME_SCALE;
    console.log(
      `worker HTTP round trip (model ms, quantile ${PREFILL_QUANTILE}): ${baseline.toFixed(1)}`,
    );

    await simStep(
      [
        'fit',
        '--input',
        'probe.jsonl',
        '--chunked-prefill-size',
        '512',
        '--kv-capacity',
        '200000',
        '--out',
        'fitted.json',
      ],
      dir,
    );
    const fitted = JSON.parse(readFileSync(join(dir, 'fitted.json'), 'utf8'));
    // What a client sees of the worker's per-request time: the model's plus its HTTP path.
    const pairs = againstHidden(fitted, HIDDEN.overheadMs + baseline);
    const off = pairs.map(([k, got, want]) => ({ k, got, want, err: (got - want) / want }));
    for (const o of off) {
      console.log(
        `fit ${o.k}: ${o.got} (hidden ${o.want.toFixed(3)}, ${(o.err * 100).toFixed(1)}%)`,
      );
    }

    // A fresh run the fit never saw: agentic sessions (shared tenant prefixes, multi-turn,
    // several sessions at once, so queueing and batching too), predicted with the fitted
    // profile and observed on a worker running the hidden one.
    const fresh = io();
    const freshCode = await runValidate(
      [
        '--target',
        freshUrl,
        '--scenario',
        'agentic',
        ...set({
          sessions: 12,
          sessionsPerS: 5,
          tenants: 3,
          prefixMinTokens: 800,
          prefixMaxTokens: 2500,
          turnsMin: 2,
          turnsMax: 4,
          userMinTokens: 32,
          userMaxTokens: 200,
          outputMinTokens: 4,
          outputMaxTokens: 16,
          toolMinTokens: 50,
          toolMaxTokens: 400,
          thinkMinMs: 100,
          thinkMaxMs: 300,
          ranks: FRESH_RANKS,
        }),
        '--policy',
        'total_requests',
        '--affinity',
        'routing_key',
        '--profile-file',
        join(dir, 'fitted.json'),
        '--json',
        '-',
      ],
      fresh.io,
    );
    expect(freshCode, fresh.out.stderr).toBe(0);
    phase('fresh run done');
    const report = JSON.parse(fresh.out.stdout) as ValidateReport;
    const rows = ['ttftP50', 'ttftP90'].map((key) => report.comparison.find((c) => c.key === key)!);
    for (const row of rows) {
      console.log(
        `fresh run ${row.key}: predicted ${row.predicted.toFixed(1)} ms, observed ${row.observed.toFixed(1)} ms (${(row.relError * 100).toFixed(1)}%)`,
      );
    }
    // The decode terms come from gaps between streamed tokens, which a busy host stretches in
    // proportion to how much streaming is going on: on a CI run sharing both cores with
    // another package's tests, perSeqMs came out 16% low and perKContextTokenMs 8% high
    // while every prefill term and both fresh-run predictions stayed within 2%. They are held
    // to 25% here; the fit itself is held to 10% on every term, decode included, under
    // deterministic long-tailed delays in packages/sim/test/fit.test.ts.
    for (const o of off) {
      const bound = o.k.startsWith('decode.') ? 0.25 : 0.1;
      expect(Math.abs(o.err), o.k).toBeLessThanOrEqual(bound);
    }
    for (const row of rows) expect(Math.abs(row.relError), row.key).toBeLessThanOrEqual(0.1);
  }, 120_000);
});
