// The traffic recorder (--record-trace): block ids, the file checked line by line against
// docs/recorded-trace.md on a mock-worker run, rotation, sampling, the admin on/off switch,
// drops when the queue is full, and policy-switch lines.
import { createHmac } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startMockWorker } from '@kvroute/mock-worker';
import { readObservations } from '@kvroute/sim';
import { parseTrace } from '@kvroute/sim/model';
import type { FastifyInstance } from 'fastify';
import { Registry } from 'prom-client';
import { request } from 'undici';
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { type RouterConfig, resolveConfig } from '../src/config.ts';
import { BlockHasher } from '../src/recording/block-hasher.ts';
import {
  type RecordedRequest,
  requestLine,
  requestLineBound,
  TraceRecorder,
} from '../src/recording/recorder.ts';
import {
  rotatedFiles,
  TraceWriter,
  type TraceWriterOptions,
} from '../src/recording/trace-writer.ts';
import { buildRouter } from '../src/router.ts';
import { startFakeWorker } from './helpers/fake-worker.ts';

const work = mkdtempSync(join(tmpdir(), 'kvroute-recording-'));
afterAll(() => rmSync(work, { recursive: true, force: true }));
let fileNo = 0;
const tracePath = (): string => join(work, `trace-${fileNo++}.jsonl`);

/** A cost profile whose every prefill takes `ms`, and decode steps 5 ms. */
function slowPrefillProfile(ms: number): string {
  const file = join(work, `slow-prefill-${fileNo++}.json`);
  writeFileSync(
    file,
    JSON.stringify({
      format: 'kvroute-cost-profile/v1',
      name: 'slow-prefill',
      prefill: { floorMs: ms, perTokenMs: 0, attnMsPerMTokenPairs: 0 },
      decode: { floorMs: 5, perSeqMs: 0, perKContextTokenMs: 0 },
      kvCapacityTokens: 100000,
      chunkedPrefillSize: 8192,
    }),
  );
  return file;
}

const cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  while (cleanups.length) await cleanups.pop()!();
});

async function mockWorkers(n: number): Promise<string[]> {
  const ws = await Promise.all(
    Array.from({ length: n }, () => startMockWorker({ host: '127.0.0.1', port: 0, timeScale: 0 })),
  );
  for (const w of ws) cleanups.push(() => w.close());
  return ws.map((w) => w.url);
}

async function router(argv: string[]): Promise<{ app: FastifyInstance; url: string }> {
  const config: RouterConfig = resolveConfig(['--health-check-interval-ms', '0', ...argv]);
  const app = buildRouter(config);
  await app.listen({ host: '127.0.0.1', port: 0 });
  cleanups.push(async () => {
    app.server.closeAllConnections();
    await app.close();
  });
  return { app, url: `http://127.0.0.1:${(app.server.address() as AddressInfo).port}` };
}

