// Responses API state lives on the worker that produced it: a follow-up naming it with
// previous_response_id, and retrieve / cancel / delete by id, reach that worker whatever the
// policy would pick, from this router replica and from one that never saw the response.
import { request } from 'undici';
import { afterEach, describe, expect, it } from 'vitest';
import { type FakeWorker, startFakeWorker } from './helpers/fake-worker.ts';
import { listenRouter, NO_ACTIVE_CHECKS } from './helpers/router.ts';

const cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  while (cleanups.length) await cleanups.pop()!();
});

/** Retrieve calls the workers answered (the router's look-ups for ids it did not know). */
let retrieves = 0;

/** A worker that stores its responses as SGLang and vLLM do, and knows only its own. */
async function responsesWorker(name: string): Promise<FakeWorker> {
  const w = await startFakeWorker();
  cleanups.push(() => w.close());
  let n = 0;
  const held = new Set<string>();
  const json = (res: import('node:http').ServerResponse, status: number, obj: unknown) => {
    const text = JSON.stringify(obj);
    res.writeHead(status, { 'content-type': 'application/json' });
    res.end(text);
  };
  w.handlers.set('POST /v1/responses', (_q, res, body) => {
    const prev = body.previous_response_id;
    if (typeof prev === 'string' && !held.has(prev)) {
      json(res, 404, {
        error: { message: `Response ${prev} not found`, type: 'invalid_request_error' },
      });
      return;
    }
    const id = `resp_${name}_${++n}`;
    held.add(id);
    const response = {
      id,
      object: 'response',
      status: 'completed',
      output: [{ type: 'message', content: [{ type: 'output_text', text: `from ${name}` }] }],
      usage: { input_tokens: 5, output_tokens: 2, input_tokens_details: { cached_tokens: 0 } },
    };
    w.handlers.set(`GET /v1/responses/${id}`, (_q2, r2) => {
      retrieves++;
      json(r2, 200, response);
    });
    w.handlers.set(`POST /v1/responses/${id}/cancel`, (_q2, r2) =>
      json(r2, 200, { ...response, status: 'cancelled' }),
    );
    if (body.stream === true) {
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      const ev = (type: string, data: object) =>
        res.write(`event: ${type}\ndata: ${JSON.stringify({ type, ...data })}\n\n`);
      ev('response.created', { response: { ...response, status: 'in_progress', usage: null } });
      ev('response.output_text.delta', { delta: `from ${name}` });
      ev('response.completed', { response });
      res.end();
      return;
    }
    json(res, 200, response);
  });
  return w;
}

async function router(ws: FakeWorker[]): Promise<string> {
  const flags = ['--worker-urls', ...ws.map((w) => w.url), ...NO_ACTIVE_CHECKS];
  // Round robin would send every next turn elsewhere: follow-ups must not follow it.
  const { url } = await listenRouter([...flags, '--load-balance-method', 'round_robin'], cleanups);
  return url;
}

async function respond(url: string, body: Record<string, unknown>) {
  const res = await request(`${url}/v1/responses`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'm', ...body }),
  });
  const text = await res.body.text();
  if (body.stream === true) {
    const created = text
      .split('\n')
      .find((l) => l.startsWith('data:') && l.includes('response.created'))!;
    return { status: res.statusCode, id: JSON.parse(created.slice(5)).response.id as string };
  }
  return { status: res.statusCode, id: (JSON.parse(text) as { id: string }).id };
}

