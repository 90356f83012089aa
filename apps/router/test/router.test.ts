import type { AddressInfo } from 'node:net';
import { Readable } from 'node:stream';
import type { FastifyInstance } from 'fastify';
import { request } from 'undici';
import { afterEach, describe, expect, it } from 'vitest';
import { type RouterConfig, resolveConfig } from '../src/config.ts';
import { buildRouter } from '../src/router.ts';
import { completionBody, type FakeWorker, startFakeWorker } from './helpers/fake-worker.ts';

const cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  while (cleanups.length) await cleanups.pop()!();
});

/** The per-worker labels on the unauthenticated main listener: rank, worker-r<rank>, model. */
const perWorker = (rank: string | number, model = 'fake-model'): string =>
  `rank="${rank}",worker="worker-r${rank}",model="${model}"`;

async function workers(n: number, opts: { dpSize?: number } = {}): Promise<FakeWorker[]> {
  const ws = await Promise.all(Array.from({ length: n }, () => startFakeWorker(opts)));
  for (const w of ws) cleanups.push(() => w.close());
  return ws;
}

async function router(
  argv: string[],
  listen = false,
): Promise<{ app: FastifyInstance; url: string }> {
  const config: RouterConfig = resolveConfig(['--health-check-interval-ms', '0', ...argv]);
  const app = buildRouter(config);
  cleanups.push(() => app.close());
  if (!listen) {
    await app.ready();
    return { app, url: '' };
  }
  await app.listen({ host: '127.0.0.1', port: 0 });
  // Drop client connections first: a pooled client may hold one open that never sent a request,
  // which Node counts as active, so a graceful close would wait for its headers timeout.
  cleanups.push(async () => app.server.closeAllConnections());
  return { app, url: `http://127.0.0.1:${(app.server.address() as AddressInfo).port}` };
}

const chat = (content = 'hello', extra: Record<string, unknown> = {}) => ({
  model: 'm',
  messages: [{ role: 'user', content }],
  max_tokens: 8,
  ...extra,
});

function post(
  app: FastifyInstance,
  url: string,
  payload: unknown,
  headers: Record<string, string> = {},
) {
  return app.inject({
    method: 'POST',
    url,
    payload: typeof payload === 'string' ? payload : JSON.stringify(payload),
    headers: { 'content-type': 'application/json', ...headers },
  });
}

