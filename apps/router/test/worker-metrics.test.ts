// The per-worker metric families: worker and model labels (never credentials), inter-token
// latency, output tokens, and requests whose worker reported no cached-token count, which stay
// out of the hit rate instead of reading as 0%.
import type { FastifyInstance } from 'fastify';
import { afterEach, describe, expect, it } from 'vitest';
import { resolveConfig } from '../src/config.ts';
import { buildRouter } from '../src/router.ts';
import { type FakeWorker, startFakeWorker } from './helpers/fake-worker.ts';

const cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

async function worker(name: string): Promise<FakeWorker> {
  const w = await startFakeWorker({ name });
  cleanups.push(() => w.close());
  return w;
}

async function router(argv: string[]): Promise<FastifyInstance> {
  const app = buildRouter(resolveConfig(['--health-check-interval-ms', '0', ...argv]));
  cleanups.push(() => app.close());
  await app.ready();
  return app;
}

const chat = (extra: Record<string, unknown> = {}) =>
  JSON.stringify({ model: 'm', messages: [{ role: 'user', content: 'hi' }], ...extra });

function post(app: FastifyInstance, payload: string) {
  return app.inject({
    method: 'POST',
    url: '/v1/chat/completions',
    payload,
    headers: { 'content-type': 'application/json' },
  });
}

/** The value of one series in an exposition, or undefined when it is absent. */
function value(text: string, series: string): number | undefined {
  for (const line of text.split('\n')) {
    if (line.startsWith(`${series} `)) return Number(line.slice(series.length + 1));
  }
  return undefined;
}

describe('per-worker metrics', () => {
  it('streams: inter-token latency between token events, output tokens, unreported cached tokens counted apart', async () => {
    const w = await worker('llama-3-8b');
    w.handlers.set('POST /v1/chat/completions', (_q, res) => {
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      // A role-only chunk, three token chunks, then usage without prompt_tokens_details (as vLLM
      // sends without prefix-caching stats): two intervals, and the usage chunk is not a token.
      res.write('data: {"choices":[{"delta":{"role":"assistant"}}]}\n\n');
      res.write('data: {"choices":[{"delta":{"content":"a"}}]}\n\n');
      setTimeout(() => {
        res.write('data: {"choices":[{"delta":{"content":"b"}}]}\n\n');
        setTimeout(() => {
          res.write('data: {"choices":[{"delta":{"content":"c"}}]}\n\n');
          res.write(
            'data: {"choices":[],"usage":{"prompt_tokens":9,"completion_tokens":3,"total_tokens":12}}\n\n',
          );
          res.end('data: [DONE]\n\n');
        }, 20);
      }, 20);
    });
    const app = await router(['--worker-urls', w.url]);
    const res = await post(app, chat({ stream: true }));
    expect(res.statusCode).toBe(200);
    expect(res.body).toContain('"content":"c"');

    const text = (await app.inject('/metrics')).body;
    const labels = 'rank="0",worker="worker-r0",model="llama-3-8b"';
    expect(value(text, `kvroute_router_inter_token_latency_seconds_count{${labels}}`)).toBe(2);
    expect(value(text, `kvroute_router_output_tokens_total{${labels}}`)).toBe(3);
    expect(value(text, `kvroute_router_requests_without_cached_tokens_total{${labels}}`)).toBe(1);
    // Not a 0% hit rate: neither side of cached / prompt saw this request.
    expect(value(text, `kvroute_router_prompt_tokens_total{${labels}}`)).toBeUndefined();
    expect(value(text, `kvroute_router_cached_tokens_total{${labels}}`)).toBeUndefined();
    expect(value(text, `kvroute_router_upstream_ttft_seconds_count{${labels},stream="true"}`)).toBe(
      1,
    );
    expect(value(text, `kvroute_router_in_flight_requests{${labels}}`)).toBe(0);
  });

  it('a reported cached count of 0 is a real 0 and feeds the hit rate', async () => {
    const w = await worker('m0');
    const app = await router(['--worker-urls', w.url]);
    w.handlers.set('POST /v1/chat/completions', (_q, res) => {
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(
        JSON.stringify({
          choices: [{ index: 0, message: { role: 'assistant', content: 'x' } }],
          usage: {
            prompt_tokens: 10,
            completion_tokens: 4,
            prompt_tokens_details: { cached_tokens: 0 },
          },
        }),
      );
    });
    expect((await post(app, chat())).statusCode).toBe(200);
    const text = (await app.inject('/metrics')).body;
    const labels = 'rank="0",worker="worker-r0",model="m0"';
    expect(value(text, `kvroute_router_prompt_tokens_total{${labels}}`)).toBe(10);
    expect(value(text, `kvroute_router_cached_tokens_total{${labels}}`)).toBe(0);
    expect(value(text, `kvroute_router_output_tokens_total{${labels}}`)).toBe(4);
    expect(
      value(text, `kvroute_router_requests_without_cached_tokens_total{${labels}}`),
    ).toBeUndefined();
    // A non-streaming answer has no inter-token latency to report.
    expect(text).not.toMatch(/kvroute_router_inter_token_latency_seconds_count\{rank="0"/);
  });

  it('on the admin listener the worker label is the URL without userinfo or query', async () => {
    const w = await worker('secret-model');
    const port = new URL(w.url).port;
    const app = await router([
      '--worker-urls',
      `http://user:hunter2@127.0.0.1:${port}`,
      '--admin-port',
      '0',
    ]);
    expect((await post(app, chat())).statusCode).toBe(200);
    const text = (await app.kvroute.adminApp!.inject('/metrics')).body;
    expect(text).not.toContain('hunter2');
    expect(
      value(
        text,
        `kvroute_router_output_tokens_total{rank="0",worker="http://127.0.0.1:${port}",model="secret-model"}`,
      ),
    ).toBe(1);
  });
});
