// Hot reload of the policy: POST /policy (admin token) switches a group's method and options
// under load without losing a request, every dispatch ticket closing on the dispatcher that
// began it; a bad switch is refused with a clear error and the old policy keeps running; the
// switch is logged, counted and emitted as a router event. SIGHUP re-reads the YAML file in
// a real process.
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import type { ServerResponse } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Dispatcher } from '@kvroute/policy';
import type { FastifyInstance } from 'fastify';
import { afterEach, describe, expect, it } from 'vitest';
import { resolveConfig } from '../src/config.ts';
import type { PolicySwitchEvent } from '../src/model-groups.ts';
import { buildRouter } from '../src/router.ts';
import { completionBody, type FakeWorker, startFakeWorker } from './helpers/fake-worker.ts';
import { spawnRouterSource } from './helpers/router.ts';

const cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  while (cleanups.length) await cleanups.pop()!();
});

const TOKEN = 'switch-token';
const auth = { authorization: `Bearer ${TOKEN}` };

async function workers(n: number, name = 'fake-model', delayMs = 0): Promise<FakeWorker[]> {
  const ws = await Promise.all(Array.from({ length: n }, () => startFakeWorker({ name })));
  for (const w of ws) {
    cleanups.push(() => w.close());
    if (delayMs > 0) {
      // Answers held a while, so requests are in flight when the policy switches.
      w.handlers.set('POST /v1/chat/completions', (_q, res: ServerResponse, body) => {
        setTimeout(() => {
          const text = JSON.stringify(completionBody(body, 0));
          res.writeHead(200, { 'content-type': 'application/json' });
          res.end(text);
        }, delayMs);
      });
    }
  }
  return ws;
}

async function router(argv: string[]): Promise<FastifyInstance> {
  const app = buildRouter(
    resolveConfig(['--health-check-interval-ms', '0', '--admin-token', TOKEN, ...argv]),
  );
  cleanups.push(() => app.close());
  await app.ready();
  return app;
}

/** A router with groups llama and qwen, two workers each, under these methods. */
async function twoGroups(llamaMethod: string, qwenMethod: string) {
  const llama = await workers(2, 'llama');
  const qwen = await workers(2, 'qwen');
  const app = await router([
    '--model-group',
    `llama=${llama.map((w) => w.url).join(',')};method=${llamaMethod}`,
    `qwen=${qwen.map((w) => w.url).join(',')};method=${qwenMethod}`,
  ]);
  return { app, llama, qwen };
}

const chat = (content: string, model?: string) => ({
  ...(model ? { model } : {}),
  messages: [{ role: 'user', content }],
  max_tokens: 4,
});

function post(app: FastifyInstance, url: string, payload: unknown, headers = {}) {
  return app.inject({
    method: 'POST',
    url,
    payload: JSON.stringify(payload),
    headers: { 'content-type': 'application/json', ...headers },
  });
}

/** Counts each dispatcher's tickets opened and closed, by wrapping begin() in place. */
function countTickets(d: Dispatcher): { opened: number; closed: number } {
  const c = { opened: 0, closed: 0 };
  const begin = d.begin.bind(d);
  (d as { begin: Dispatcher['begin'] }).begin = (...args) => {
    const ticket = begin(...args);
    c.opened++;
    const done = ticket.done.bind(ticket);
    ticket.done = (outcome) => {
      const first = done(outcome);
      if (first) c.closed++;
      return first;
    };
    return ticket;
  };
  return c;
}

