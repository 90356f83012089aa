// W3C traceparent on the upstream hop (continued, generated, replaced; a new span id per
// attempt) and, with --otel, the four request spans through an in-memory exporter.
import {
  BasicTracerProvider,
  InMemorySpanExporter,
  SimpleSpanProcessor,
} from '@opentelemetry/sdk-trace-base';
import type { FastifyInstance } from 'fastify';
import { afterEach, describe, expect, it } from 'vitest';
import { resolveConfig } from '../src/config.ts';
import { type BuildRouterOptions, buildRouter } from '../src/router.ts';
import { parseTraceparent } from '../src/tracing.ts';
import { type FakeWorker, startFakeWorker } from './helpers/fake-worker.ts';

const cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

async function workers(n: number): Promise<FakeWorker[]> {
  const ws = await Promise.all(Array.from({ length: n }, () => startFakeWorker()));
  for (const w of ws) cleanups.push(() => w.close());
  return ws;
}

async function router(argv: string[], opts: BuildRouterOptions = {}): Promise<FastifyInstance> {
  const app = buildRouter(resolveConfig(['--health-check-interval-ms', '0', ...argv]), opts);
  cleanups.push(() => app.close());
  await app.ready();
  return app;
}

function post(app: FastifyInstance, headers: Record<string, string> = {}, stream = false) {
  return app.inject({
    method: 'POST',
    url: '/v1/chat/completions',
    payload: JSON.stringify({ model: 'm', messages: [{ role: 'user', content: 'hi' }], stream }),
    headers: { 'content-type': 'application/json', ...headers },
  });
}

const CLIENT_TRACE = '4bf92f3577b34da6a3ce929d0e0e4736';
const CLIENT_SPAN = '00f067aa0ba902b7';
const CLIENT_PARENT = `00-${CLIENT_TRACE}-${CLIENT_SPAN}-01`;
const FORMAT = /^00-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$/;

/** The traceparent the worker received on its last POST. */
function lastTraceparent(w: FakeWorker): string {
  const h = w.received.at(-1)?.headers.traceparent;
  expect(typeof h).toBe('string');
  return h as string;
}

describe('parseTraceparent', () => {
  it('accepts valid W3C traceparents and rejects the rest', () => {
    expect(parseTraceparent(CLIENT_PARENT)).toEqual({
      traceId: CLIENT_TRACE,
      parentId: CLIENT_SPAN,
      flags: '01',
    });
    // A later version may append fields.
    expect(parseTraceparent(`01-${CLIENT_TRACE}-${CLIENT_SPAN}-00-extra`)?.traceId).toBe(
      CLIENT_TRACE,
    );
    for (const bad of [
      undefined,
      '',
      'garbage',
      `00-${'0'.repeat(32)}-${CLIENT_SPAN}-01`,
      `00-${CLIENT_TRACE}-${'0'.repeat(16)}-01`,
      `ff-${CLIENT_TRACE}-${CLIENT_SPAN}-01`,
      `00-${CLIENT_TRACE.toUpperCase()}-${CLIENT_SPAN}-01`,
      `00-${CLIENT_TRACE}-${CLIENT_SPAN}-01-extra`,
      `00-${CLIENT_TRACE.slice(1)}-${CLIENT_SPAN}-01`,
    ]) {
      expect(parseTraceparent(bad), String(bad)).toBeUndefined();
    }
  });
});