describe('proxying', () => {
  it('forwards the raw body to the chosen rank and reports rank and reason', async () => {
    const ws = await workers(2);
    const { app } = await router([
      '--worker-urls',
      ...ws.map((w) => w.url),
      '--load-balance-method',
      'round_robin',
      // Client credentials reach workers only when asked for (see the security tests).
      '--forward-client-auth',
    ]);
    const raw = '{"model":"m", "messages":[{"role":"user","content":"x"}],"custom_field":[1,2]}';
    const a = await post(app, '/v1/chat/completions', raw, {
      authorization: 'Bearer upstream-key',
    });
    const b = await post(app, '/v1/chat/completions', raw);
    expect(a.statusCode).toBe(200);
    expect(a.json().usage.prompt_tokens_details.cached_tokens).toBe(4);
    expect(new Set([a.headers['x-kvroute-rank'], b.headers['x-kvroute-rank']])).toEqual(
      new Set(['0', '1']),
    );
    expect(a.headers['x-kvroute-reason']).toBe('round-robin');
    const got = ws.flatMap((w) => w.received);
    expect(got).toHaveLength(2);
    expect(got[0]!.body.custom_field).toEqual([1, 2]);
    expect(got.some((r) => r.headers.authorization === 'Bearer upstream-key')).toBe(true);
  });

  it('routes a session to one rank under prefix_match and records cached tokens per rank', async () => {
    const ws = await workers(4);
    const { app } = await router([
      '--load-balance-method',
      'prefix_match',
      '--worker-urls',
      ...ws.map((w) => w.url),
      '--prefix-window',
      '4',
      '--prefix-length',
      '16',
    ]);
    const system = 'You are a helpful agent with a long system prompt. '.repeat(4);
    const ranks = new Set<string>();
    for (let turn = 0; turn < 5; turn++) {
      const res = await post(app, '/v1/chat/completions', chat(`${system} turn ${turn}`));
      expect(res.statusCode).toBe(200);
      ranks.add(String(res.headers['x-kvroute-rank']));
    }
    expect(ranks.size).toBe(1);
    const metrics = (await app.inject('/metrics')).body;
    const rank = [...ranks][0];
    expect(metrics).toContain(`kvroute_router_cached_tokens_total{${perWorker(rank!)}} 20`);
    expect(metrics).toContain(`kvroute_router_prompt_tokens_total{${perWorker(rank!)}} 50`);
    expect(metrics).toMatch(
      /kvroute_router_requests_total\{route="\/v1\/chat\/completions",rank="\d",reason="prefix-hash",status="200"\} 5/,
    );
    expect(metrics).toContain('kvroute_router_decision_seconds_count{method="prefix_match"} 5');
  });

  it('pins a routing key (X-Routing-Key, x-smg-routing-key, body routing_key) with --dp-cache-affinity', async () => {
    const ws = await workers(3);
    const { app } = await router([
      '--worker-urls',
      ...ws.map((w) => w.url),
      '--load-balance-method',
      'round_robin',
      '--dp-cache-affinity',
      'routing_key',
    ]);
    const rankOf = async (i: number, how: 'header' | 'smg' | 'body'): Promise<string> => {
      const headers: Record<string, string> =
        how === 'header'
          ? { 'x-routing-key': 'agent-7' }
          : how === 'smg'
            ? { 'x-smg-routing-key': 'agent-7' }
            : {};
      const body = chat(`turn ${i}`, how === 'body' ? { routing_key: 'agent-7' } : {});
      const res = await post(app, '/v1/chat/completions', body, headers);
      return String(res.headers['x-kvroute-rank']);
    };
    const first = await rankOf(0, 'header');
    for (let i = 1; i < 7; i++)
      expect(await rankOf(i, (['header', 'smg', 'body'] as const)[i % 3]!)).toBe(first);
    // The hint is the router's to consume: workers see its decision, not the key headers.
    const forwarded = ws.flatMap((w) => w.received.map((r) => r.headers));
    expect(forwarded).toHaveLength(7);
    for (const h of forwarded) {
      expect(h['x-routing-key']).toBeUndefined();
      expect(h['x-smg-routing-key']).toBeUndefined();
    }
    const metrics = (await app.inject('/metrics')).body;
    expect(metrics).toContain('kvroute_router_affinity_entries 1');
    expect(metrics).toContain('kvroute_router_affinity_hits_total 6');
    expect(metrics).toMatch(/reason="affinity",status="200"\} 6/);
  });

  it('exports in-flight requests and tokens per rank while a request is out, and affinity evictions', async () => {
    const ws = await workers(1);
    let release: (() => void) | undefined;
    ws[0]!.handlers.set('POST /v1/chat/completions', (_q, res, body) => {
      release = () => {
        res.writeHead(200, { 'content-type': 'application/json' });
        res.end(JSON.stringify(completionBody(body)));
      };
    });
    const { app } = await router([
      '--worker-urls',
      ws[0]!.url,
      '--dp-cache-affinity',
      'routing_key',
      '--affinity-max-entries',
      '1',
    ]);
    const pending = post(app, '/v1/chat/completions', chat('held'), { 'x-routing-key': 'a' });
    for (let i = 0; i < 200 && !release; i++) await new Promise((r) => setTimeout(r, 5));
    const tokens = app.kvroute.table.tracker.ranks[0]!.inFlightTokens;
    expect(tokens).toBeGreaterThan(8); // prompt tokens + max_tokens 8
    const during = (await app.inject('/metrics')).body;
    expect(during).toContain(`kvroute_router_in_flight_requests{${perWorker(0)}} 1`);
    expect(during).toContain(`kvroute_router_in_flight_tokens{${perWorker(0)}} ${tokens}`);
    release!();
    expect((await pending).statusCode).toBe(200);
    const after = (await app.inject('/metrics')).body;
    expect(after).toContain(`kvroute_router_in_flight_requests{${perWorker(0)}} 0`);
    expect(after).toContain(`kvroute_router_in_flight_tokens{${perWorker(0)}} 0`);

    // A one-entry affinity table: each new key evicts the previous one.
    ws[0]!.handlers.set('POST /v1/chat/completions', (_q, res, body) => {
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(JSON.stringify(completionBody(body)));
    });
    for (const key of ['b', 'a', 'a']) {
      expect(
        (await post(app, '/v1/chat/completions', chat(), { 'x-routing-key': key })).statusCode,
      ).toBe(200);
    }
    const metrics = (await app.inject('/metrics')).body;
    expect(metrics).toContain('kvroute_router_affinity_entries 1');
    expect(metrics).toContain('kvroute_router_affinity_evictions_total 2');
    expect(metrics).toContain('kvroute_router_affinity_hits_total 1');
    expect(metrics).toContain('kvroute_router_affinity_misses_total 3');
  });

  it('reads meta_info.cached_tokens from /generate', async () => {
    const ws = await workers(1);
    const { app } = await router(['--worker-urls', ws[0]!.url]);
    const res = await post(app, '/generate', {
      input_ids: [1, 2, 3],
      sampling_params: { max_new_tokens: 2 },
    });
    expect(res.statusCode).toBe(200);
    const metrics = (await app.inject('/metrics')).body;
    expect(metrics).toContain(`kvroute_router_cached_tokens_total{${perWorker(0)}} 3`);
  });

  it('proxies GET /v1/models', async () => {
    const ws = await workers(1);
    const { app } = await router(['--worker-urls', ws[0]!.url]);
    const res = await app.inject('/v1/models');
    expect(res.statusCode).toBe(200);
    expect(res.json().data[0].id).toBe('fake-model');
  });
});