describe('POST /policy', () => {
  it('switches method and options under bounded concurrent load without losing a request', async () => {
    await workers(4, 'fake-model', 15)
      .then((ws) =>
        router(['--worker-urls', ...ws.map((w) => w.url), '--load-balance-method', 'cache_aware']),
      )
      .then(async (app) => {
        const group = app.kvroute.policy.defaultGroup;
        const counts = [countTickets(group.dispatcher)];
        const events: PolicySwitchEvent[] = [];
        const inFlightAtSwitch: number[] = [];
        app.kvroute.policy.events.on('policy_switch', (e) => {
          // Synchronously, before any request reaches the new dispatcher.
          counts.push(countTickets(group.dispatcher));
          events.push(e);
          inFlightAtSwitch.push(
            app.kvroute.table.tracker.ranks.reduce((n, r) => n + r.inFlightRequests, 0),
          );
        });
        const plan = [
          { method: 'round_robin' },
          { method: 'prefix_match', options: { window: 8, 'prefix-length': 64 } },
          { method: 'total_requests' },
          { method: 'cache_aware', options: { window: 16, epsilon: 0.5 } },
        ];
        const total = 160;
        const concurrency = 16;
        let next = 0;
        let done = 0;
        const statuses: number[] = [];
        const switches: Promise<unknown>[] = [];
        const client = async (): Promise<void> => {
          while (next < total) {
            const i = next++;
            const r = await post(app, '/v1/chat/completions', chat(`agent ${i % 7} turn ${i}`));
            statuses.push(r.statusCode);
            done++;
            // A switch every 30 completions, while the other clients' requests are in flight.
            if (done % 30 === 0 && done / 30 <= plan.length) {
              const body = plan[done / 30 - 1];
              switches.push(
                post(app, '/policy', body, auth).then((s) => {
                  expect(s.statusCode, s.body).toBe(200);
                  return s.json();
                }),
              );
            }
          }
        };
        await Promise.all(Array.from({ length: concurrency }, client));
        const answers = (await Promise.all(switches)) as { method: string; options: object }[];
        expect(statuses).toHaveLength(total);
        expect(statuses.filter((s) => s !== 200)).toEqual([]);
        expect(answers.map((a) => a.method)).toEqual(plan.map((p) => p.method));
        expect(answers[1]!.options).toEqual({ window: 8, prefixLength: 64 });
        expect(events).toHaveLength(plan.length);
        expect(events[0]).toMatchObject({
          group: '',
          source: 'admin',
          from: { method: 'cache_aware' },
        });
        // Switches happened with requests in flight, and every ticket closed on its own dispatcher.
        expect(Math.max(...inFlightAtSwitch)).toBeGreaterThan(0);
        for (const c of counts) expect(c.closed).toBe(c.opened);
        expect(counts.reduce((n, c) => n + c.opened, 0)).toBe(total);
        expect(counts.filter((c) => c.opened > 0).length).toBeGreaterThan(2);
        expect(app.kvroute.table.tracker.ranks.every((r) => r.inFlightRequests === 0)).toBe(true);
        expect(app.kvroute.dispatcher.method).toBe('cache_aware');
        const metrics = (await app.inject('/metrics')).body;
        expect(metrics).toContain(
          'kvroute_router_policy_switches_total{group="default",method="round_robin"} 1',
        );
        expect(metrics).toContain(
          'kvroute_router_policy_switches_total{group="default",method="cache_aware"} 1',
        );
        expect(metrics).toContain(
          'kvroute_router_policy_info{group="default",method="cache_aware"} 1',
        );
      });
  });

  it('refuses a bad switch with a clear error and keeps the running policy', async () => {
    const ws = await workers(2);
    const app = await router([
      '--worker-urls',
      ...ws.map((w) => w.url),
      '--load-balance-method',
      'prefix_match',
      '--window',
      '32',
    ]);
    const before = app.kvroute.dispatcher;
    const cases: [unknown, RegExp][] = [
      [{ method: 'nope' }, /unknown method "nope"; valid methods: /],
      [{ method: 'round_robin', options: { window: 8 } }, /round_robin has no option 'window'/],
      [{ options: { window: -3 } }, /options.window: must be >= 1/],
      [{ options: { port: 3 } }, /options.port: not a method option/],
      [{ options: { bogus: 1 } }, /options.bogus: not a method option/],
      [{ method: 'prefix_match', extra: 1 }, /unknown field 'extra'/],
      [{ model: 'other' }, /no worker group serves the model "other"/],
      [{ options: 'window=8' }, /'options' must be an object/],
    ];
    for (const [body, message] of cases) {
      const r = await post(app, '/policy', body, auth);
      expect(r.statusCode, JSON.stringify(body)).toBe(400);
      expect(r.json().error.code).toBe('invalid_policy');
      expect(r.json().error.message).toMatch(message);
    }
    expect((await post(app, '/policy', { method: 'round_robin' })).statusCode).toBe(401);
    expect(
      (await post(app, '/policy', { method: 'round_robin' }, { authorization: 'Bearer x' }))
        .statusCode,
    ).toBe(403);
    expect(app.kvroute.dispatcher).toBe(before);
    const r = await post(app, '/v1/chat/completions', chat('still routed'));
    expect(r.headers['x-kvroute-reason']).toMatch(/^prefix-hash/);
    const metrics = (await app.inject('/metrics')).body;
    expect(metrics).toContain(
      `kvroute_router_policy_switch_refused_total{source="admin"} ${cases.length}`,
    );
    // Options omitted: kept; method omitted: kept.
    const ok = await post(app, '/policy', { options: { window: 64 } }, auth);
    expect(ok.json()).toMatchObject({ method: 'prefix_match', options: { window: 64 } });
    const get = await app.inject({ method: 'GET', url: '/policy', headers: auth });
    expect(get.json()).toEqual({
      models: [{ model: null, default: true, method: 'prefix_match', options: { window: 64 } }],
    });
  });

  it('switches one model group and leaves the others as they were', async () => {
    const { app } = await twoGroups('round_robin', 'round_robin');
    const r = await post(app, '/policy', { model: 'qwen', method: 'total_requests' }, auth);
    expect(r.statusCode).toBe(200);
    expect(r.json()).toMatchObject({ model: 'qwen', method: 'total_requests' });
    const reason = async (model: string) =>
      (await post(app, '/v1/chat/completions', chat('x', model))).headers['x-kvroute-reason'];
    expect(await reason('qwen')).toBe('least-requests');
    expect(await reason('llama')).toBe('round-robin');
    const metrics = (await app.inject('/metrics')).body;
    expect(metrics).toContain(
      'kvroute_router_policy_switches_total{group="qwen",method="total_requests"} 1',
    );
    expect(metrics).toContain('kvroute_router_policy_info{group="llama",method="round_robin"} 1');
  });
});

