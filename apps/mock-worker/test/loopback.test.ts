// Over a real loopback port: streaming that arrives over time, client aborts that free the
// rank, reset-mode failures and a worker closed mid-request (what the router's failover
// tests rely on).
import { spawn } from 'node:child_process';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { request } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { approximateTokenIds } from '@kvroute/protocol';
import { afterEach, describe, expect, it } from 'vitest';
import { fillerText, promptSeed } from '../src/filler.ts';
import { type RunningMockWorker, startMockWorker } from '../src/start.ts';
import { type Json, sseEvents } from './helpers.ts';

const running: RunningMockWorker[] = [];
const start = async (opts: Parameters<typeof startMockWorker>[0]) => {
  const w = await startMockWorker(opts);
  running.push(w);
  return w;
};
afterEach(async () => {
  await Promise.all(running.splice(0).map((w) => w.close()));
});

/** A cost profile file whose every prefill takes `prefillMs` and every decode step `stepMs`. */
function flatProfile(name: string, prefillMs: number, stepMs: number): string {
  const file = join(mkdtempSync(join(tmpdir(), 'kvroute-mock-')), `${name}.json`);
  writeFileSync(
    file,
    JSON.stringify({
      format: 'kvroute-cost-profile/v1',
      name,
      prefill: { floorMs: prefillMs, perTokenMs: 0, attnMsPerMTokenPairs: 0 },
      decode: { floorMs: stepMs, perSeqMs: 0, perKContextTokenMs: 0 },
      kvCapacityTokens: 100000,
      chunkedPrefillSize: 8192,
    }),
  );
  return file;
}

async function until(cond: () => boolean, what: string, limitMs = 5000): Promise<void> {
  const t0 = Date.now();
  while (!cond()) {
    if (Date.now() - t0 > limitMs) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 5));
  }
}