describe('failures', () => {
  it('retries a 5xx on another rank and counts the retry', async () => {
    const ws = await workers(2);
    ws[0]!.handlers.set('POST /v1/chat/completions', (_q, res) => {
      res.writeHead(500, { 'content-type': 'application/json' });
      res.end('{"error":{"message":"boom"}}');
    });
    const { app } = await router([
      '--worker-urls',
      ...ws.map((w) => w.url),
      '--load-balance-method',
      'round_robin',
    ]);
    for (let i = 0; i < 4; i++) {
      const res = await post(app, '/v1/chat/completions', chat());
      expect(res.statusCode).toBe(200);
      expect(res.headers['x-kvroute-rank']).toBe('1');
    }
    const metrics = (await app.inject('/metrics')).body;
    expect(metrics).toMatch(/kvroute_router_retries_total\{rank="0",cause="status"\} [1-3]/);
    // Three strikes (the default threshold) mark the worker down: the policy stops choosing it.
    // The unauthenticated /metrics names workers by their first rank, never by URL.
    expect(metrics).toContain(
      'kvroute_router_rank_healthy{rank="0",url="worker-r0",worker="worker-r0",model="fake-model"} 0',
    );
    expect(metrics).not.toContain(ws[0]!.url);
    expect(app.kvroute.table.tracker.ranks.map((r) => r.inFlightRequests)).toEqual([0, 0]);
  });

  it('marks an unreachable worker down at once and retries elsewhere', async () => {
    const ws = await workers(2);
    const dead = ws[0]!.url;
    await ws[0]!.close();
    const { app } = await router([
      '--worker-urls',
      ...ws.map((w) => w.url),
      '--load-balance-method',
      'round_robin',
    ]);
    const res = await post(app, '/v1/chat/completions', chat());
    const res2 = await post(app, '/v1/chat/completions', chat());
    expect(res.statusCode).toBe(200);
    expect(res2.statusCode).toBe(200);
    expect(app.kvroute.table.worker(dead)!.healthy).toBe(false);
    expect(ws[1]!.received).toHaveLength(2);
  });

  it('answers 5xx in OpenAI shape when no rank is left', async () => {
    const ws = await workers(1);
    const { app } = await router(['--worker-urls', ws[0]!.url]);
    // Gone after the router's first check (which would have marked it down at once), and
    // the check's kept-alive connection seen closed, so the request's own connect is refused.
    await ws[0]!.close();
    await new Promise((r) => setTimeout(r, 100));
    const first = await post(app, '/v1/chat/completions', chat());
    expect(first.statusCode).toBe(502);
    expect(first.json().error.code).toBe('upstream_unavailable');
    expect(first.json().error.message).toMatch(/rank 0 .* failed: .*ECONNREFUSED/);
    const second = await post(app, '/v1/chat/completions', chat());
    expect(second.statusCode).toBe(503);
    expect(second.json().error).toMatchObject({ code: 'no_healthy_rank', type: 'server_error' });
    expect((await app.inject('/health')).statusCode).toBe(503);
  });

  it('forwards the last worker 5xx when retries are exhausted', async () => {
    const ws = await workers(1);
    ws[0]!.handlers.set('POST /v1/completions', (_q, res) => {
      res.writeHead(500, { 'content-type': 'application/json' });
      res.end(
        '{"error":{"message":"engine crashed","type":"server_error","param":null,"code":"x"}}',
      );
    });
    const { app } = await router(['--worker-urls', ws[0]!.url]);
    const res = await post(app, '/v1/completions', { prompt: 'x' });
    expect(res.statusCode).toBe(500);
    expect(res.json().error.message).toBe('engine crashed');
  });

  it('a client that leaves before the worker answers frees the rank and closes the upstream', async () => {
    const ws = await workers(1);
    let upstreamClosed = false;
    ws[0]!.handlers.set('POST /v1/chat/completions', (_q, res) => {
      res.on('close', () => {
        upstreamClosed = true;
      });
    });
    const { app, url } = await router(
      ['--load-balance-method', 'prefix_match', '--worker-urls', ws[0]!.url],
      true,
    );
    const ac = new AbortController();
    const pending = request(`${url}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify(chat()),
      signal: ac.signal,
    }).catch((err: Error) => err);
    for (let i = 0; i < 100 && ws[0]!.received.length === 0; i++)
      await new Promise((r) => setTimeout(r, 10));
    expect(app.kvroute.table.tracker.ranks[0]!.inFlightRequests).toBe(1);
    ac.abort();
    expect(await pending).toBeInstanceOf(Error);
    for (
      let i = 0;
      i < 100 && !(upstreamClosed && app.kvroute.table.tracker.ranks[0]!.inFlightRequests === 0);
      i++
    ) {
      await new Promise((r) => setTimeout(r, 10));
    }
    expect(upstreamClosed).toBe(true);
    expect(app.kvroute.table.tracker.ranks[0]!.inFlightRequests).toBe(0);
    expect((await app.inject('/metrics')).body).toMatch(/reason="prefix-hash",status="499"\} 1/);
  });

  it('gives 504 when the worker does not answer in time, and frees the rank', async () => {
    const ws = await workers(1);
    ws[0]!.handlers.set('POST /v1/chat/completions', () => {});
    const { app } = await router(['--worker-urls', ws[0]!.url, '--request-timeout-ms', '150']);
    const res = await post(app, '/v1/chat/completions', chat());
    expect(res.statusCode).toBe(504);
    expect(res.json().error.code).toBe('upstream_timeout');
    expect(res.json().error.message).toContain('--request-timeout-ms');
    expect(app.kvroute.table.tracker.ranks[0]!.inFlightRequests).toBe(0);
  });
});

describe('monitors started by the flags', () => {
  const until = async (cond: () => boolean): Promise<void> => {
    for (let i = 0; i < 300 && !cond(); i++) await new Promise((r) => setTimeout(r, 10));
  };

  it('--load-poll-interval: load a worker reports beyond the router own count steers the policy', async () => {
    const ws = await workers(2);
    ws[0]!.handlers.set('GET /v1/loads', (_q, res) => {
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(
        JSON.stringify({ dp_size: 1, loads: [{ num_running_reqs: 5, num_waiting_reqs: 1 }] }),
      );
    });
    const { app } = await router([
      '--worker-urls',
      ...ws.map((w) => w.url),
      '--load-balance-method',
      'total_requests',
      '--load-poll-interval',
      '20ms',
    ]);
    await until(() => app.kvroute.table.info()[0]!.externalRequests === 6);
    expect(app.kvroute.table.info().map((r) => r.externalRequests)).toEqual([6, 0]);
    for (let i = 0; i < 3; i++) {
      expect((await post(app, '/v1/chat/completions', chat())).headers['x-kvroute-rank']).toBe('1');
    }
  });

  it('--health-check-interval-ms: active checks mark a failing worker down and back up', async () => {
    const ws = await workers(2);
    let healthy = false;
    ws[0]!.handlers.set('GET /health', (_q, res) => {
      res.writeHead(healthy ? 200 : 503);
      res.end();
    });
    const config = resolveConfig([
      '--worker-urls',
      ...ws.map((w) => w.url),
      '--health-check-interval-ms',
      '20',
      '--health-failure-threshold',
      '2',
      '--health-success-threshold',
      '2',
    ]);
    const app = buildRouter(config);
    cleanups.push(() => app.close());
    await app.ready();
    const w0 = app.kvroute.table.worker(ws[0]!.url)!;
    await until(() => !w0.healthy);
    expect(w0.healthy).toBe(false);
    expect(w0.lastError).toContain('503');
    expect((await post(app, '/v1/chat/completions', chat())).headers['x-kvroute-rank']).toBe('1');
    healthy = true;
    await until(() => w0.healthy);
    expect(w0.healthy).toBe(true);
  });
});

describe('topology', () => {
  it('--dp-aware reads dp_size and sets routed_dp_rank per rank', async () => {
    const ws = await workers(1, { dpSize: 3 });
    const { app } = await router([
      '--dp-aware',
      '--worker-urls',
      ws[0]!.url,
      '--load-balance-method',
      'round_robin',
    ]);
    expect(app.kvroute.table.size).toBe(3);
    for (let i = 0; i < 3; i++) await post(app, '/v1/chat/completions', chat());
    const seen = ws[0]!.received.map((r) => r.body.routed_dp_rank).sort();
    expect(seen).toEqual([0, 1, 2]);
    expect(ws[0]!.received.map((r) => r.headers['x-data-parallel-rank']).sort()).toEqual([
      '0',
      '1',
      '2',
    ]);
  });

  it('several DP servers become (url, dp rank) ranks; --dp-size skips discovery', async () => {
    const ws = await workers(2, { dpSize: 9 });
    const { app } = await router([
      '--dp-aware',
      '--dp-size',
      '2',
      '--worker-urls',
      ...ws.map((w) => w.url),
    ]);
    expect(app.kvroute.table.info().map((r) => [r.url, r.dpRank])).toEqual([
      [ws[0]!.url, 0],
      [ws[0]!.url, 1],
      [ws[1]!.url, 0],
      [ws[1]!.url, 1],
    ]);
  });

  it('explains a failed dp_size discovery', async () => {
    const ws = await workers(1);
    await ws[0]!.close();
    const app = buildRouter(resolveConfig(['--dp-aware', '--worker-urls', ws[0]!.url]));
    await expect(app.ready()).rejects.toThrow(/cannot read dp_size .*pass --dp-size N/);
    await app.close();
  });
});

describe('rank override', () => {
  it('is refused with 403 without --allow-rank-override', async () => {
    const ws = await workers(2);
    const { app } = await router(['--worker-urls', ...ws.map((w) => w.url)]);
    const viaHeader = await post(app, '/v1/chat/completions', chat(), {
      'x-data-parallel-rank': '1',
    });
    expect(viaHeader.statusCode).toBe(403);
    expect(viaHeader.json().error).toMatchObject({
      type: 'permission_error',
      code: 'rank_override_forbidden',
      param: 'X-Data-Parallel-Rank',
    });
    expect(viaHeader.json().error.message).toContain('--allow-rank-override');
    const viaBody = await post(app, '/generate', { text: 'x', routed_dp_rank: 0 });
    expect(viaBody.statusCode).toBe(403);
    expect(viaBody.json().error.param).toBe('routed_dp_rank');
    // An empty header does not count: the error names the body field that asked.
    const emptyHeader = await post(
      app,
      '/generate',
      { text: 'x', routed_dp_rank: 0 },
      { 'x-data-parallel-rank': '' },
    );
    expect(emptyHeader.json().error.param).toBe('routed_dp_rank');
    expect(ws[0]!.received.length + ws[1]!.received.length).toBe(0);
  });

  it('is honoured with the flag; a replica does not see routed_dp_rank', async () => {
    const ws = await workers(2);
    const { app } = await router([
      '--worker-urls',
      ...ws.map((w) => w.url),
      '--allow-rank-override',
    ]);
    for (let i = 0; i < 3; i++) {
      const res = await post(app, '/generate', { text: `x${i}`, routed_dp_rank: 1 });
      expect(res.headers['x-kvroute-reason']).toBe('routed');
    }
    expect(ws[1]!.received).toHaveLength(3);
    expect(ws[1]!.received[0]!.body).toEqual({ text: 'x0' });
    const bad = await post(app, '/generate', { text: 'x', routed_dp_rank: 7 });
    expect(bad.statusCode).toBe(400);
    expect(bad.json().error.code).toBe('invalid_rank');
  });
});

describe('request errors in OpenAI shape', () => {
  it.each([
    ['malformed JSON', '/v1/chat/completions', '{"messages": [', 400, 'invalid_json', null],
    ['empty body', '/v1/chat/completions', '', 400, 'invalid_json', null],
    ['missing messages', '/v1/chat/completions', '{"model":"m"}', 400, undefined, 'messages'],
    ['wrong type', '/v1/chat/completions', '{"messages":"hi"}', 400, undefined, 'messages'],
    [
      'wrong max_tokens',
      '/v1/completions',
      '{"prompt":"x","max_tokens":"9"}',
      400,
      undefined,
      'max_tokens',
    ],
    ['missing prompt', '/generate', '{"sampling_params":{}}', 400, undefined, 'text'],
  ])('%s', async (_name, url, payload, status, code, param) => {
    const ws = await workers(1);
    const { app } = await router(['--worker-urls', ws[0]!.url]);
    const res = await post(app, url, payload);
    expect(res.statusCode).toBe(status);
    const err = res.json().error;
    expect(err.type).toBe('invalid_request_error');
    expect(typeof err.message).toBe('string');
    if (code) expect(err.code).toBe(code);
    expect(err.param).toBe(param);
    expect(ws[0]!.received).toHaveLength(0);
  });

  it('413 beyond --max-body-bytes', async () => {
    const ws = await workers(1);
    const { app } = await router(['--worker-urls', ws[0]!.url, '--max-body-bytes', '1000']);
    const res = await post(app, '/v1/chat/completions', chat('x'.repeat(2000)));
    expect(res.statusCode).toBe(413);
    expect(res.json().error).toMatchObject({
      code: 'payload_too_large',
      type: 'invalid_request_error',
    });
    expect(res.json().error.message).toContain('1000 bytes');
  });

  it('413 for a chunked body (no content-length) once it passes --max-body-bytes', async () => {
    const ws = await workers(1);
    const { url } = await router(['--worker-urls', ws[0]!.url, '--max-body-bytes', '1000'], true);
    async function* body() {
      yield '{"messages":[{"role":"user","content":"';
      for (let i = 0; i < 4; i++) yield 'x'.repeat(400);
      yield '"}]}';
    }
    const res = await request(`${url}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: Readable.from(body()),
    });
    expect(res.statusCode).toBe(413);
    expect(((await res.body.json()) as { error: unknown }).error).toMatchObject({
      code: 'payload_too_large',
      param: 'body',
    });
    expect(ws[0]!.received).toHaveLength(0);
  });

  it('404 for unknown routes and methods', async () => {
    const ws = await workers(1);
    const { app } = await router(['--worker-urls', ws[0]!.url]);
    const res = await app.inject({ method: 'GET', url: '/v1/chat/completions' });
    expect(res.statusCode).toBe(404);
    expect(res.json().error).toMatchObject({ type: 'invalid_request_error', code: 'unknown_url' });
    expect((await app.inject('/nope')).statusCode).toBe(404);
  });
});