describe('consistent_hash keys on workers', () => {
  const prompts = Array.from(
    { length: 40 },
    (_, i) => `agent ${i}: ${'tools and rules. '.repeat(20)}`,
  );

  /** The worker URL each prompt reaches through `app`. */
  async function homes(app: FastifyInstance, model?: string) {
    const out: { url: string; reason: string }[] = [];
    for (const p of prompts) {
      const r = await post(app, '/v1/chat/completions', chat(p, model));
      expect(r.statusCode, r.body).toBe(200);
      const rank = Number(r.headers['x-kvroute-rank']);
      out.push({
        url: app.kvroute.table.slot(rank)!.worker.url,
        reason: String(r.headers['x-kvroute-reason']),
      });
    }
    return out;
  }

  it('sends each prompt to the same worker from routers listing the workers in other orders, switched or started', async () => {
    const ws = await workers(4);
    const urls = ws.map((w) => w.url);
    const started = await router([
      '--worker-urls',
      ...urls,
      '--load-balance-method',
      'consistent_hash',
    ]);
    // Another replica lists them the other way round and switches to the method at run time.
    const switched = await router([
      '--worker-urls',
      ...[...urls].reverse(),
      '--load-balance-method',
      'round_robin',
    ]);
    expect((await post(switched, '/policy', { method: 'consistent_hash' }, auth)).statusCode).toBe(
      200,
    );
    const a = await homes(started);
    const b = await homes(switched);
    expect(b.map((h) => h.url)).toEqual(a.map((h) => h.url));
    expect(new Set(a.map((h) => h.url)).size).toBe(4);
  });

  it("hashes a model group's keys over its own workers only", async () => {
    const { app, llama: a } = await twoGroups('consistent_hash', 'round_robin');
    // Every key's first draw is one of llama's two workers: no walk past qwen's ranks.
    const got = await homes(app, 'llama');
    expect(got.every((h) => h.reason === 'consistent-hash')).toBe(true);
    expect(new Set(got.map((h) => h.url))).toEqual(new Set(a.map((w) => w.url)));
  });
});

