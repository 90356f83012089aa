// The first-byte bound: linear without a cost profile, floor + slowdown x the profile's time to
// first byte with one, and the route using whichever is configured.
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { getProfile } from '@kvroute/sim/model';
import { request } from 'undici';
import { afterEach, describe, expect, it } from 'vitest';
import { DEFAULT_CONFIG, resolveConfig } from '../src/config.ts';
import { buildRouter } from '../src/router.ts';
import {
  boundedOutputTokens,
  FirstByteBound,
  firstByteTimeoutMs,
  loadCostProfile,
} from '../src/timeouts.ts';
import { completionBody, startFakeWorker } from './helpers/fake-worker.ts';
import { listenRouter, NO_ACTIVE_CHECKS } from './helpers/router.ts';

const cleanups: (() => Promise<void> | void)[] = [];
afterEach(async () => {
  while (cleanups.length) await cleanups.pop()!();
});

/** A kvroute-cost-profile/v1 file whose prefill is 1 ms per token (and nothing else). */
function slowProfileFile(): string {
  const dir = mkdtempSync(join(tmpdir(), 'kvroute-profile-'));
  cleanups.push(() => rmSync(dir, { recursive: true, force: true }));
  const file = join(dir, 'fitted.json');
  writeFileSync(
    file,
    JSON.stringify({
      format: 'kvroute-cost-profile/v1',
      name: 'fitted-slow',
      description: 'test: 1 ms per prompt token',
      prefill: { floorMs: 0, perTokenMs: 1, attnMsPerMTokenPairs: 0 },
      decode: { floorMs: 10, perSeqMs: 0, perKContextTokenMs: 0 },
      kvCapacityTokens: 100_000,
      chunkedPrefillSize: 1000,
      overheadMs: 5,
    }),
  );
  return file;
}

