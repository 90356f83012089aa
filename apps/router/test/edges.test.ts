// The routes beside inference (model cards, tokenizer, generation check, pass-through) under
// the same keys and header rules as inference; worker credentials kept out of every log and
// answer; a worker nothing listens for marked down by the first check; configuration values
// refused where they would break the router; a failed start that leaves no process behind.
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { request } from 'undici';
import { afterEach, describe, expect, it } from 'vitest';
import { readYaml, redactConfig, resolveConfig } from '../src/config.ts';
import { redactCredentials, redactUrlCredentials } from '../src/credentials.ts';
import { RouterConfigError } from '../src/errors.ts';
import { loggerOptions } from '../src/logging.ts';
import { buildRouter } from '../src/router.ts';
import { type FakeWorker, startFakeWorker } from './helpers/fake-worker.ts';
import { listenRouter, NO_ACTIVE_CHECKS, spawnRouterSource } from './helpers/router.ts';

const cleanups: (() => Promise<void> | void)[] = [];
afterEach(async () => {
  while (cleanups.length) await cleanups.pop()!();
});

async function workers(n: number): Promise<FakeWorker[]> {
  const ws = await Promise.all(Array.from({ length: n }, () => startFakeWorker()));
  for (const w of ws) cleanups.push(() => w.close());
  return ws;
}

/** The headers each GET the fake worker answered carried, by path. */
function recordGets(w: FakeWorker, path: string): Record<string, string | string[] | undefined>[] {
  const seen: Record<string, string | string[] | undefined>[] = [];
  w.handlers.set(`GET ${path}`, (req, res) => {
    seen.push(req.headers);
    res.writeHead(200, { 'content-type': 'application/json' });
    res.end('{"ok":true}');
  });
  return seen;
}

async function get(url: string, headers: Record<string, string> = {}) {
  const res = await request(url, { headers });
  return { status: res.statusCode, text: await res.body.text() };
}

async function post(url: string, body: string, headers: Record<string, string> = {}) {
  const res = await request(url, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...headers },
    body,
  });
  return { status: res.statusCode, text: await res.body.text() };
}

describe('routes beside inference', () => {
  it('ask for the inference API key (and only the probes do not)', async () => {
    const [w] = await workers(1);
    recordGets(w!, '/get_model_info');
    w!.handlers.set('POST /tokenize', (_q, res) => {
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end('{"tokens":[1,2]}');
    });
    const { url } = await listenRouter(
      ['--worker-urls', w!.url, ...NO_ACTIVE_CHECKS, '--api-key', 'inference-key-1'],
      cleanups,
    );
    const key = { authorization: 'Bearer inference-key-1' };
    for (const path of ['/v1/models', '/get_model_info']) {
      const none = await get(`${url}${path}`);
      expect(none.status, path).toBe(401);
      expect(JSON.parse(none.text).error.code).toBe('missing_api_key');
      expect((await get(`${url}${path}`, { authorization: 'Bearer wrong' })).status).toBe(401);
      expect((await get(`${url}${path}`, key)).status, path).toBe(200);
    }
    expect((await post(`${url}/tokenize`, '{"text":"a"}')).status).toBe(401);
    expect((await post(`${url}/tokenize`, '{"text":"a"}', key)).status).toBe(200);
    for (const probe of ['/health', '/readiness', '/liveness']) {
      expect((await get(`${url}${probe}`)).status, probe).toBe(200);
    }
  });

  it('count toward the per-key rate limit', async () => {
    const [w] = await workers(1);
    recordGets(w!, '/get_model_info');
    const { url } = await listenRouter(
      [
        '--worker-urls',
        w!.url,
        ...NO_ACTIVE_CHECKS,
        '--rate-limit-rps',
        '1',
        '--rate-limit-burst',
        '2',
      ],
      cleanups,
    );
    const codes = [];
    for (let i = 0; i < 4; i++) codes.push((await get(`${url}/get_model_info`)).status);
    expect(codes.slice(0, 2)).toEqual([200, 200]);
    expect(codes.slice(2)).toContain(429);
  });

  it("forward neither the client's credentials nor its identity; the worker key instead", async () => {
    const [w] = await workers(1);
    const seen = recordGets(w!, '/get_model_info');
    const { url } = await listenRouter(
      ['--worker-urls', w!.url, ...NO_ACTIVE_CHECKS, '--worker-api-key', 'worker-secret'],
      cleanups,
    );
    seen.length = 0; // the router's own startup read of the model's context length
    await get(`${url}/get_model_info`, {
      authorization: 'Bearer client-key',
      cookie: 'session=1',
      'x-forwarded-for': '6.6.6.6',
    });
    expect(seen).toHaveLength(1);
    expect(seen[0]!.authorization).toBe('Bearer worker-secret');
    expect(seen[0]!.cookie).toBeUndefined();
    expect(seen[0]!['x-forwarded-for']).toBeUndefined();
  });

  it('--pass-through-unknown never hands a worker the router paths', async () => {
    const [w] = await workers(1);
    let flushed = 0;
    w!.handlers.set('POST /flush_cache', (_q, res) => {
      flushed++;
      res.end('ok');
    });
    recordGets(w!, '/metrics');
    const custom = recordGets(w!, '/custom');
    const { url } = await listenRouter(
      ['--worker-urls', w!.url, ...NO_ACTIVE_CHECKS, '--pass-through-unknown', '--admin-port', '0'],
      cleanups,
    );
    // No admin token: the admin route does not exist, on no listener; it is not a worker's.
    expect((await post(`${url}/flush_cache`, '')).status).toBe(404);
    expect(flushed).toBe(0);
    // Metrics are on the admin port: the main port's /metrics is not a worker's metrics.
    const m = await get(`${url}/metrics`);
    expect(m.status).toBe(404);
    expect(m.text).not.toContain('ok');
    // Anything else is passed through.
    expect((await get(`${url}/custom?x=1`)).status).toBe(200);
    expect(custom).toHaveLength(1);
  });
});