describe('Responses API follow-ups', () => {
  it('go to the worker holding the response they continue, answered plain or streamed', async () => {
    const ws = await Promise.all(['a', 'b', 'c'].map(responsesWorker));
    const url = await router(ws);
    retrieves = 0;
    for (const stream of [false, true]) {
      let { id } = await respond(url, { input: 'turn 1', stream });
      const home = id.split('_')[1];
      // Round robin would move every next turn to another worker: each follow-up stays.
      for (let turn = 2; turn <= 5; turn++) {
        const r = await respond(url, { input: `turn ${turn}`, previous_response_id: id, stream });
        expect(r.status, `turn ${turn}`).toBe(200);
        expect(r.id.split('_')[1], `turn ${turn}`).toBe(home);
        id = r.id;
      }
    }
    // Every id came from an answer this router passed (a body's id, a stream's
    // response.created): none had to be looked up.
    expect(retrieves).toBe(0);
    // A request without previous_response_id is routed by the policy as before.
    const spread = new Set<string>();
    for (let i = 0; i < 3; i++)
      spread.add((await respond(url, { input: 'new' })).id.split('_')[1]!);
    expect(spread.size).toBe(3);
  });

  it('from a router replica that never saw the response: it is looked up on the workers', async () => {
    const ws = await Promise.all(['a', 'b', 'c'].map(responsesWorker));
    const first = await router(ws);
    const other = await router(ws);
    const { id } = await respond(first, { input: 'turn 1' });
    const home = id.split('_')[1];
    retrieves = 0;
    for (let turn = 2; turn <= 4; turn++) {
      const r = await respond(other, { input: `turn ${turn}`, previous_response_id: id });
      expect([r.status, r.id.split('_')[1]]).toEqual([200, home]);
    }
    // Looked up once, then remembered (later turns' ids come from its own answers).
    expect(retrieves).toBe(1);
  });

  it('an id no worker holds is searched for once, and a client gone during the search is not served', async () => {
    const ws = await Promise.all(['a', 'b', 'c'].map(responsesWorker));
    const url = await router(ws);
    // Unknown ids: the workers are asked (each answers 404), then the policy routes it and
    // the engine answers 404. The second time the router does not ask again.
    const lookups = () => ws.reduce((n, w) => n + w.received.length, 0);
    let gets = 0;
    for (const w of ws) {
      w.handlers.set('GET /v1/responses/resp_gone', (_q, res) => {
        gets++;
        res.writeHead(404, { 'content-type': 'application/json' });
        res.end('{"error":{"message":"not found"}}');
      });
    }
    for (let i = 0; i < 2; i++) {
      const r = await respond(url, { input: 'x', previous_response_id: 'resp_gone' }).catch(() => ({
        status: 404,
        id: '',
      }));
      expect(r.status).toBe(404);
    }
    expect(gets).toBe(3);
    // A slow search: the client leaves before it ends, and no worker gets the request.
    for (const w of ws) {
      w.handlers.set('GET /v1/responses/resp_slow', (_q, res) => {
        setTimeout(() => {
          res.writeHead(404, { 'content-type': 'application/json' });
          res.end('{"error":{"message":"not found"}}');
        }, 400);
      });
    }
    const before = lookups();
    const gone = await request(`${url}/v1/responses`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'm', input: 'y', previous_response_id: 'resp_slow' }),
      signal: AbortSignal.timeout(100),
    }).then(
      () => 'answered',
      (e: Error) => e.name,
    );
    expect(gone).toBe('TimeoutError');
    await new Promise((r) => setTimeout(r, 700));
    expect(lookups()).toBe(before);
  });

  it('retrieve, cancel and delete by id reach the holder; an id no worker holds is 404', async () => {
    const ws = await Promise.all(['a', 'b'].map(responsesWorker));
    const url = await router(ws);
    const other = await router(ws);
    const { id } = await respond(url, { input: 'hello' });
    for (const base of [url, other]) {
      for (let i = 0; i < 3; i++) {
        const got = await request(`${base}/v1/responses/${id}`);
        expect(got.statusCode).toBe(200);
        expect(((await got.body.json()) as { id: string }).id).toBe(id);
      }
      const cancel = await request(`${base}/v1/responses/${id}/cancel`, { method: 'POST' });
      expect(cancel.statusCode).toBe(200);
      expect(((await cancel.body.json()) as { status: string }).status).toBe('cancelled');
    }
    const missing = await request(`${url}/v1/responses/resp_nowhere`);
    expect(missing.statusCode).toBe(404);
    await missing.body.dump();
    // Deleted: the router forgets where it was (a follow-up naming it is looked for anew).
    const home = ws.find((w) => w.handlers.has(`GET /v1/responses/${id}`))!;
    home.handlers.set(`DELETE /v1/responses/${id}`, (_q, res) => {
      home.handlers.delete(`GET /v1/responses/${id}`);
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ id, object: 'response', deleted: true }));
    });
    const del = await request(`${url}/v1/responses/${id}`, { method: 'DELETE' });
    expect(del.statusCode).toBe(200);
    await del.body.dump();
    const after = await request(`${url}/v1/responses/${id}`);
    expect(after.statusCode).toBe(404);
    await after.body.dump();
  });
});
