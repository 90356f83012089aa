// The official OpenAI Node SDK against the router in front of mock workers, for every route
// the SDK has that the engines serve: chat and completions (plain and streaming, with and
// without include_usage), embeddings (the SDK asks for base64 by default and decodes it),
// models (list merged across workers, retrieve, unknown -> NotFoundError), and the Responses
// API (plain and streaming). Then the engine routes the SDK has no method for, over fetch:
// /tokenize, /get_server_info, /get_model_info, /health_generate, rerank, batch /generate,
// /flush_cache fanned out behind the admin token, and --pass-through-unknown.
import OpenAI, { NotFoundError } from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type Cluster, getText, postJson, startCluster } from './helpers/cluster.ts';

let cluster: Cluster;
let client: OpenAI;
const ADMIN = 'sdk-admin-token';

beforeAll(async () => {
  cluster = await startCluster({
    workers: 2,
    routerArgs: [
      '--load-balance-method',
      'round_robin',
      '--admin-token',
      ADMIN,
      '--pass-through-unknown',
    ],
  });
  // Two workers that serve different model names: /v1/models is their union.
  cluster.workers[1]!.app.mockOptions.modelName = 'second-model';
  client = new OpenAI({ baseURL: `${cluster.url}/v1`, apiKey: 'unused', maxRetries: 0 });
});
afterAll(async () => {
  await cluster?.close();
});

const words = (s: string | null | undefined) => (s ?? '').trim().split(/\s+/).filter(Boolean);

describe('OpenAI SDK through the router', () => {
  it('chat.completions.create: the message, usage with cached tokens', async () => {
    const messages = [{ role: 'user' as const, content: 'Tell me about radix caches.' }];
    const first = await client.chat.completions.create({
      model: 'kvroute-mock',
      messages,
      max_tokens: 4,
    });
    expect(first.object).toBe('chat.completion');
    expect(first.id).toMatch(/^chatcmpl-[0-9a-f]{32}$/);
    expect(words(first.choices[0]?.message.content)).toHaveLength(4);
    expect(first.usage?.completion_tokens).toBe(4);
    expect(first.usage?.prompt_tokens_details?.cached_tokens).toBe(0);
  });

  it('streaming chat: every chunk has a choice unless include_usage asks for the usage chunk', async () => {
    const plain = await client.chat.completions.create({
      model: 'kvroute-mock',
      messages: [{ role: 'user', content: 'stream please' }],
      max_tokens: 5,
      stream: true,
    });
    let text = '';
    let chunks = 0;
    for await (const chunk of plain) {
      chunks++;
      // The access pattern the issue reported crashing on an empty choices list.
      const choice = chunk.choices[0];
      expect(choice).toBeDefined();
      text += choice?.delta.content ?? '';
      expect(chunk.usage ?? undefined).toBeUndefined();
    }
    expect(chunks).toBe(7); // role, 5 tokens, finish
    expect(words(text)).toHaveLength(5);

    const withUsage = await client.chat.completions.create({
      model: 'kvroute-mock',
      messages: [{ role: 'user', content: 'stream please' }],
      max_tokens: 5,
      stream: true,
      stream_options: { include_usage: true },
    });
    const all = [];
    for await (const chunk of withUsage) all.push(chunk);
    const last = all.at(-1)!;
    expect(last.choices).toEqual([]);
    expect(last.usage).toMatchObject({ completion_tokens: 5 });
  });

  it('completions.create, plain and streaming', async () => {
    const c = await client.completions.create({
      model: 'kvroute-mock',
      prompt: 'abc',
      max_tokens: 3,
    });
    expect(c.object).toBe('text_completion');
    expect(words(c.choices[0]?.text)).toHaveLength(3);
    const s = await client.completions.create({
      model: 'kvroute-mock',
      prompt: 'abc',
      max_tokens: 3,
      stream: true,
    });
    let text = '';
    for await (const chunk of s) text += chunk.choices[0]?.text ?? '';
    expect(text).toBe(c.choices[0]?.text);
  });

  it('embeddings.create: base64 (the SDK default) decoded, and float', async () => {
    const e = await client.embeddings.create({ model: 'kvroute-mock', input: ['alpha', 'beta'] });
    expect(e.data).toHaveLength(2);
    const v = e.data[0]!.embedding;
    expect(v).toHaveLength(256);
    expect(Math.hypot(...v)).toBeCloseTo(1, 4);
    const f = await client.embeddings.create({
      model: 'kvroute-mock',
      input: 'alpha',
      encoding_format: 'float',
      dimensions: 256,
    });
    expect(f.data[0]!.embedding[0]).toBeCloseTo(v[0]!, 6);
    expect(e.usage.prompt_tokens).toBeGreaterThan(0);
  });

  it('models.list merges the workers, models.retrieve finds one, an unknown one is NotFoundError', async () => {
    const ids = [];
    for await (const m of client.models.list()) ids.push(m.id);
    expect(ids.sort()).toEqual(['kvroute-mock', 'second-model']);
    const m = await client.models.retrieve('kvroute-mock');
    expect(m.id).toBe('kvroute-mock');
    const err = await client.models.retrieve('no-such-model').catch((e: unknown) => e);
    expect(err).toBeInstanceOf(NotFoundError);
    expect((err as NotFoundError).status).toBe(404);
    expect((err as NotFoundError).code).toBe('model_not_found');
  });

  it('responses.create, plain and streaming', async () => {
    const r = await client.responses.create({
      model: 'kvroute-mock',
      instructions: 'Be brief.',
      input: 'What is a KV cache?',
      max_output_tokens: 6,
    });
    expect(r.object).toBe('response');
    expect(words(r.output_text)).toHaveLength(6);
    expect(r.usage?.output_tokens).toBe(6);
    const s = await client.responses.create({
      model: 'kvroute-mock',
      input: 'What is a KV cache?',
      max_output_tokens: 6,
      stream: true,
    });
    let text = '';
    const types = new Set<string>();
    for await (const ev of s) {
      types.add(ev.type);
      if (ev.type === 'response.output_text.delta') text += ev.delta;
    }
    expect(words(text)).toHaveLength(6);
    expect(types.has('response.created')).toBe(true);
    expect(types.has('response.incomplete')).toBe(true);
  });
});