describe('reloadPolicies (the SIGHUP path)', () => {
  it("applies every group's new policy, or none when one is invalid or the groups changed", async () => {
    const a = await workers(1, 'llama');
    const b = await workers(1, 'qwen');
    const yaml = (llama: string, qwen: string, extra = '') => `
models:
  - model: llama
    worker-urls: [${a[0]!.url}]
    load-balance-method: ${llama}
  - model: qwen
    worker-urls: [${b[0]!.url}]
    load-balance-method: ${qwen}
${extra}`;
    const read = (text: string) =>
      resolveConfig(['--config', 'r.yaml', '--health-check-interval-ms', '0'], {}, () => text);
    const app = buildRouter(read(yaml('round_robin', 'round_robin')));
    cleanups.push(() => app.close());
    await app.ready();
    const methods = () => app.kvroute.policy.groups.map((g) => g.dispatcher.method);
    const invalid = read(yaml('total_requests', 'nope'));
    expect(() => app.kvroute.reloadPolicies(invalid, 'sighup')).toThrow(
      /model "qwen": unknown method "nope"/,
    );
    expect(methods()).toEqual(['round_robin', 'round_robin']);
    const renamed = read(yaml('round_robin', 'round_robin').replace('model: qwen', 'model: qwen2'));
    expect(() => app.kvroute.reloadPolicies(renamed, 'sighup')).toThrow(/needs a restart/);
    const events = app.kvroute.reloadPolicies(read(yaml('round_robin', 'total_tokens')), 'sighup');
    expect(events.map((e) => [e.group, e.to.method, e.source])).toEqual([
      ['qwen', 'total_tokens', 'sighup'],
    ]);
    expect(methods()).toEqual(['round_robin', 'total_tokens']);
    // Unchanged: nothing switched.
    expect(app.kvroute.reloadPolicies(read(yaml('round_robin', 'total_tokens')), 'sighup')).toEqual(
      [],
    );
  });
});

describe('SIGHUP', () => {
  it('re-reads the YAML file: a new method is switched to, an invalid file is refused and logged', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'kvroute-sighup-'));
    cleanups.push(async () => rmSync(dir, { recursive: true, force: true }));
    const file = join(dir, 'router.yaml');
    writeFileSync(file, 'load-balance-method: round_robin\n');
    const { child, output, exited } = spawnRouterSource(
      [
        '--config',
        file,
        '--mock-workers',
        '2',
        '--mock-time-scale',
        '0',
        '--port',
        '0',
        '--log-format',
        'json',
      ],
      { cleanups },
    );
    const waitFor = async (what: RegExp): Promise<string> => {
      for (let i = 0; i < 300; i++) {
        const m = what.exec(output());
        if (m) return m[1] ?? m[0];
        if (child.exitCode !== null) throw new Error(`router exited: ${output()}`);
        await new Promise((r) => setTimeout(r, 100));
      }
      throw new Error(`timed out waiting for ${what}: ${output()}`);
    };
    const url = await waitFor(/listening on (http:\/\/127\.0\.0\.1:\d+)/);
    const reason = async () => {
      const r = await fetch(`${url}/v1/chat/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify(chat('hello')),
      });
      expect(r.status).toBe(200);
      return r.headers.get('x-kvroute-reason');
    };
    expect(await reason()).toBe('round-robin');

    writeFileSync(file, 'load-balance-method: total_requests\n');
    child.kill('SIGHUP');
    await waitFor(/"msg":"policy switched"/);
    expect(await reason()).toBe('least-requests');
    const line = output()
      .split('\n')
      .find((l) => l.includes('"msg":"policy switched"'))!;
    expect(JSON.parse(line)).toMatchObject({
      group: 'default',
      source: 'sighup',
      from: { method: 'round_robin' },
      to: { method: 'total_requests' },
    });

    writeFileSync(file, 'load-balance-method: nope\n');
    child.kill('SIGHUP');
    await waitFor(/new configuration refused/);
    expect(output()).toMatch(/unknown method \\?"nope\\?"/);
    expect(await reason()).toBe('least-requests');
    // A file that does not resolve is a refusal like any other, and counted as one.
    const metrics = await (await fetch(`${url}/metrics`)).text();
    expect(metrics).toContain('kvroute_router_policy_switch_refused_total{source="sighup"} 1');

    child.kill('SIGTERM');
    expect(await exited).toBe(0);
  });
});