describe('traceparent to workers', () => {
  it('continues a valid client trace with a new span id, starts one when absent, replaces an invalid one', async () => {
    const [w] = await workers(1);
    const app = await router(['--worker-urls', w!.url]);

    expect((await post(app, { traceparent: CLIENT_PARENT, tracestate: 'k=v' })).statusCode).toBe(
      200,
    );
    const continued = lastTraceparent(w!);
    expect(continued).toMatch(FORMAT);
    const c = parseTraceparent(continued)!;
    expect(c.traceId).toBe(CLIENT_TRACE);
    expect(c.parentId).not.toBe(CLIENT_SPAN);
    expect(c.flags).toBe('01');
    expect(w!.received.at(-1)!.headers.tracestate).toBe('k=v');

    expect((await post(app)).statusCode).toBe(200);
    const fresh = parseTraceparent(lastTraceparent(w!));
    expect(fresh).toBeDefined();
    expect(fresh!.traceId).not.toBe(CLIENT_TRACE);

    expect(
      (
        await post(app, {
          traceparent: `00-${'0'.repeat(32)}-${CLIENT_SPAN}-01`,
          tracestate: 'k=v',
        })
      ).statusCode,
    ).toBe(200);
    const replaced = parseTraceparent(lastTraceparent(w!));
    expect(replaced).toBeDefined();
    expect(replaced!.traceId).not.toBe('0'.repeat(32));
    // The tracestate belonged to the trace that was dropped.
    expect(w!.received.at(-1)!.headers.tracestate).toBeUndefined();

    // Each request starts its own trace.
    expect((await post(app)).statusCode).toBe(200);
    expect(parseTraceparent(lastTraceparent(w!))!.traceId).not.toBe(fresh!.traceId);
  });

  it('a retried request keeps its trace id and gets a new span id per upstream hop', async () => {
    const ws = await workers(2);
    ws[0]!.handlers.set('POST /v1/chat/completions', (_q, res) => {
      res.writeHead(500, { 'content-type': 'application/json' });
      res.end('{"error":{"message":"boom"}}');
    });
    const app = await router([
      '--worker-urls',
      ...ws.map((w) => w.url),
      '--load-balance-method',
      'round_robin',
    ]);
    for (let i = 0; i < 3; i++) {
      expect((await post(app, { traceparent: CLIENT_PARENT })).statusCode).toBe(200);
    }
    const failed = ws[0]!.received.map((r) => parseTraceparent(r.headers.traceparent)!);
    const served = ws[1]!.received.map((r) => parseTraceparent(r.headers.traceparent)!);
    expect(failed.length).toBeGreaterThan(0);
    expect(served.length).toBe(3);
    const spans = new Set([...failed, ...served].map((t) => t.parentId));
    expect(spans.size).toBe(failed.length + served.length);
    for (const t of [...failed, ...served]) expect(t.traceId).toBe(CLIENT_TRACE);
  });
});

describe('--otel', () => {
  it('records received, routed, upstream first byte and done, joined to the client trace and the worker hop', async () => {
    const exporter = new InMemorySpanExporter();
    const provider = new BasicTracerProvider({
      spanProcessors: [new SimpleSpanProcessor(exporter)],
    });
    cleanups.push(() => provider.shutdown());
    const [w] = await workers(1);
    w!.handlers.set('POST /v1/chat/completions', (_q, res) => {
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      res.write('data: {"choices":[{"delta":{"content":"a"}}]}\n\n');
      res.end('data: [DONE]\n\n');
    });
    const app = await router(['--worker-urls', w!.url, '--otel'], {
      tracer: provider.getTracer('test'),
    });
    expect((await post(app, { traceparent: CLIENT_PARENT }, true)).statusCode).toBe(200);

    const spans = exporter.getFinishedSpans();
    const byName = new Map(spans.map((s) => [s.name, s]));
    expect([...byName.keys()].sort()).toEqual([
      'kvroute.done',
      'kvroute.received',
      'kvroute.routed',
      'kvroute.upstream_first_byte',
    ]);
    const root = byName.get('kvroute.received')!;
    expect(root.spanContext().traceId).toBe(CLIENT_TRACE);
    expect(root.parentSpanContext?.spanId).toBe(CLIENT_SPAN);
    expect(root.attributes['http.route']).toBe('/v1/chat/completions');
    expect(root.attributes['http.response.status_code']).toBe(200);
    for (const name of ['kvroute.routed', 'kvroute.upstream_first_byte', 'kvroute.done']) {
      const s = byName.get(name)!;
      expect(s.spanContext().traceId, name).toBe(CLIENT_TRACE);
      expect(s.parentSpanContext?.spanId, name).toBe(root.spanContext().spanId);
      expect(s.attributes['kvroute.rank'], name).toBe(0);
      expect(s.attributes['kvroute.reason'], name).toBe(root.attributes['kvroute.reason']);
    }
    expect(typeof root.attributes['kvroute.reason']).toBe('string');
    // The worker's hop is the upstream span: its spans become that span's children.
    const hop = parseTraceparent(lastTraceparent(w!))!;
    expect(hop.traceId).toBe(CLIENT_TRACE);
    expect(hop.parentId).toBe(byName.get('kvroute.upstream_first_byte')!.spanContext().spanId);
  });

  it('is off by default: no span is recorded', async () => {
    const exporter = new InMemorySpanExporter();
    const provider = new BasicTracerProvider({
      spanProcessors: [new SimpleSpanProcessor(exporter)],
    });
    cleanups.push(() => provider.shutdown());
    const [w] = await workers(1);
    const app = await router(['--worker-urls', w!.url], { tracer: provider.getTracer('test') });
    expect((await post(app, { traceparent: CLIENT_PARENT })).statusCode).toBe(200);
    expect(exporter.getFinishedSpans()).toEqual([]);
    expect(parseTraceparent(lastTraceparent(w!))!.traceId).toBe(CLIENT_TRACE);
  });
});