describe('mock worker on a loopback port', () => {
  it('listens on 127.0.0.1 with a free port', async () => {
    const w = await start({ timeScale: 0 });
    expect(w.url).toBe(`http://127.0.0.1:${w.port}`);
    expect(w.port).toBeGreaterThan(0);
    const res = await fetch(`${w.url}/health`);
    expect(res.status).toBe(200);
  });

  it('streams chunks over time, one per output token, not buffered', async () => {
    // Real time, with decode steps of 50 ms: 30 tokens span ~1.5 s, so even a test process
    // starved of CPU for a few hundred ms (server and client share one event loop) cannot
    // receive the whole stream in its first read unless the worker buffered it.
    const profileFile = flatProfile('slow-decode', 5, 50);
    const w = await start({ timeScale: 1, profileFile });
    const res = await fetch(`${w.url}/v1/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ prompt: 'stream me', max_tokens: 30, stream: true }),
    });
    expect(res.headers.get('content-type')).toMatch(/text\/event-stream/);
    const reader = res.body!.getReader();
    const decoder = new TextDecoder();
    let text = '';
    let reads = 0;
    let firstReadHadDone = false;
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      reads++;
      const chunk = decoder.decode(value, { stream: true });
      if (reads === 1) firstReadHadDone = chunk.includes('[DONE]');
      text += chunk;
    }
    expect(firstReadHadDone).toBe(false);
    expect(reads).toBeGreaterThan(5);
    const events = sseEvents(text) as Json[];
    expect(events.at(-1)).toBe('[DONE]');
    expect(
      events.filter((e) => e !== '[DONE]' && e.choices.length > 0 && e.choices[0].text !== ''),
    ).toHaveLength(30);
  });

  it("a chat stream's first byte is its first token: the role chunk comes after the prefill", async () => {
    // A 400 ms prefill: what a router measures as time to first byte must include it, as
    // with SGLang and vLLM, which send the role chunk with the first output.
    const profileFile = flatProfile('slow-prefill', 400, 5);
    const w = await start({ timeScale: 1, profileFile });
    const sent = performance.now();
    const res = await fetch(`${w.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({
        messages: [{ role: 'user', content: 'hi' }],
        max_tokens: 3,
        stream: true,
      }),
    });
    const reader = res.body!.getReader();
    const first = await reader.read();
    const firstByteMs = performance.now() - sent;
    let text = new TextDecoder().decode(first.value);
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      text += new TextDecoder().decode(value);
    }
    expect(firstByteMs).toBeGreaterThanOrEqual(390);
    const events = sseEvents(text) as Json[];
    expect(events[0].choices[0].delta).toEqual({ role: 'assistant', content: '' });
    expect(events.filter((e) => e !== '[DONE]' && e.choices[0]?.delta?.content)).toHaveLength(3);
  });

  it('a client that disconnects mid-stream aborts the request and frees the rank', async () => {
    const w = await start({ timeScale: 1, dpSize: 2 });
    const engine = w.app.mockEngine;
    const ac = new AbortController();
    const res = await fetch(`${w.url}/generate`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({
        text: 'a long answer please',
        sampling_params: { max_new_tokens: 100000 },
        stream: true,
        routed_dp_rank: 1,
      }),
      signal: ac.signal,
    });
    const reader = res.body!.getReader();
    await reader.read(); // at least one token arrived
    expect(engine.activeRequests).toBe(1);
    expect(engine.tracker.ranks[1]?.inFlightRequests).toBe(1);
    expect(engine.loads()[1]?.num_running_reqs).toBe(1);
    const busy = await fetch(`${w.url}/flush_cache`, { method: 'POST' });
    expect(busy.status).toBe(400);
    expect(((await busy.json()) as Json).error.code).toBe('engine_busy');
    ac.abort();
    await until(() => engine.activeRequests === 0, 'the abort');
    expect(engine.tracker.ranks[1]).toMatchObject({ inFlightRequests: 0, inFlightTokens: 0 });
    expect(engine.loads()[1]).toMatchObject({
      num_running_reqs: 0,
      num_waiting_reqs: 0,
      num_used_tokens: 0,
    });
    const metrics = await (await fetch(`${w.url}/metrics`)).text();
    expect(metrics).toContain('kvroute_worker_aborted_requests_total{dp_rank="1"} 1');
  });

  it('a non-streaming client that disconnects also frees its rank', async () => {
    const w = await start({ timeScale: 1 });
    const engine = w.app.mockEngine;
    const req = request(`${w.url}/generate`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
    });
    req.on('error', () => {});
    req.end(JSON.stringify({ text: 'x', sampling_params: { max_new_tokens: 100000 } }));
    await until(() => engine.activeRequests === 1, 'the request to start');
    req.destroy();
    await until(() => engine.activeRequests === 0, 'the abort');
    expect(engine.loads()[0]?.num_used_tokens).toBe(0);
  });

  it('a client that stops reading gets every token once it resumes, merged into fewer frames', async () => {
    // Instant mode produces all tokens in one burst, far more than loopback socket buffers
    // hold, while this client reads nothing: the writer must hold tokens back, not lose them.
    const TOKENS = 60_000;
    const w = await start({ timeScale: 0, kvCapacity: 200_000 });
    const engine = w.app.mockEngine;
    const body = await new Promise<string>((resolve, reject) => {
      const req = request(`${w.url}/v1/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
      });
      req.on('error', reject);
      req.on('response', (res) => {
        res.pause();
        void until(() => engine.activeRequests === 0, 'the generation to finish').then(() => {
          let text = '';
          res.setEncoding('utf8');
          res.on('data', (d: string) => {
            text += d;
          });
          res.on('end', () => resolve(text));
          res.resume();
        }, reject);
      });
      req.end(
        JSON.stringify({
          prompt: 'slow reader',
          max_tokens: TOKENS,
          stream: true,
          stream_options: { include_usage: true },
        }),
      );
    });
    const events = sseEvents(body) as Json[];
    expect(events.at(-1)).toBe('[DONE]');
    const frames = events.filter((e) => e !== '[DONE]' && e.choices[0]?.finish_reason === null);
    expect(frames.map((e) => e.choices[0].text).join('')).toBe(
      fillerText(promptSeed(approximateTokenIds('slow reader')), TOKENS),
    );
    expect(frames.length).toBeLessThan(TOKENS);
    expect(events.at(-2).usage.completion_tokens).toBe(TOKENS);
  });

  it('--fail-mode reset drops the connection without a response', async () => {
    const w = await start({ timeScale: 0, failAfter: 0, failMode: 'reset' });
    await expect(
      fetch(`${w.url}/generate`, { method: 'POST', body: JSON.stringify({ text: 'x' }) }),
    ).rejects.toThrow();
  });

  it('close() kills in-flight requests like a dead worker', async () => {
    const w = await start({ timeScale: 1 });
    const pending = fetch(`${w.url}/generate`, {
      method: 'POST',
      body: JSON.stringify({ text: 'x', sampling_params: { max_new_tokens: 100000 } }),
    });
    await until(() => w.app.mockEngine.activeRequests === 1, 'the request to start');
    await w.close();
    await expect(pending).rejects.toThrow();
    await expect(fetch(`${w.url}/health`)).rejects.toThrow();
  });

  it('the kvroute-mock-worker bin starts, prints its URL and serves (after a leading --, as `pnpm start -- ...` passes)', async () => {
    const bin = fileURLToPath(new URL('../bin/kvroute-mock-worker.mjs', import.meta.url));
    const child = spawn(process.execPath, [bin, '--', '--time-scale', '0', '--dp-size', '2'], {
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    try {
      const url = await new Promise<string>((resolve, reject) => {
        let out = '';
        child.stdout.on('data', (d) => {
          out += d;
          const m = /listening on (http:\/\/127\.0\.0\.1:\d+)/.exec(out);
          if (m?.[1]) resolve(m[1]);
        });
        child.once('exit', (code) => reject(new Error(`exited ${code}: ${out}`)));
      });
      const info = await (await fetch(`${url}/get_server_info`)).json();
      expect(info).toMatchObject({ dp_size: 2, engine: 'kvroute-mock-worker', time_scale: 0 });
    } finally {
      child.kill('SIGTERM');
    }
  });
});