describe('admin routes', () => {
  it('do not exist without --admin-token', async () => {
    const ws = await workers(1);
    const { app } = await router(['--worker-urls', ws[0]!.url]);
    expect((await app.inject('/ranks')).statusCode).toBe(404);
    expect((await app.inject({ method: 'POST', url: '/ranks', payload: '{}' })).statusCode).toBe(
      404,
    );
  });

  it('refuse a missing or wrong token, and add/remove workers with the right one', async () => {
    const ws = await workers(2);
    const { app } = await router(['--worker-urls', ws[0]!.url, '--admin-token', 'tok']);
    const missing = await app.inject('/ranks');
    expect(missing.statusCode).toBe(401);
    expect(missing.json().error.code).toBe('unauthorized');
    const wrong = await app.inject({ url: '/ranks', headers: { authorization: 'Bearer nope' } });
    expect(wrong.statusCode).toBe(403);
    expect(wrong.json().error.code).toBe('invalid_token');
    const wrongPost = await app.inject({
      method: 'POST',
      url: '/ranks',
      headers: { authorization: 'Bearer tokk', 'content-type': 'application/json' },
      payload: JSON.stringify({ action: 'add', url: ws[1]!.url }),
    });
    expect(wrongPost.statusCode).toBe(403);
    expect(app.kvroute.table.size).toBe(1);

    const auth = { authorization: 'Bearer tok', 'content-type': 'application/json' };
    const ok = await app.inject({ url: '/ranks', headers: auth });
    expect(ok.json().ranks).toHaveLength(1);
    const added = await app.inject({
      method: 'POST',
      url: '/ranks',
      headers: auth,
      payload: JSON.stringify({ action: 'add', url: ws[1]!.url }),
    });
    expect(added.statusCode).toBe(200);
    expect(added.json().ranks.map((r: { url: string }) => r.url)).toEqual([ws[0]!.url, ws[1]!.url]);
    const removed = await app.inject({
      method: 'POST',
      url: '/ranks',
      headers: auth,
      payload: JSON.stringify({ action: 'remove', url: ws[0]!.url }),
    });
    expect(removed.json().ranks[0]).toMatchObject({ rank: 0, removed: true, healthy: false });
    for (let i = 0; i < 3; i++)
      expect((await post(app, '/generate', { text: `q${i}` })).headers['x-kvroute-rank']).toBe('1');
    const bad = await app.inject({
      method: 'POST',
      url: '/ranks',
      headers: auth,
      payload: JSON.stringify({ action: 'drop', url: 'x' }),
    });
    expect(bad.statusCode).toBe(400);
    expect(bad.json().error.param).toBe('action');
  });
});