async function chat(
  url: string,
  system: string,
  user: string,
  opts: { stream?: boolean; headers?: Record<string, string> } = {},
): Promise<{ status: number; text: string }> {
  const res = await request(`${url}/v1/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...opts.headers },
    body: JSON.stringify({
      model: 'kvroute-mock',
      messages: [
        { role: 'system', content: system },
        { role: 'user', content: user },
      ],
      max_tokens: 4,
      stream: opts.stream ?? false,
    }),
  });
  return { status: res.statusCode, text: await res.body.text() };
}

function readLines(path: string): Record<string, unknown>[] {
  return readFileSync(path, 'utf8')
    .split('\n')
    .filter((l) => l.length > 0)
    .map((l) => JSON.parse(l) as Record<string, unknown>);
}

/** A recorder of round_robin over one rank, recording everything to a fresh file. */
async function startedRecorder(
  queueBytes: number,
  registry = new Registry(),
): Promise<{ rec: TraceRecorder; path: string }> {
  const rec = new TraceRecorder({
    policy: () => ({ method: 'round_robin', options: {} }),
    ranks: () => 1,
    tokenizer: 'approximate',
    registry,
    log: { warn: () => {}, info: () => {} },
  });
  const path = tracePath();
  await rec.start({
    path,
    blockTokens: 512,
    sampleRate: 1,
    rotateBytes: 0,
    rotateMs: 0,
    queueBytes,
  });
  return { rec, path };
}

/**
 * A writer of a fresh file with a one-line header that never rotates or drops by default
 * (a drop or a write error fails the test).
 */
function traceWriter(opts: Partial<TraceWriterOptions> = {}) {
  const path = tracePath();
  const w = new TraceWriter({
    path,
    rotateBytes: 0,
    rotateMs: 0,
    queueBytes: 1 << 20,
    header: () => '{"event":"start"}',
    onDrop: () => {
      throw new Error('dropped');
    },
    onError: (err) => {
      throw err;
    },
    ...opts,
  });
  return { w, path };
}

/** The request-line fields docs/recorded-trace.md defines, and which are required. */
const REQUIRED = [
  'timestamp',
  'input_length',
  'output_length',
  'hash_ids',
  'rank',
  'reason',
  'e2e_ms',
  'status',
  'stream',
];
const OPTIONAL = ['cached_tokens', 'ttft_ms', 'key', 'model'];

function checkRequestLine(line: Record<string, unknown>, blockTokens: number): void {
  for (const f of REQUIRED) expect(line, `field ${f}`).toHaveProperty(f);
  for (const f of Object.keys(line)) expect([...REQUIRED, ...OPTIONAL]).toContain(f);
  expect(Number.isInteger(line.timestamp) && (line.timestamp as number) >= 0).toBe(true);
  expect(Number.isInteger(line.input_length) && (line.input_length as number) >= 1).toBe(true);
  expect(Number.isInteger(line.output_length) && (line.output_length as number) >= 0).toBe(true);
  const ids = line.hash_ids as number[];
  expect(Array.isArray(ids)).toBe(true);
  for (const id of ids) expect(Number.isSafeInteger(id) && id >= 0).toBe(true);
  expect(Number.isInteger(line.rank)).toBe(true);
  expect(typeof line.reason).toBe('string');
  if ('cached_tokens' in line) expect(Number.isInteger(line.cached_tokens)).toBe(true);
  if ('ttft_ms' in line) {
    expect(typeof line.ttft_ms).toBe('number');
    expect(line.e2e_ms as number).toBeGreaterThanOrEqual(line.ttft_ms as number);
  }
  expect(typeof line.e2e_ms).toBe('number');
  expect(Number.isInteger(line.status)).toBe(true);
  expect(typeof line.stream).toBe('boolean');
  if ('key' in line) expect(line.key).toMatch(/^[0-9a-f]{16}$/);
  void blockTokens;
}

// About 3.3 blocks of 512 approximate tokens (4 bytes each) of agent system prompt.
const SYSTEM = Array.from(
  { length: 120 },
  (_, i) => `Rule ${i}: the careful agent reads the tool output before acting on it.`,
).join('\n');

describe('block ids', () => {
  const secret = Buffer.from('0123456789abcdef0123456789abcdef');
  const ids = (n: number, seed: number): Uint32Array =>
    Uint32Array.from({ length: n }, (_, i) => (i * 2654435761 + seed) >>> 0);

  it('are HMAC-SHA256 of the previous id and the block, chained, first 6 bytes big-endian', () => {
    const h = new BlockHasher({ secret, blockTokens: 4 });
    const tokens = ids(10, 1);
    const got = h.hashIds(tokens);
    expect(got).toHaveLength(3);
    let prev: Buffer | undefined;
    for (let b = 0; b < 3; b++) {
      const block = Buffer.from(tokens.slice(b * 4, Math.min(10, b * 4 + 4)).buffer);
      const mac = createHmac('sha256', secret);
      if (prev) mac.update(prev);
      const digest = mac.update(block).digest();
      expect(got[b]).toBe(digest.readUIntBE(0, 6));
      prev = digest.subarray(0, 6);
    }
  });

  it('match createHmac for secrets of any length (longer than a SHA-256 block too)', () => {
    for (const key of [Buffer.alloc(16, 1), Buffer.alloc(64, 2), Buffer.alloc(100, 3)]) {
      const tokens = ids(6, 9);
      const got = new BlockHasher({ secret: key, blockTokens: 8 }).hashIds(tokens);
      const want = createHmac('sha256', key).update(Buffer.from(tokens.buffer)).digest();
      expect(got).toEqual([want.readUIntBE(0, 6)]);
    }
  });

  it('share leading ids exactly as far as the prompts share whole blocks', () => {
    const h = new BlockHasher({ secret, blockTokens: 8 });
    const a = ids(40, 7);
    const b = a.slice();
    b[21] = 12345; // inside block 2
    const ia = h.hashIds(a);
    const ib = h.hashIds(b);
    expect(ib.slice(0, 2)).toEqual(ia.slice(0, 2));
    // Chained: everything from the changed block on differs.
    for (let i = 2; i < 5; i++) expect(ib[i]).not.toBe(ia[i]);
  });

  it('memoized ids are the ids a fresh hasher computes; another secret gives other ids', () => {
    const memo = new BlockHasher({ secret, blockTokens: 16, memoBytes: 4096 });
    const fresh = () => new BlockHasher({ secret, blockTokens: 16, memoBytes: 0 });
    const prompts = Array.from({ length: 30 }, (_, i) => {
      const p = ids(64 + (i % 5) * 17, 3);
      p[60 + (i % 7)] = i;
      return p;
    });
    for (const p of prompts) expect(memo.hashIds(p)).toEqual(fresh().hashIds(p));
    expect(memo.memoHits).toBeGreaterThan(0);
    const other = new BlockHasher({
      secret: Buffer.from('another secret, 16+ bytes'),
      blockTokens: 16,
    });
    expect(other.hashIds(prompts[0]!)[0]).not.toBe(fresh().hashIds(prompts[0]!)[0]);
  });

  it('are stable across hashers with the same secret, and differ, every one, with another', () => {
    const prompt = ids(5 * 16 + 7, 11);
    const a = new BlockHasher({ secret, blockTokens: 16 }).hashIds(prompt);
    const b = new BlockHasher({ secret: Buffer.from(secret), blockTokens: 16 }).hashIds(prompt);
    expect(a).toHaveLength(6);
    expect(b).toEqual(a);
    const other = new BlockHasher({
      secret: Buffer.from('0123456789abcdef0123456789abcdeg'),
      blockTokens: 16,
    }).hashIds(prompt);
    for (let i = 0; i < a.length; i++) expect(other[i]).not.toBe(a[i]);
  });

  it('key a routing key as the first 16 hex digits of its HMAC, also when remembered', () => {
    const h = new BlockHasher({ secret, blockTokens: 16 });
    const want = (v: string) =>
      createHmac('sha256', secret).update(v, 'utf8').digest('hex').slice(0, 16);
    for (const v of ['session-42', '', 'ünïcode ключ', 'x'.repeat(300)]) {
      expect(h.keyHash(v)).toBe(want(v));
      expect(h.keyHash(v)).toBe(want(v));
    }
    // Past the remembered keys' bound (the map is emptied) the hashes stay the same.
    for (let i = 0; i < 5000; i++) h.keyHash(`k${i}`);
    expect(h.keyHash('session-42')).toBe(want('session-42'));
    expect(h.keyHash('k4999')).toBe(want('k4999'));
  });

  it('refuses a short secret and a bad block size', () => {
    expect(() => new BlockHasher({ secret: Buffer.from('short'), blockTokens: 512 })).toThrow(
      /at least 16 bytes/,
    );
    expect(() => new BlockHasher({ secret, blockTokens: 0 })).toThrow(/block tokens/);
  });
});

describe('recorded trace on mock workers', () => {
  it('writes the start line, then one line per request as docs/recorded-trace.md defines', async () => {
    const urls = await mockWorkers(2);
    const path = tracePath();
    const secretFile = join(work, 'secret');
    writeFileSync(secretFile, 'a-deployment-secret-of-32-bytes!\n');
    const { app, url } = await router([
      '--worker-urls',
      ...urls,
      '--load-balance-method',
      'cache_aware',
      '--record-trace',
      path,
      '--record-trace-secret-file',
      secretFile,
    ]);
    const turns = ['Summarize the failing test.', 'Propose a fix for the parser.', 'Write it.'];
    const answers = [];
    for (const [i, t] of turns.entries()) {
      answers.push(
        await chat(url, SYSTEM, t, {
          stream: i === 1,
          headers: i === 2 ? { 'x-routing-key': 'session-42' } : {},
        }),
      );
    }
    // A prompt that shares nothing with the others.
    answers.push(await chat(url, 'Another agent entirely.', 'Hello there.'));
    for (const a of answers) expect(a.status).toBe(200);
    await app.close();

    const text = readFileSync(path, 'utf8');
    // Never prompt text: no fragment of any prompt is in the file.
    for (const fragment of [
      'careful agent',
      'Rule 1',
      'failing test',
      'Another agent',
      'session-42',
    ]) {
      expect(text).not.toContain(fragment);
    }
    const lines = readLines(path);
    expect(lines).toHaveLength(1 + answers.length);
    const start = lines[0]!;
    expect(start).toMatchObject({
      event: 'start',
      block_tokens: 512,
      sample_rate: 1,
      method: 'cache_aware',
      ranks: 2,
      tokenizer: 'approximate',
    });
    expect(Number.isInteger(start.origin_unix_ms)).toBe(true);
    expect(Math.abs((start.origin_unix_ms as number) - Date.now())).toBeLessThan(600_000);
    expect(typeof start.options).toBe('object');
    const reqs = lines.slice(1);
    for (const l of reqs) {
      checkRequestLine(l, 512);
      expect(l.status).toBe(200);
      // Its tokens are the approximate routing tokens, so the ids cover the prompt in blocks
      // of 512 of them.
      expect((l.hash_ids as number[]).length).toBe(Math.ceil((l.input_length as number) / 512));
      expect(l.output_length).toBe(4);
      expect(l).toHaveProperty('ttft_ms');
    }
    // The mock worker reports usage with cached tokens, except in a stream that did not ask
    // for usage (stream_options.include_usage): there the field is absent, not 0, and the
    // output length is the count of token events the router relayed.
    expect(reqs.map((l) => 'cached_tokens' in l)).toEqual([true, false, true, true]);
    expect(reqs.map((l) => l.stream)).toEqual([false, true, false, false]);
    // Received in this order, one at a time.
    for (let i = 1; i < reqs.length; i++) {
      expect(reqs[i]!.timestamp as number).toBeGreaterThanOrEqual(reqs[i - 1]!.timestamp as number);
    }
    // The three turns share the system prompt: their first 3 blocks (whole blocks of it) agree.
    const ids = reqs.map((l) => l.hash_ids as number[]);
    expect(ids[0]!.length).toBeGreaterThanOrEqual(4);
    expect(ids[1]!.slice(0, 3)).toEqual(ids[0]!.slice(0, 3));
    expect(ids[2]!.slice(0, 3)).toEqual(ids[0]!.slice(0, 3));
    expect(ids[1]![ids[1]!.length - 1]).not.toBe(ids[0]![ids[0]!.length - 1]);
    expect(ids[3]![0]).not.toBe(ids[0]![0]);
    // Cache-aware sent the later turns where the prefix was: the worker reported it cached.
    expect(reqs[1]!.rank).toBe(reqs[0]!.rank);
    expect(reqs[2]!.rank).toBe(reqs[0]!.rank);
    expect(reqs[0]!.cached_tokens).toBe(0);
    expect(reqs[2]!.cached_tokens as number).toBeGreaterThanOrEqual(3 * 512);
    // Only the request with a routing key has a key, a keyed hash of it.
    expect(reqs.map((l) => 'key' in l)).toEqual([false, false, true, false]);
    // The simulator reads the file as it reads any recorded trace: every request, with its
    // ids and what the router observed, and the start line's setting.
    const sim = parseTrace(text, path);
    expect(sim.skipped).toBe(0);
    expect(sim.start).toMatchObject({ blockTokens: 512, method: 'cache_aware', ranks: 2 });
    expect(sim.lines.map((l) => l.hashIds)).toEqual(ids);
    expect(sim.lines.map((l) => l.inputLength)).toEqual(reqs.map((l) => l.input_length));
    expect(sim.lines.map((l) => l.observed?.rank)).toEqual(reqs.map((l) => l.rank));
    expect(sim.lines.map((l) => l.observed?.cachedTokens)).toEqual(
      reqs.map((l) => l.cached_tokens),
    );
    expect(sim.lines[2]!.observed?.key).toBe(reqs[2]!.key);
    // The fit's reader: three plain requests (it fits on streams) and a stream without a
    // cached count, each set aside for its own reason, none unreadable.
    const observations = readObservations(path);
    expect(observations).toMatchObject({
      requests: [],
      skipped: 0,
      unobserved: { notStreamed: 3, cachedUnknown: 1 },
      sampleRate: 1,
    });
    // Same secret file, same ids: a second recording of the same prompt matches the first.
    const again = tracePath();
    const r2 = await router([
      '--worker-urls',
      ...urls,
      '--record-trace',
      again,
      '--record-trace-secret-file',
      secretFile,
    ]);
    await chat(r2.url, SYSTEM, turns[0]!);
    await r2.app.close();
    expect(readLines(again)[1]!.hash_ids).toEqual(ids[0]);
  });

  it('leaves cached_tokens out when the worker does not report it, and records error statuses', async () => {
    const w = await startFakeWorker();
    cleanups.push(() => w.close());
    w.handlers.set('POST /v1/chat/completions', (_req, res, body) => {
      const bad = JSON.stringify(body).includes('invalid');
      const text = JSON.stringify(
        bad
          ? { error: { message: 'bad request', type: 'invalid_request_error' } }
          : {
              id: 'x',
              object: 'chat.completion',
              choices: [{ index: 0, message: { role: 'assistant', content: 'ok' } }],
              usage: { prompt_tokens: 21, completion_tokens: 2, total_tokens: 23 },
            },
      );
      res.writeHead(bad ? 400 : 200, { 'content-type': 'application/json' });
      res.end(text);
    });
    const path = tracePath();
    const { app, url } = await router(['--worker-urls', w.url, '--record-trace', path]);
    expect((await chat(url, 'sys', 'hello')).status).toBe(200);
    expect((await chat(url, 'sys', 'invalid')).status).toBe(400);
    await app.close();
    const [, ok, bad] = readLines(path);
    checkRequestLine(ok!, 512);
    expect(ok).not.toHaveProperty('cached_tokens');
    expect(ok).toMatchObject({ input_length: 21, output_length: 2, status: 200, rank: 0 });
    checkRequestLine(bad!, 512);
    expect(bad).toMatchObject({ status: 400, rank: 0 });
    expect(bad).not.toHaveProperty('cached_tokens');
  });

  it("records a stream's ttft_ms at its first output, not at a role chunk sent before it", async () => {
    // An engine that announces the role at once and generates 300 ms later: the time to first
    // token is the 300 ms, which is what fit and replay --observed read from ttft_ms.
    const w = await startFakeWorker();
    cleanups.push(() => w.close());
    const chunk = (delta: Record<string, unknown>, finish: string | null = null) =>
      `data: ${JSON.stringify({ id: 'c', object: 'chat.completion.chunk', choices: [{ index: 0, delta, finish_reason: finish }] })}\n\n`;
    w.handlers.set('POST /v1/chat/completions', (_q, res) => {
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      res.write(chunk({ role: 'assistant', content: '' }));
      setTimeout(() => {
        res.write(chunk({ content: 'ok' }));
        res.end(`${chunk({}, 'stop')}data: [DONE]\n\n`);
      }, 300);
    });
    const path = tracePath();
    const { app, url } = await router(['--worker-urls', w.url, '--record-trace', path]);
    expect((await chat(url, 'sys', 'hello', { stream: true })).status).toBe(200);
    const metrics = await (await request(`${url}/metrics`)).body.text();
    await app.close();
    const [, line] = readLines(path);
    expect(line!.ttft_ms as number).toBeGreaterThanOrEqual(290);
    // The stream's TTFT histogram saw it too: nothing in its buckets below a quarter second.
    const under = metrics
      .split('\n')
      .find(
        (l) =>
          l.startsWith('kvroute_router_upstream_ttft_seconds_bucket{') &&
          l.includes('stream="true"') &&
          l.includes('le="0.25"'),
      );
    expect(under).toMatch(/ 0$/);
  });

  it("records the Responses API's usage, output and a stream's TTFT at its first output delta", async () => {
    // A 200 ms prefill before the first delta, while `response.created` goes out at once.
    const w = await startMockWorker({
      host: '127.0.0.1',
      port: 0,
      timeScale: 1,
      profileFile: slowPrefillProfile(200),
    });
    cleanups.push(() => w.close());
    const path = tracePath();
    const { app, url } = await router(['--worker-urls', w.url, '--record-trace', path]);
    const input = 'words '.repeat(400);
    for (const stream of [true, false]) {
      const res = await request(`${url}/v1/responses`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ model: 'kvroute-mock', input, max_output_tokens: 5, stream }),
      });
      expect(res.statusCode).toBe(200);
      await res.body.text();
    }
    const metrics = await (await request(`${url}/metrics`)).body.text();
    await app.close();
    const [, streamed, plain] = readLines(path);
    expect(streamed).toMatchObject({ stream: true, output_length: 5 });
    expect(streamed!.ttft_ms as number).toBeGreaterThanOrEqual(190);
    expect(streamed!.e2e_ms as number).toBeGreaterThan(streamed!.ttft_ms as number);
    expect(plain).toMatchObject({ output_length: 5 });
    // The second request's prompt was cached by the first: the worker says so, as
    // usage.input_tokens_details.cached_tokens.
    expect(plain!.cached_tokens as number).toBeGreaterThan(0);
    expect(metrics).toMatch(/^kvroute_router_prompt_tokens_total\{[^}]*\} [1-9]/m);
  });

  it('rotates by size: every file opens with the same start line, together they hold every request', async () => {
    const urls = await mockWorkers(1);
    const path = tracePath();
    const { app, url } = await router([
      '--worker-urls',
      ...urls,
      '--record-trace',
      path,
      '--record-rotate-bytes',
      '600',
    ]);
    for (let i = 0; i < 12; i++) await chat(url, SYSTEM, `turn ${i}`);
    await app.close();
    const files = [...rotatedFiles(path), path];
    expect(files.length).toBeGreaterThanOrEqual(3);
    const all = files.map(readLines);
    const starts = all.map((lines) => lines[0]!);
    for (const s of starts) expect(s).toEqual(starts[0]);
    const requests = all.flatMap((lines) => lines.slice(1));
    expect(requests.every((l) => l.event === undefined)).toBe(true);
    expect(requests).toHaveLength(12);
  });

  it('records a share of the requests at --record-sample-rate', async () => {
    const urls = await mockWorkers(1);
    const path = tracePath();
    const { app, url } = await router([
      '--worker-urls',
      ...urls,
      '--record-trace',
      path,
      '--record-sample-rate',
      '0.25',
    ]);
    const n = 200;
    for (let i = 0; i < n; i += 20) {
      await Promise.all(Array.from({ length: 20 }, (_, j) => chat(url, 'short', `q${i + j}`)));
    }
    await app.close();
    const lines = readLines(path);
    expect(lines[0]).toMatchObject({ event: 'start', sample_rate: 0.25 });
    // Binomial(200, 0.25): mean 50, sd 6.1; 20..80 is beyond 4.9 sd either way.
    const recorded = lines.length - 1;
    expect(recorded).toBeGreaterThan(20);
    expect(recorded).toBeLessThan(80);
  });

  it('starts and stops through the admin API (token required)', async () => {
    const urls = await mockWorkers(1);
    const path = tracePath();
    const { app, url } = await router(['--worker-urls', ...urls, '--admin-token', 'admin-secret']);
    const admin = (method: 'GET' | 'POST', body?: unknown, token = 'admin-secret') =>
      app.inject({
        method,
        url: '/trace_recording',
        headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
        ...(body === undefined ? {} : { payload: JSON.stringify(body) }),
      });
    expect((await admin('GET')).json()).toMatchObject({ recording: false });
    expect((await admin('POST', { action: 'start', path }, 'wrong')).statusCode).toBe(403);
    const noPath = await admin('POST', { action: 'start' });
    expect(noPath.statusCode).toBe(400);
    expect(noPath.json().error.param).toBe('path');
    expect((await admin('POST', { action: 'pause' })).statusCode).toBe(400);
    const badRate = await admin('POST', { action: 'start', path, sample_rate: 2 });
    expect(badRate.statusCode).toBe(400);
    expect(badRate.json().error.message).toMatch(/sample_rate/);
    const missingDir = await admin('POST', { action: 'start', path: join(work, 'no/such/dir/t') });
    expect(missingDir.statusCode).toBe(400);
    expect(missingDir.json().error.message).toMatch(/no\/such\/dir/);

    await chat(url, 'sys', 'before');
    const started = await admin('POST', { action: 'start', path, block_tokens: 16 });
    expect(started.statusCode).toBe(200);
    expect(started.json()).toMatchObject({ recording: true, path, block_tokens: 16 });
    await chat(url, 'sys', 'during one');
    await chat(url, 'sys', 'during two');
    const stopped = await admin('POST', { action: 'stop' });
    expect(stopped.json()).toMatchObject({ recording: false, recorded: 2 });
    await chat(url, 'sys', 'after');
    const lines = readLines(path);
    expect(lines.map((l) => l.event ?? 'request')).toEqual(['start', 'request', 'request']);
    expect(lines[0]!.block_tokens).toBe(16);
    expect((await admin('GET')).json()).toMatchObject({ recording: false, recorded: 2 });
  });

  it('marks policy switches', async () => {
    const urls = await mockWorkers(1);
    const path = tracePath();
    const { app, url } = await router([
      '--worker-urls',
      ...urls,
      '--record-trace',
      path,
      '--admin-token',
      'admin-secret',
    ]);
    await chat(url, 'sys', 'one');
    // A hot reload (the router's own switch) writes the line with the new effective options.
    const policy = app.kvroute.policy;
    policy.switchPolicy(
      policy.defaultGroup,
      {
        ...policy.defaultGroup.settings,
        loadBalanceMethod: 'prefix_match',
        methodOptions: { window: 64 },
      },
      'test',
    );
    await chat(url, 'sys', 'two');
    // An embedder's own switch marks it the same way.
    app.kvroute.markPolicySwitch({ method: 'round_robin', options: {} });
    // And the admin API's switch.
    const switched = await app.inject({
      method: 'POST',
      url: '/policy',
      headers: { authorization: 'Bearer admin-secret', 'content-type': 'application/json' },
      payload: JSON.stringify({ method: 'consistent_hash' }),
    });
    expect(switched.statusCode).toBe(200);
    await app.close();
    const lines = readLines(path);
    expect(lines.map((l) => l.event ?? 'request')).toEqual([
      'start',
      'request',
      'policy_switch',
      'request',
      'policy_switch',
      'policy_switch',
    ]);
    expect(lines[5]).toMatchObject({ method: 'consistent_hash' });
    expect(lines[0]).toMatchObject({ method: 'cache_aware' });
    expect(lines[0]).not.toHaveProperty('groups');
    expect(lines[2]).toMatchObject({ method: 'prefix_match', options: { window: 64 } });
    expect(Object.keys(lines[2]!.options as object).length).toBeGreaterThan(1);
    expect(lines[2]).not.toHaveProperty('group');
    expect(lines[3]!.reason).not.toBe('');
    expect(lines[4]).toMatchObject({ method: 'round_robin', options: {} });
    expect(Number.isInteger(lines[2]!.timestamp)).toBe(true);
  });
});

describe('rank changes in a recording', () => {
  it('writes a ranks event when a worker is added or removed, and the start line names removed ranks', async () => {
    const [a, b, c] = await mockWorkers(3);
    const path = tracePath();
    const { app, url } = await router([
      '--worker-urls',
      a!,
      b!,
      '--admin-token',
      'admin-secret',
      '--record-trace',
      path,
    ]);
    const admin = (body: object) =>
      app.inject({
        method: 'POST',
        url: '/ranks',
        headers: { authorization: 'Bearer admin-secret', 'content-type': 'application/json' },
        payload: JSON.stringify(body),
      });
    expect((await chat(url, 'sys', 'one')).status).toBe(200);
    expect((await admin({ action: 'add', url: c })).statusCode).toBe(200);
    expect((await chat(url, 'sys', 'two')).status).toBe(200);
    expect((await admin({ action: 'remove', url: a })).statusCode).toBe(200);
    expect((await chat(url, 'sys', 'three')).status).toBe(200);
    // A new recording opens with the removed rank named.
    const second = tracePath();
    const started = await app.inject({
      method: 'POST',
      url: '/trace_recording',
      headers: { authorization: 'Bearer admin-secret', 'content-type': 'application/json' },
      payload: JSON.stringify({ action: 'start', path: second }),
    });
    expect(started.statusCode, started.body).toBe(200);
    await app.close();
    const lines = readLines(path);
    expect(lines[0]).toMatchObject({ event: 'start', ranks: 2 });
    expect(lines[0]).not.toHaveProperty('down');
    const events = lines.filter((l) => l.event === 'ranks');
    expect(events.map((e) => [e.ranks, e.down])).toEqual([
      [3, []],
      [3, [0]],
    ]);
    // Each after the requests that finished before it, before those after it.
    const order = lines.map((l) => (l.event as string | undefined) ?? 'request');
    expect(order).toEqual(['start', 'request', 'ranks', 'request', 'ranks', 'request']);
    expect(readLines(second)[0]).toMatchObject({ event: 'start', ranks: 3, down: [0] });
  });
});

describe('a recording of worker groups', () => {
  it("names each group's policy and ranks on the start line", async () => {
    const [a, b, c] = await mockWorkers(3);
    const path = tracePath();
    const { app } = await router([
      '--model-group',
      `llama=${a},${b};method=round_robin`,
      `qwen=${c};default`,
      '--record-trace',
      path,
    ]);
    await app.close();
    const start = readLines(path)[0]!;
    expect(start.groups).toEqual([
      { group: 'llama', method: 'round_robin', options: {}, ranks: [0, 1] },
      expect.objectContaining({ group: 'qwen', method: 'cache_aware', ranks: [2] }),
    ]);
  });
});

describe('request lines', () => {
  const secret = Buffer.from('0123456789abcdef0123456789abcdef');
  // The line as JSON.stringify writes it from an object (what the recorder wrote before its
  // hand-written builder): the builder must give the same text.
  const viaStringify = (r: RecordedRequest, origin: number, h: BlockHasher): string => {
    const usage = r.usage;
    const line: Record<string, unknown> = {
      timestamp: Math.max(0, Math.round(r.receivedAt - origin)),
      input_length: Math.max(1, usage?.promptTokens ?? r.ids.length),
      output_length: usage?.outputTokens ?? r.streamedTokens ?? 0,
      hash_ids: h.hashIds(r.ids),
      rank: r.rank,
      reason: r.reason,
    };
    if (usage?.cachedTokens !== undefined) line.cached_tokens = usage.cachedTokens;
    if (r.ttftAt !== undefined) {
      line.ttft_ms = Math.round(Math.max(0, r.ttftAt - r.receivedAt) * 1000) / 1000;
    }
    line.e2e_ms = Math.round(Math.max(0, r.endAt - r.receivedAt) * 1000) / 1000;
    line.status = r.status;
    if (r.routingKey !== undefined) line.key = h.keyHash(r.routingKey);
    if (r.model !== undefined) line.model = r.model;
    line.stream = r.stream;
    return JSON.stringify(line);
  };
  const cases: RecordedRequest[] = [
    {
      receivedAt: 1234.5678,
      ids: Uint32Array.from({ length: 2000 }, (_, i) => i * 7),
      rank: 3,
      reason: 'prefix-hash',
      usage: { promptTokens: 2000, cachedTokens: 1536, outputTokens: 17 },
      ttftAt: 1300.0004,
      endAt: 1400.12345,
      status: 200,
      routingKey: 'session-42',
      model: 'meta-llama/Llama-3.1-8B-Instruct',
      stream: true,
    },
    {
      receivedAt: 10,
      ids: new Uint32Array(1),
      rank: 0,
      reason: 'a "quoted"\\ reason\n\u0001',
      streamedTokens: 5,
      endAt: 9,
      status: 502,
      model: 'модель "x"\u2028',
      stream: false,
    },
    {
      // Numbers at their longest: the bound still holds.
      receivedAt: 0,
      ids: new Uint32Array(513),
      rank: 2147483647,
      reason: '',
      usage: {
        promptTokens: 1.2345678901234567e300,
        cachedTokens: -1.2345678901234568e-300,
        outputTokens: 1.7976931348623157e308,
      },
      ttftAt: -5,
      endAt: 1e21,
      status: 599,
      stream: false,
    },
  ];

  it('are the text JSON.stringify gives for the documented fields, within the held room', () => {
    for (const r of cases) {
      const line = requestLine(r, 100, new BlockHasher({ secret, blockTokens: 512 }));
      expect(line).toBe(viaStringify(r, 100, new BlockHasher({ secret, blockTokens: 512 })));
      expect(line.length + 1).toBeLessThanOrEqual(requestLineBound(r, 512));
      expect(JSON.parse(line)).toBeTypeOf('object');
    }
  });

  it('follow the requests that finished before a policy switch', async () => {
    const { rec, path } = await startedRecorder(1 << 20);
    rec.record(cases[0]!);
    // Same turn: the request's line is not built yet when the switch comes.
    rec.markPolicySwitch({ method: 'random', options: {} });
    rec.record(cases[1]!);
    await rec.stop();
    expect(readLines(path).map((l) => l.event ?? l.status)).toEqual([
      'start',
      200,
      'policy_switch',
      502,
    ]);
  });
});

describe('bounded queue', () => {
  it('drops lines when the queue is full, counts them, and never blocks', async () => {
    const registry = new Registry();
    const { rec, path } = await startedRecorder(1024, registry);
    const ids = new Uint32Array(4096).fill(7);
    // All in one turn: the writer cannot run in between, so the queue fills.
    for (let i = 0; i < 50; i++) {
      rec.record({
        receivedAt: 0,
        ids,
        rank: 0,
        reason: 'rr',
        endAt: 1,
        status: 200,
        stream: false,
      });
    }
    const status = rec.status();
    expect(status.dropped).toBeGreaterThan(0);
    expect(status.recorded + status.dropped).toBe(50);
    await rec.stop();
    expect(readLines(path)).toHaveLength(1 + status.recorded);
    const metrics = await registry.metrics();
    expect(metrics).toContain(`kvroute_trace_dropped_total ${status.dropped}`);
    expect(metrics).toContain(`kvroute_trace_recorded_total ${status.recorded}`);
  });

  it('the writer writes in batches: a full batch at once, the rest when it has waited', async () => {
    const { w, path } = traceWriter({ flushBytes: 1000, flushMs: 60_000 });
    const turn = () => new Promise((r) => setImmediate(r));
    // Lines in separate turns, less than a batch: nothing is written yet (the flush timer
    // is a minute away).
    for (let i = 0; i < 5; i++) {
      w.push(`{"n":${i}}`);
      await turn();
    }
    for (let i = 0; i < 5; i++) await turn();
    expect(w.written).toBe(0);
    // A full batch goes out right after the turn that filled it.
    for (let i = 5; i < 120; i++) w.push(`{"n":${i}}`);
    // Bounded wait for the thread pool's write (slow on a loaded machine), not a timing check.
    const later = () => new Promise((r) => setTimeout(r, 10));
    for (let i = 0; i < 1000 && w.written === 0; i++) await later();
    expect(w.written).toBeGreaterThan(100);
    await w.close();
    const lines = readLines(path);
    expect(lines[0]).toEqual({ event: 'start' });
    expect(lines.slice(1).map((l) => l.n)).toEqual(Array.from({ length: 120 }, (_, i) => i));
  });

  it('the writer rotates by size inside a batch: no file passes its size by more than a line', async () => {
    const { w, path } = traceWriter({ rotateBytes: 200 });
    // One turn, one batch of 40 lines of 31 bytes.
    for (let i = 0; i < 40; i++) w.push(`{"n":"${String(i).padStart(20, '0')}"}`);
    await w.close();
    const files = [...rotatedFiles(path), path];
    const n: number[] = [];
    for (const f of files) {
      const text = readFileSync(f, 'utf8');
      expect(text.length).toBeLessThan(200 + 31);
      const lines = readLines(f);
      expect(lines[0]).toEqual({ event: 'start' });
      n.push(...lines.slice(1).map((l) => Number(l.n)));
    }
    // 18 bytes of header and 29 per line: 7 lines bring a file to 221 >= 200 bytes.
    expect(files.length).toBe(Math.ceil(40 / 7));
    expect(n).toEqual(Array.from({ length: 40 }, (_, i) => i));
  });

  it('the writer refuses a line past its byte bound', async () => {
    let drops = 0;
    const { w, path } = traceWriter({ queueBytes: 100, onDrop: () => drops++ });
    expect(w.push('x'.repeat(50))).toBe(true);
    expect(w.push('y'.repeat(50))).toBe(false);
    expect(drops).toBe(1);
    await w.close();
    expect(readFileSync(path, 'utf8')).toBe(`{"event":"start"}\n${'x'.repeat(50)}\n`);
  });
});

describe('recording config', () => {
  it('reads the flags, env and YAML, and names a bad sample rate', () => {
    const c = resolveConfig(
      [
        '--worker-urls',
        'http://w:1',
        '--record-trace',
        '/tmp/t.jsonl',
        '--record-rotate-age',
        '5m',
      ],
      { KVROUTE_RECORD_SAMPLE_RATE: '0.1', KVROUTE_RECORD_BLOCK_TOKENS: '256' },
    );
    expect(c).toMatchObject({
      recordTrace: '/tmp/t.jsonl',
      recordSampleRate: 0.1,
      recordBlockTokens: 256,
      recordRotateMs: 300_000,
    });
    expect(() =>
      resolveConfig(['--worker-urls', 'http://w:1', '--record-sample-rate', '0']),
    ).toThrow(/--record-sample-rate: must be in \(0, 1\], got 0/);
    const y = resolveConfig(
      ['--config', 'c.yaml'],
      {},
      () => 'worker-urls: [http://w:1]\nrecord-trace: /tmp/y.jsonl\nrecord-queue-bytes: 4096\n',
    );
    expect(y).toMatchObject({ recordTrace: '/tmp/y.jsonl', recordQueueBytes: 4096 });
    // Not yet in PD mode: refused by name rather than recording nothing.
    const pd = ['--pd-disaggregation', '--prefill', 'http://p:1', '--decode', 'http://d:1'];
    expect(() => resolveConfig([...pd, '--record-trace', '/tmp/t.jsonl'])).toThrow(
      /--record-trace does not apply to --pd-disaggregation yet/,
    );
    expect(() => resolveConfig([...pd, '--shadow-profile', 'h200-llama-3.1-8b'])).toThrow(
      /--shadow-profile does not apply to --pd-disaggregation yet/,
    );
    expect(resolveConfig(pd).pdDisaggregation).toBe(true);
  });
});