describe('/get_server_info', () => {
  it("is a worker's, plus the ranks and the policy the router routes with", async () => {
    const ws = await workers(2);
    for (const w of ws) {
      w.handlers.set('GET /get_server_info', (_q, res) => {
        res.writeHead(200, { 'content-type': 'application/json' });
        res.end(JSON.stringify({ dp_size: 1, load_balance_method: 'round_robin', page_size: 1 }));
      });
    }
    const { url } = await listenRouter(
      [
        '--worker-urls',
        ...ws.map((w) => w.url),
        ...NO_ACTIVE_CHECKS,
        '--load-balance-method',
        'prefix_match',
        '--window',
        '64',
      ],
      cleanups,
    );
    const info = JSON.parse((await get(`${url}/get_server_info`)).text);
    expect(info.page_size).toBe(1);
    expect(info.dp_size).toBe(1);
    expect(info.kvroute_router).toMatchObject({
      ranks: 2,
      healthy_ranks: 2,
      dispatcher: { method: 'prefix_match', window: 64 },
    });
  });
});

describe('worker credentials', () => {
  it('are replaced in URLs, in text and in nested values, and nothing else changes', () => {
    expect(redactUrlCredentials('http://user:pw@10.0.0.1:30000/v1')).toBe(
      'http://<redacted>@10.0.0.1:30000/v1',
    );
    expect(redactUrlCredentials('worker http://tok@h:1 and https://a:b@c down')).toBe(
      'worker http://<redacted>@h:1 and https://<redacted>@c down',
    );
    expect(redactUrlCredentials('mail a@b.c, http://h:1/x@y')).toBe('mail a@b.c, http://h:1/x@y');
    const plain = { a: ['http://h:1'], b: { c: 2 } };
    expect(redactCredentials(plain)).toBe(plain);
    const nested = { urls: ['http://u:secret@h:1'], deep: { url: 'http://u:secret@h:2' }, n: 1 };
    const out = redactCredentials(nested);
    expect(JSON.stringify(out)).not.toContain('secret');
    expect(nested.urls[0]).toBe('http://u:secret@h:1');
  });

  it('never reach the log, the logged config or the admin answers', async () => {
    const [w] = await workers(1);
    const withCreds = w!.url.replace('http://', 'http://user:s3cr3t-pw@');
    const config = resolveConfig([
      '--worker-urls',
      withCreds,
      ...NO_ACTIVE_CHECKS,
      '--admin-token',
      'admin-token-1',
    ]);
    expect(JSON.stringify(redactConfig(config))).not.toContain('s3cr3t-pw');
    const lines: string[] = [];
    const out = { write: (l: string) => lines.push(l) } as unknown as NodeJS.WritableStream;
    const app = buildRouter(config, {
      logger: { ...loggerOptions('info', 'json', out, false), stream: out } as never,
    });
    cleanups.push(() => app.close());
    await app.ready();
    app.log.warn({ worker: withCreds, list: [withCreds] }, `worker ${withCreds} marked down`);
    expect(lines.some((l) => l.includes('<redacted>@'))).toBe(true);
    expect(lines.join('')).not.toContain('s3cr3t-pw');
    const ranks = await app.inject({
      url: '/ranks',
      headers: { authorization: 'Bearer admin-token-1' },
    });
    expect(ranks.statusCode).toBe(200);
    expect(ranks.body).toContain('<redacted>@');
    expect(ranks.body).not.toContain('s3cr3t-pw');
  });
});