describe('engine routes the SDK has no method for', () => {
  it('/tokenize, /get_server_info, /get_model_info, /health_generate reach a worker', async () => {
    const t = await postJson(`${cluster.url}/tokenize`, { prompt: 'abcdefgh' });
    expect(t.status).toBe(200);
    expect(t.body.count).toBe(2);
    const info = await getText(`${cluster.url}/get_server_info`);
    expect(JSON.parse(info.text).engine).toBe('kvroute-mock-worker');
    const model = await getText(`${cluster.url}/get_model_info`);
    expect(JSON.parse(model.text).is_generation).toBe(true);
    expect((await getText(`${cluster.url}/health_generate`)).status).toBe(200);
  });

  it('rerank and batch /generate are routed as one request each', async () => {
    const r = await postJson(`${cluster.url}/v1/rerank`, {
      query: 'giant panda',
      documents: ['a llama', 'the giant panda'],
    });
    expect(r.status).toBe(200);
    expect(r.body[0]).toMatchObject({ index: 1, score: 1 });
    expect(r.headers['x-kvroute-rank']).toMatch(/^[01]$/);
    const g = await postJson(`${cluster.url}/generate`, {
      text: ['one', 'two', 'three'],
      sampling_params: { max_new_tokens: 2 },
    });
    expect(g.status).toBe(200);
    expect(g.body).toHaveLength(3);
  });

  it('/flush_cache fans out to every worker behind the admin token', async () => {
    const denied = await postJson(`${cluster.url}/flush_cache`, {});
    expect(denied.status).toBe(401);
    const res = await fetch(`${cluster.url}/flush_cache`, {
      method: 'POST',
      headers: { authorization: `Bearer ${ADMIN}` },
    });
    expect(res.status).toBe(200);
    const body = (await res.json()) as { flushed: number; workers: { status: number }[] };
    expect(body.flushed).toBe(2);
    expect(body.workers.map((w) => w.status)).toEqual([200, 200]);
  });

  it('--pass-through-unknown forwards a path the router does not know', async () => {
    // /v1/loads is not a router route; with pass-through a worker answers it.
    const res = await getText(`${cluster.url}/v1/loads`);
    expect(res.status).toBe(200);
    expect(JSON.parse(res.text)).toMatchObject({ dp_size: 1 });
    const missing = await getText(`${cluster.url}/no/such/path`);
    expect(missing.status).toBe(404);
    expect(JSON.parse(missing.text).error.code).toBe('unknown_url');
  });
});
