// Tune on your own traffic, the whole loop on mock workers that run a cost profile and a KV
// capacity this test keeps to itself: the router records the traffic it routes under a
// deliberately poor setting (round_robin: every tenant's prefix on every worker), `fit` fits a
// profile to the recording, `sweep` replays the recording under cache_aware settings with the
// fitted profile and picks one, the admin API applies it, and the same traffic is sent again.
// Checked: every fitted constant within 10% of the hidden one, and the sweep's prediction for
// the chosen setting against what the router observed after the switch (hit rate within 2 pt,
// TTFT p50 within 10%, p99 within 15%). Opt-in (KVROUTE_LOOP_E2E=1): it runs about three
// minutes of scaled real time, and its latencies are wall-clock on whatever machine runs it.
import type { ChildProcess } from 'node:child_process';
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { buildRouter, resolveConfig } from '@kvroute/router';
import { type OutcomeRecord, readTraceFile, summarizeOutcomes } from '@kvroute/sim';
import { runValidate } from '@kvroute/validate';
import { afterAll, describe, expect, it } from 'vitest';
import { captureIo, simStep } from '../packages/sim/test/helpers/cli.ts';
import { againstHidden, HIDDEN_PROFILE } from '../packages/sim/test/helpers/fit-probe.ts';
import { spawnMockWorker } from './helpers/mock-worker-process.ts';

const dir = mkdtempSync(join(tmpdir(), 'kvroute-tune-loop-'));
const HIDDEN = {
  ...HIDDEN_PROFILE,
  description: 'the workers run this; nothing the loop reads contains it',
};
/** Per worker: small enough that four tenants' prefixes on every worker evict each other. */
const HIDDEN_KV = 24_000;
const HIDDEN_FILE = join(dir, 'hidden.json');
writeFileSync(HIDDEN_FILE, JSON.stringify(HIDDEN));
const TIME_SCALE = Number(process.env.KVROUTE_LOOP_TIME_SCALE ?? 1);
const WORKERS = 4;
const TOKEN = 'loop-admin-token';

const children: ChildProcess[] = [];
let app: ReturnType<typeof buildRouter> | undefined;
afterAll(async () => {
  if (app) {
    app.server.closeAllConnections();
    await app.close();
  }
  for (const c of children) c.kill();
});

function startWorker(): Promise<string> {
  const flags = ['--profile-file', HIDDEN_FILE, '--kv-capacity', String(HIDDEN_KV)];
  return spawnMockWorker([...flags, '--time-scale', String(TIME_SCALE)], children);
}

const io = () => captureIo(dir);

const set = (o: Record<string, string | number>) =>
  Object.entries(o).flatMap(([k, v]) => ['--set', `${k}=${v}`]);

async function admin(url: string, path: string, body: unknown): Promise<unknown> {
  const res = await fetch(`${url}${path}`, {
    method: 'POST',
    headers: { authorization: `Bearer ${TOKEN}`, 'content-type': 'application/json' },
    body: JSON.stringify(body),
  });
  const text = await res.text();
  expect(res.status, `${path}: ${text}`).toBe(200);
  return JSON.parse(text);
}

/** Sends a scenario through the router in (scaled) real time. */
async function drive(url: string, scenario: string, options: Record<string, string | number>) {
  const run = io();
  const code = await runValidate(
    [
      '--target',
      url,
      '--scenario',
      scenario,
      ...set(options),
      '--time-scale',
      String(TIME_SCALE),
      '--ranks',
      String(WORKERS),
      '--policy',
      'round_robin',
      '--json',
      `${scenario}-${Date.now()}.json`,
    ],
    run.io,
  );
  expect(code, run.out.stderr).toBe(0);
}

/** Agentic traffic: four tenants' tool prefixes, multi-turn sessions, short replies. */
const AGENTIC = {
  sessions: 28,
  sessionsPerS: 3,
  tenants: 4,
  prefixMinTokens: 2500,
  prefixMaxTokens: 5000,
  turnsMin: 3,
  turnsMax: 5,
  userMinTokens: 32,
  userMaxTokens: 128,
  outputMinTokens: 8,
  outputMaxTokens: 24,
  toolMinTokens: 100,
  toolMaxTokens: 600,
  thinkMinMs: 200,
  thinkMaxMs: 800,
  ranks: WORKERS,
};