describe('health', () => {
  it('a worker nothing listens for is down after the first check, not a few periods later', async () => {
    // A port that was free a moment ago: connections to it are refused.
    const srv = createServer();
    await new Promise<void>((r) => srv.listen(0, '127.0.0.1', () => r()));
    const port = (srv.address() as { port: number }).port;
    await new Promise<void>((r) => srv.close(() => r()));
    const [w] = await workers(1);
    const app = buildRouter(
      resolveConfig([
        '--worker-urls',
        w!.url,
        `http://127.0.0.1:${port}`,
        '--health-failure-threshold',
        '3',
        '--generation-check-interval-ms',
        '0',
      ]),
    );
    cleanups.push(() => app.close());
    await app.ready();
    expect(app.kvroute.table.info().map((r) => r.healthy)).toEqual([true, false]);
    const health = await app.inject('/health');
    expect(JSON.parse(health.body).healthy_ranks).toBe(1);
  });
});

describe('configuration values that would break the router', () => {
  const W = ['--worker-urls', 'http://127.0.0.1:1'];
  it.each([
    [['--port', '70000'], /--port: must be <= 65535, got 70000/],
    [['--admin-port', '65536'], /--admin-port: must be <= 65535/],
    [['--request-timeout-secs', '0'], /--request-timeout-secs: must be >= 0.001, got 0/],
    [['--health-check-timeout-secs', '0'], /--health-check-timeout-secs: must be >= 0.001/],
  ])('%j is refused', (argv, message) => {
    expect(() => resolveConfig([...W, ...(argv as string[])])).toThrow(RouterConfigError);
    expect(() => resolveConfig([...W, ...(argv as string[])])).toThrow(message);
  });

  it('durations take hours, as the documented defaults are written', () => {
    const cfg = resolveConfig([...W, '--record-rotate-age', '1h', '--request-timeout-secs', '2.5']);
    expect(cfg.recordRotateMs).toBe(3_600_000);
    expect(cfg.requestTimeoutMs).toBe(2_500);
  });

  it('YAML numbers are plain decimals, as on the command line', () => {
    expect(() => readYaml('port: 0x10\n', 'router.yaml')).toThrow(
      /router.yaml: port: expected a number, got "0x10"/,
    );
    expect(() => readYaml('max-retries: 0o3\n', 'router.yaml')).toThrow(/got "0o3"/);
    expect(() => readYaml('request-timeout-ms: .inf\n', 'router.yaml')).toThrow(/\.inf/);
    expect(readYaml('port: 16\nmax-retries: 3\nepsilon: 1.5e-1\n', 'r.yaml').get('port')).toBe(16);
  });
});

describe('`pnpm router`', () => {
  it('reads relative paths from where the user typed it (INIT_CWD), not apps/router', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'kvroute-init-cwd-'));
    cleanups.push(() => rmSync(dir, { recursive: true, force: true }));
    writeFileSync(join(dir, 'router.yaml'), 'load-balance-method: round_robin\n');
    const { child, output } = spawnRouterSource(
      [
        '--config',
        'router.yaml',
        '--mock-workers',
        '1',
        '--mock-time-scale',
        '0',
        '--port',
        '0',
        '--log-format',
        'json',
      ],
      { env: { ...process.env, npm_lifecycle_event: 'router', INIT_CWD: dir }, cleanups },
    );
    for (let i = 0; i < 250 && !/listening on|ENOENT|exited/.test(output()); i++) {
      if (child.exitCode !== null) break;
      await new Promise((r) => setTimeout(r, 100));
    }
    expect(output()).toMatch(
      /kvroute-router listening on http:\/\/127\.0\.0\.1:\d+, method round_robin/,
    );
  }, 40_000);
});

describe('a failed start', () => {
  it('with --mock-workers exits 1 with the message instead of waiting on the mock workers', async () => {
    const { stderr, exited } = spawnRouterSource(
      ['--mock-workers', '2', '--port', '0', '--load-balance-method', 'nope'],
      { cleanups },
    );
    const code = await Promise.race([
      exited,
      new Promise<number>((resolve) => setTimeout(() => resolve(-1), 25_000)),
    ]);
    // Its stdout is not a terminal, so the line is JSON (as every log line then is).
    expect(stderr()).toContain('unknown method \\"nope\\"');
    expect(code).toBe(1);
  }, 40_000);
});
