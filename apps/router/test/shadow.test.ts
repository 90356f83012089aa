// The live cache model (--shadow-profile): on mock workers running the same profile, its
// predicted cached tokens are the ones the workers report, request by request; on workers
// whose real KV pool is smaller than the profile says, the drift gauge shows it; promtool
// accepts the metrics and the README's example alert rule.
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startMockWorker } from '@kvroute/mock-worker';
import type { FastifyInstance } from 'fastify';
import { request } from 'undici';
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { resolveConfig } from '../src/config.ts';
import { buildRouter } from '../src/router.ts';

const work = mkdtempSync(join(tmpdir(), 'kvroute-shadow-'));
afterAll(() => rmSync(work, { recursive: true, force: true }));
const cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  while (cleanups.length) await cleanups.pop()!();
});

async function mockWorkers(n: number, kvCapacity?: number): Promise<string[]> {
  const ws = await Promise.all(
    Array.from({ length: n }, () =>
      startMockWorker({
        host: '127.0.0.1',
        port: 0,
        timeScale: 0,
        ...(kvCapacity ? { kvCapacity } : {}),
      }),
    ),
  );
  for (const w of ws) cleanups.push(() => w.close());
  return ws.map((w) => w.url);
}

async function router(argv: string[]): Promise<{ app: FastifyInstance; url: string }> {
  const app = buildRouter(resolveConfig(['--health-check-interval-ms', '0', ...argv]));
  await app.listen({ host: '127.0.0.1', port: 0 });
  cleanups.push(async () => {
    app.server.closeAllConnections();
    await app.close();
  });
  return { app, url: `http://127.0.0.1:${(app.server.address() as AddressInfo).port}` };
}

async function chat(url: string, messages: { role: string; content: string }[]) {
  const res = await request(`${url}/v1/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'kvroute-mock', messages, max_tokens: 3 }),
  });
  const body = (await res.body.json()) as {
    usage: { prompt_tokens: number; prompt_tokens_details?: { cached_tokens?: number } };
  };
  return { rank: Number(res.headers['x-kvroute-rank']), usage: body.usage };
}

async function scrape(app: FastifyInstance): Promise<string> {
  return (await app.inject({ method: 'GET', url: '/metrics' })).body;
}

function sample(text: string, name: string, rank: number): number {
  const m = new RegExp(`^${name}\\{rank="${rank}"\\} (\\S+)$`, 'm').exec(text);
  return m ? Number(m[1]) : 0;
}

/** Agent sessions: each turn re-sends the whole conversation, plus a little more. */
function sessionTurn(session: number, turn: number): { role: string; content: string }[] {
  const system = `Agent ${session % 2} system prompt. ${'Follow the tools contract. '.repeat(60)}`;
  const messages = [{ role: 'system', content: system }];
  for (let t = 0; t <= turn; t++) {
    messages.push({
      role: 'user',
      content: `Session ${session} step ${t}: ${'do it. '.repeat(20 + t)}`,
    });
    if (t < turn) messages.push({ role: 'assistant', content: `Done step ${t} of ${session}.` });
  }
  return messages;
}

describe('live predicted vs observed cached tokens', () => {
  it('predicts, request by request, the cached tokens mock workers with the same profile report', async () => {
    const urls = await mockWorkers(2);
    const { app, url } = await router([
      '--worker-urls',
      ...urls,
      '--load-balance-method',
      'round_robin',
      '--shadow-profile',
      'h200-llama-3.1-8b',
    ]);
    let before = await scrape(app);
    let hits = 0;
    for (let turn = 0; turn < 4; turn++) {
      for (let session = 0; session < 3; session++) {
        const { rank, usage } = await chat(url, sessionTurn(session, turn));
        const after = await scrape(app);
        const predicted =
          sample(after, 'kvroute_shadow_predicted_cached_tokens_total', rank) -
          sample(before, 'kvroute_shadow_predicted_cached_tokens_total', rank);
        const observed = usage.prompt_tokens_details?.cached_tokens;
        expect(observed).toBeDefined();
        expect(predicted, `session ${session} turn ${turn} on rank ${rank}`).toBe(observed);
        expect(
          sample(after, 'kvroute_shadow_observed_cached_tokens_total', rank) -
            sample(before, 'kvroute_shadow_observed_cached_tokens_total', rank),
        ).toBe(observed);
        if (observed! > 0) hits++;
        before = after;
      }
    }
    // The run exercised both hits (a rank that had the prefix) and misses.
    expect(hits).toBeGreaterThan(3);
    expect(hits).toBeLessThan(12);
    for (const rank of [0, 1]) {
      expect(sample(before, 'kvroute_shadow_hit_rate_drift', rank)).toBe(0);
      expect(sample(before, 'kvroute_shadow_window_requests', rank)).toBe(6);
      expect(sample(before, 'kvroute_shadow_predicted_hit_rate', rank)).toBeGreaterThan(0);
    }
  });

  it('shows drift when the workers hold less KV than the profile says, and promtool accepts the metrics', async () => {
    // Each worker's pool holds about one conversation; the profile's holds all of them.
    const urls = await mockWorkers(1, 800);
    const { app, url } = await router([
      '--worker-urls',
      ...urls,
      '--shadow-profile',
      'h200-llama-3.1-8b',
      '--shadow-window',
      '50',
    ]);
    for (let turn = 0; turn < 3; turn++) {
      for (let session = 0; session < 4; session++) await chat(url, sessionTurn(session, turn));
    }
    const text = await scrape(app);
    const drift = sample(text, 'kvroute_shadow_hit_rate_drift', 0);
    expect(drift).toBeGreaterThan(0.2);
    expect(drift).toBeCloseTo(
      sample(text, 'kvroute_shadow_predicted_hit_rate', 0) -
        sample(text, 'kvroute_shadow_observed_hit_rate', 0),
      9,
    );
    expect(sample(text, 'kvroute_shadow_window_requests', 0)).toBe(12);
    expect(sample(text, 'kvroute_shadow_compared_requests_total', 0)).toBe(12);

    const lint = spawnSync('promtool', ['check', 'metrics'], { input: text, encoding: 'utf8' });
    if (lint.error)
      throw new Error(`promtool could not run (Debian package prometheus): ${lint.error.message}`);
    const shadowProblems = (lint.stdout + lint.stderr)
      .split('\n')
      .filter((l) => l.includes('kvroute_shadow') || l.includes('kvroute_trace'));
    expect(shadowProblems).toEqual([]);

    // The README's example alert rule is one promtool accepts.
    const readme = readFileSync(new URL('../README.md', import.meta.url), 'utf8');
    const block = /<!-- shadow-alert-rule -->\s*```yaml\n([\s\S]*?)```/.exec(readme);
    expect(block, 'README example alert rule block').not.toBeNull();
    const rules = join(work, 'shadow-rules.yaml');
    writeFileSync(rules, block![1]!);
    const check = spawnSync('promtool', ['check', 'rules', rules], { encoding: 'utf8' });
    expect(check.status, check.stdout + check.stderr).toBe(0);
  });

  it('names a profile it cannot load', () => {
    expect(() =>
      buildRouter(
        resolveConfig(['--worker-urls', 'http://w:1', '--shadow-profile', '/no/such/profile.json']),
      ),
    ).toThrow(/--shadow-profile \/no\/such\/profile.json: .*cannot read/);
    expect(() =>
      buildRouter(resolveConfig(['--worker-urls', 'http://w:1', '--shadow-profile', 'no-such'])),
    ).toThrow(/--shadow-profile no-such/);
  });
});