/** What the router observed in a recorded trace: the comparison module's summary. */
function observedSummary(file: string) {
  const t = readTraceFile(file);
  const recs: OutcomeRecord[] = t.lines.map((l, id) => ({
    id,
    ok: (l.observed?.status ?? 200) < 300,
    startMs: l.timestamp,
    endMs: l.timestamp + (l.observed?.e2eMs ?? 0),
    promptTokens: l.inputLength,
    cachedTokens: l.observed?.cachedTokens ?? 0,
    ...(l.observed?.ttftMs !== undefined ? { ttftMs: l.observed.ttftMs } : {}),
  }));
  return summarizeOutcomes(recs);
}

const pct = (v: number) => `${(v * 100).toFixed(1)}%`;

// Opt-in (KVROUTE_LOOP_E2E=1): about 3-4 minutes of real-time traffic at time scale 1 (about 95 s
// at KVROUTE_LOOP_TIME_SCALE=0.4, where the prefill constants no longer fit within 10% on this
// machine). Asserted: the loop runs through, every request is recorded again after the switch,
// the switch raises the hit rate the router observes, and that hit rate is within 2 points of
// the sweep's prediction. Printed, not asserted (timings of real-time traffic on a shared
// machine: its load moves them): the fitted constants against the hidden ones, and the TTFT
// p50 / p99 after the switch against the prediction (targets 10% / 15%).
describe.skipIf(process.env.KVROUTE_LOOP_E2E !== '1')(
  'tune on your own traffic, end to end',
  () => {
    it('records, fits, sweeps, applies, and the router then sees what the sweep predicted', async () => {
      const workers = await Promise.all(Array.from({ length: WORKERS }, () => startWorker()));
      app = buildRouter(
        resolveConfig([
          '--worker-urls',
          ...workers,
          '--load-balance-method',
          'round_robin',
          '--admin-token',
          TOKEN,
          '--health-check-interval-ms',
          '0',
        ]),
      );
      await app.listen({ host: '127.0.0.1', port: 0 });
      const url = `http://127.0.0.1:${(app.server.address() as AddressInfo).port}`;
      const info = (await (await fetch(`${workers[0]}/get_server_info`)).json()) as {
        max_total_num_tokens: number;
        chunked_prefill_size: number;
      };

      // 1. Record. Quiet moments first (lone requests of varied sizes and cache hits: what
      // tells the prefill terms apart), then the agentic traffic under round_robin.
      await admin(url, '/trace_recording', { action: 'start', path: join(dir, 'probe.jsonl') });
      await drive(url, 'fit-probe', {
        // Sized with `pnpm --filter @kvroute/sim fit-accuracy` under this machine's measured
        // client lateness: 112 lone requests up to 6,000 tokens separate the attention term
        // from the per-token one, one-chunk follow-ups (16-512 tokens on a cached prompt)
        // separate the cached-read term from attention, and 48-token burst replies give the
        // decode windows enough steps; 56 of 60 simulated draws had every constant within
        // 10% (the earlier 48 singles up to 3,000 tokens: 10 of 40).
        singles: 112,
        minTokens: 32,
        maxTokens: 6000,
        suffixTokens: 16,
        suffixMaxTokens: 512,
        singleOutputTokens: 10,
        bursts: '2,4,8',
        burstContextTokens: '256,2048',
        burstOutputTokens: 48,
        gapMs: 2200 / WORKERS,
        burstGapMs: 2500,
        ranks: WORKERS,
        // Under round_robin each pair's follow-up comes WORKERS requests after its cold prompt,
        // so it lands on the worker that holds the prompt.
        routingKeys: 'true',
      });
      await admin(url, '/trace_recording', { action: 'start', path: join(dir, 'poor.jsonl') });
      await drive(url, 'agentic', AGENTIC);
      await admin(url, '/trace_recording', { action: 'stop' });

      // 2. Fit: the KV capacity and chunk size as the workers report them, everything else
      // from the recordings.
      await simStep(
        [
          'fit',
          '--trace',
          'probe.jsonl',
          '--trace',
          'poor.jsonl',
          '--chunked-prefill-size',
          String(info.chunked_prefill_size),
          '--kv-capacity',
          String(info.max_total_num_tokens),
          '--out',
          'fitted.json',
        ],
        dir,
      );
      const fitted = JSON.parse(readFileSync(join(dir, 'fitted.json'), 'utf8'));
      const pairs = againstHidden(fitted);
      // The recording's times are wall time: model time times the workers' time scale.
      const off = pairs.map(([k, wall, want]) => {
        const got = wall / TIME_SCALE;
        return { k, got, want, err: (got - want) / want };
      });
      for (const o of off) {
        console.log(`loop fit ${o.k}: ${o.got} (hidden ${o.want}, ${(o.err * 100).toFixed(1)}%)`);
      }

      // How well the fitted profile predicts the recorded setting itself.
      await simStep(
        ['replay', '--trace', 'poor.jsonl', '--observed', '--profile-file', 'fitted.json'],
        dir,
      );

      // 3. Sweep cache_aware on the recorded traffic with the fitted profile. Its sessions
      // replay closed loop, as the agents sent them. cache_aware places a prompt by what the
      // ranks hold and how loaded they are, which the replay reproduces; prefix_match and
      // consistent_hash place it by a hash of its tokens, and the replay's tokens are
      // synthetic, so which prefixes collide on one rank is not the live draw.
      await simStep(
        [
          'sweep',
          '--trace',
          'poor.jsonl',
          '--profile-file',
          'fitted.json',
          '--policy',
          'cache_aware',
          '--window',
          '64,256',
          '--epsilon',
          '0.1,0.5',
          '--objective',
          'ttft-p99',
          '--current',
          'round_robin',
          '--jobs',
          '1',
          '--json',
          'sweep.json',
        ],
        dir,
      );
      const report = JSON.parse(readFileSync(join(dir, 'sweep.json'), 'utf8'));
      const best = report.best as { method: string; options: Record<string, number | string> };
      const same = (a: Record<string, unknown>, b: Record<string, unknown>) =>
        JSON.stringify(Object.entries(a).sort()) === JSON.stringify(Object.entries(b).sort());
      const cell = (
        report.grid as { method: string; options: Record<string, unknown>; result: unknown }[]
      ).find((c) => c.method === best.method && same(c.options, best.options))!;
      const predicted = cell.result as {
        hitRate: number;
        ttftMs: { p50: number; p99: number };
      };
      if (report.confidence) console.log(`sweep ${report.confidence.text}`);

      // 4. Apply it through the admin API, 5. send the same traffic again (caches flushed, so
      // it starts where the recording did).
      await admin(url, '/policy', { method: best.method, options: best.options });
      for (const w of workers) {
        const r = await fetch(`${w}/flush_cache`, { method: 'POST' });
        expect(r.status).toBe(200);
      }
      await admin(url, '/trace_recording', { action: 'start', path: join(dir, 'after.jsonl') });
      await drive(url, 'agentic', AGENTIC);
      await admin(url, '/trace_recording', { action: 'stop' });
      const before = observedSummary(join(dir, 'poor.jsonl'));
      const after = observedSummary(join(dir, 'after.jsonl'));
      const rows = [
        ['TTFT p50', predicted.ttftMs.p50, after.ttftMs.p50],
        ['TTFT p99', predicted.ttftMs.p99, after.ttftMs.p99],
      ] as const;
      console.log(
        `before (round_robin): hit rate ${pct(before.hitRate)}, TTFT p50 ${before.ttftMs.p50.toFixed(0)} ms, p99 ${before.ttftMs.p99.toFixed(0)} ms`,
      );
      console.log(
        `after (${best.method} ${JSON.stringify(best.options)}): hit rate predicted ${pct(predicted.hitRate)}, observed ${pct(after.hitRate)} (${((predicted.hitRate - after.hitRate) * 100).toFixed(1)} pt)`,
      );
      for (const [k, p, o] of rows) {
        console.log(
          `after ${k}: predicted ${p.toFixed(0)} ms, observed ${o.toFixed(0)} ms (${(((p - o) / o) * 100).toFixed(1)}%)`,
        );
      }
      expect(after.requests).toBe(before.requests);
      // The switch paid off, as predicted.
      expect(after.hitRate).toBeGreaterThan(before.hitRate);
      // And the router saw the hit rate and the latencies the sweep predicted.
      expect(Math.abs(predicted.hitRate - after.hitRate) * 100).toBeLessThanOrEqual(2);
      const [p50, p99] = rows.map(([, p, o]) => Math.abs((p - o) / o));
      expect(p50, 'TTFT p50 prediction error').toBeLessThanOrEqual(0.1);
      expect(p99, 'TTFT p99 prediction error').toBeLessThanOrEqual(0.15);
      // The fit recovered the hidden profile (checked last, so a miss still prints the rest).
      for (const o of off) expect(Math.abs(o.err), `fitted ${o.k}`).toBeLessThanOrEqual(0.1);
    }, 600_000);
  },
);