describe('streaming', () => {
  it('propagates backpressure: a client that stops reading stalls the worker instead of filling router memory', async () => {
    const ws = await workers(1);
    const TOTAL = 64 * 1024 * 1024;
    const piece = Buffer.from(`data: {"x":"${'x'.repeat(64 * 1024 - 16)}"}\n\n`);
    let written = 0;
    let blocked = false;
    ws[0]!.handlers.set('POST /v1/completions', (_q, res) => {
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      const pump = (): void => {
        while (written < TOTAL) {
          written += piece.length;
          if (!res.write(piece)) {
            blocked = true;
            res.once('drain', () => {
              blocked = false;
              pump();
            });
            return;
          }
        }
        res.end();
      };
      pump();
    });
    const { url } = await router(['--worker-urls', ws[0]!.url], true);
    const res = await request(`${url}/v1/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ prompt: 'x', stream: true }),
      highWaterMark: 64 * 1024,
    });
    const it = res.body[Symbol.asyncIterator]();
    await it.next();
    // The client reads nothing more: the worker must end up blocked well short of the total.
    // Wait until the worker has made no progress for 300 ms (or has written everything).
    let last = -1;
    let still = 0;
    for (let i = 0; i < 400 && still < 10 && written < TOTAL; i++) {
      still = written === last ? still + 1 : 0;
      last = written;
      await new Promise((r) => setTimeout(r, 30));
    }
    expect(blocked).toBe(true);
    expect(written).toBeLessThan(TOTAL / 2);
    res.body.destroy();
  });

  it('pipes SSE chunk by chunk, reads usage from the last chunk, and frees the rank on client abort', async () => {
    const ws = await workers(1);
    let release: (() => void) | undefined;
    let aborted = 0;
    ws[0]!.handlers.set('POST /v1/chat/completions', (_q, res) => {
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      res.write('data: {"choices":[{"delta":{"content":"a"}}]}\n\n');
      res.on('close', () => {
        if (!res.writableFinished) aborted++;
      });
      release = () => {
        res.write(
          'data: {"choices":[],"usage":{"prompt_tokens":7,"completion_tokens":2,"prompt_tokens_details":{"cached_tokens":5}}}\n\n',
        );
        res.end('data: [DONE]\n\n');
      };
    });
    const { app, url } = await router(['--worker-urls', ws[0]!.url], true);

    // First chunk arrives while the worker still holds the rest back: nothing is buffered.
    const res = await request(`${url}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify(chat('s', { stream: true })),
    });
    expect(res.headers['content-type']).toBe('text/event-stream');
    const it = res.body[Symbol.asyncIterator]();
    const first = await it.next();
    expect(String(first.value)).toContain('"content":"a"');
    expect(app.kvroute.table.tracker.ranks[0]!.inFlightRequests).toBe(1);
    release!();
    let rest = '';
    for (let n = await it.next(); !n.done; n = await it.next()) rest += String(n.value);
    expect(rest).toContain('[DONE]');
    for (let i = 0; i < 100 && app.kvroute.table.tracker.ranks[0]!.inFlightRequests > 0; i++)
      await new Promise((r) => setTimeout(r, 10));
    expect(app.kvroute.table.tracker.ranks[0]!.inFlightRequests).toBe(0);
    expect((await app.inject('/metrics')).body).toContain(
      `kvroute_router_cached_tokens_total{${perWorker(0)}} 5`,
    );

    // A client that leaves mid-stream: the router releases the rank and closes the upstream.
    const ac = new AbortController();
    const res2 = await request(`${url}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify(chat('s', { stream: true })),
      signal: ac.signal,
    });
    const it2 = res2.body[Symbol.asyncIterator]();
    await it2.next();
    expect(app.kvroute.table.tracker.ranks[0]!.inFlightRequests).toBe(1);
    ac.abort();
    for (
      let i = 0;
      i < 100 && (app.kvroute.table.tracker.ranks[0]!.inFlightRequests > 0 || aborted === 0);
      i++
    ) {
      await new Promise((r) => setTimeout(r, 10));
    }
    expect(app.kvroute.table.tracker.ranks[0]!.inFlightRequests).toBe(0);
    expect(aborted).toBe(1);
    expect((await app.inject('/metrics')).body).toMatch(/status="499"\} 1/);
  });
});