describe('first-byte bound', () => {
  it('without a profile: floor + prompt at --prefill-tokens-per-sec (+ output at --decode-ms-per-token when not streaming)', () => {
    const b = new FirstByteBound(DEFAULT_CONFIG);
    expect(b.expectedMs(2000, 256, true)).toBeUndefined();
    expect(b.ms(2000, 256, true)).toBe(10_000 + 1000);
    expect(b.ms(2000, 256, false)).toBe(10_000 + 1000 + 256 * 50);
    expect(new FirstByteBound({ ...DEFAULT_CONFIG, firstByteTimeoutMs: 0 }).ms(2000, 1, true)).toBe(
      0,
    );
  });

  it("with a profile: floor + slowdown x the profile's prefill (in chunks) and, non-streaming, decode", () => {
    const model = loadCostProfile(slowProfileFile());
    const b = new FirstByteBound({ ...DEFAULT_CONFIG, firstByteSlowdown: 3 }, model);
    // 2,500 tokens in chunks of 1,000: 5 ms overhead + 2,500 x 1 ms of prefill.
    expect(b.expectedMs(2500, 100, true)).toBeCloseTo(5 + 2500, 6);
    expect(b.ms(2500, 100, true)).toBe(Math.ceil(10_000 + 3 * 2505));
    // Not streaming: 100 output tokens at the 10 ms decode step.
    expect(b.expectedMs(2500, 100, false)).toBeCloseTo(5 + 2500 + 100 * 10, 6);
    // Every user of a config (the proxy route, prefill/decode mode) gets the same bound.
    const config = { ...DEFAULT_CONFIG, firstByteSlowdown: 3, costProfile: slowProfileFile() };
    expect(firstByteTimeoutMs(config, 2500, 100, true)).toBe(b.ms(2500, 100, true));
    // The linear settings no longer apply.
    const linear = new FirstByteBound(DEFAULT_CONFIG).ms(2500, 100, true);
    expect(b.ms(2500, 100, true)).not.toBe(linear);
  });

  it("a built-in profile: the simulator's own chunked prefill times, growing with the prompt", () => {
    const model = getProfile('h200-llama-3.1-8b');
    const b = new FirstByteBound(DEFAULT_CONFIG, loadCostProfile('h200-llama-3.1-8b'));
    const chunk = model.chunkedPrefillSize;
    const n = chunk + 100;
    const expected =
      (model.overheadMs ?? 0) + model.prefillMs(chunk, 0) + model.prefillMs(100, chunk);
    expect(b.expectedMs(n, 16, true)).toBeCloseTo(expected, 9);
    expect(b.ms(n, 16, true)).toBe(Math.ceil(10_000 + 4 * expected));
    expect(b.ms(100_000, 16, true)).toBeGreaterThan(b.ms(2_000, 16, true));
  });

  it("a non-streamed answer without a client limit is bounded by the model's context, not the accounting default", () => {
    const given = { maxTokens: 64, maxTokensDefaulted: false };
    const unset = { maxTokens: 128, maxTokensDefaulted: true };
    expect(boundedOutputTokens('chat', given, false, 32_768)).toBe(64);
    expect(boundedOutputTokens('chat', unset, false, 32_768)).toBe(32_768);
    expect(boundedOutputTokens('responses', unset, false, 32_768)).toBe(32_768);
    expect(
      boundedOutputTokens('completion', { maxTokens: 16, maxTokensDefaulted: true }, false, 8192),
    ).toBe(8192);
    // A stream's first byte is its first token; SGLang's /generate stops at its own 128.
    expect(boundedOutputTokens('chat', unset, true, 32_768)).toBe(128);
    expect(boundedOutputTokens('generate', unset, false, 32_768)).toBe(128);
  });

  it('the route waits for a long non-streamed answer the client set no limit for, and still times out one that outlives its limit', async () => {
    // The worker answers after 800 ms, as an engine generating until its context is full. The
    // bound with the accounting default (128 tokens x 1 ms + 100 ms) is 0.23 s: a 504 after
    // every rank was tried. With the context (4,096 tokens x 1 ms) it is 4.2 s.
    const w = await startFakeWorker();
    cleanups.push(() => w.close());
    w.handlers.set('POST /v1/chat/completions', (_q, res, body) => {
      setTimeout(() => {
        res.writeHead(200, { 'content-type': 'application/json' });
        res.end(JSON.stringify(completionBody(body)));
      }, 800);
    });
    const { url } = await listenRouter(
      [
        '--worker-urls',
        w.url,
        ...NO_ACTIVE_CHECKS,
        '--first-byte-timeout-ms',
        '100',
        '--decode-ms-per-token',
        '1',
        '--max-model-len',
        '4096',
      ],
      cleanups,
    );
    const send = async (extra: Record<string, unknown>): Promise<number> => {
      const res = await request(`${url}/v1/chat/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({
          model: 'm',
          messages: [{ role: 'user', content: 'essay' }],
          ...extra,
        }),
      });
      await res.body.text();
      return res.statusCode;
    };
    expect(await send({})).toBe(200);
    // A client limit of 16 tokens: 116 ms, so the 800 ms answer is a hung attempt.
    expect(await send({ max_tokens: 16 })).toBe(504);
  });

  it('an unknown profile or a bad file is an error naming --cost-profile', () => {
    const W = ['--worker-urls', 'http://127.0.0.1:1'];
    expect(() => buildRouter(resolveConfig([...W, '--cost-profile', 'no-such-profile']))).toThrow(
      /--cost-profile no-such-profile/,
    );
    const dir = mkdtempSync(join(tmpdir(), 'kvroute-profile-'));
    cleanups.push(() => rmSync(dir, { recursive: true, force: true }));
    const bad = join(dir, 'bad.json');
    writeFileSync(bad, '{"format":"something-else"}');
    expect(() => buildRouter(resolveConfig([...W, '--cost-profile', bad]))).toThrow(
      /--cost-profile .*bad\.json: .*format/,
    );
    expect(() => resolveConfig([...W, '--first-byte-slowdown', '0.5'])).toThrow(
      /first-byte-slowdown/,
    );
  });

  it('the route bounds the first byte by the profile: a long prefill it predicts is waited for', async () => {
    // The worker takes 600 ms to answer a ~1,000-token prompt. The linear model allows
    // 100 ms + 1,000 tokens at 100,000 tokens/s = 110 ms and gives up on it (504, no other
    // rank); the profile predicts 5 ms + ~1,000 ms of prefill: a bound of about 1.1 s.
    const w = await startFakeWorker();
    cleanups.push(() => w.close());
    w.handlers.set('POST /v1/chat/completions', (_q, res, body) => {
      setTimeout(() => {
        const text = JSON.stringify(completionBody(body));
        res.writeHead(200, { 'content-type': 'application/json' });
        res.end(text);
      }, 600);
    });
    const prompt = 'x'.repeat(4000);
    const run = async (extra: string[]): Promise<number> => {
      const { url } = await listenRouter(
        [
          '--worker-urls',
          w.url,
          ...NO_ACTIVE_CHECKS,
          '--first-byte-timeout-ms',
          '100',
          '--prefill-tokens-per-sec',
          '100000',
          ...extra,
        ],
        cleanups,
      );
      const res = await request(`${url}/v1/chat/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({
          model: 'm',
          messages: [{ role: 'user', content: prompt }],
          stream: true,
        }),
      });
      await res.body.text();
      return res.statusCode;
    };
    expect(await run([])).toBe(504);
    expect(await run(['--cost-profile', slowProfileFile(), '--first-byte-slowdown', '1'])).toBe(
      200,
    );
  });
});
