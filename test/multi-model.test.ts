// Two worker groups serving different model names behind one router, through the official
// OpenAI Node SDK: each model's requests reach only its own group's mock workers (chat, plain
// and streaming, completions, embeddings, responses), models.list shows both, an unknown model
// is the SDK's NotFoundError with OpenAI's code, and /metrics labels ranks by model.
import type { AddressInfo } from 'node:net';
import { type RunningMockWorker, startMockWorker } from '@kvroute/mock-worker';
import { buildRouter, resolveConfig } from '@kvroute/router';
import OpenAI, { NotFoundError } from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

let router: ReturnType<typeof buildRouter>;
let client: OpenAI;
let alpha: RunningMockWorker[];
let beta: RunningMockWorker[];
let base: string;

beforeAll(async () => {
  const start = (modelName: string) =>
    Promise.all([0, 1].map(() => startMockWorker({ timeScale: 0, modelName })));
  alpha = await start('alpha-7b');
  beta = await start('beta-1b');
  const config = resolveConfig([
    '--health-check-interval-ms',
    '0',
    '--model-group',
    `alpha-7b=${alpha.map((w) => w.url).join(',')};method=round_robin`,
    `beta-1b=${beta.map((w) => w.url).join(',')};method=cache_aware;aliases=beta`,
  ]);
  router = buildRouter(config);
  await router.listen({ host: '127.0.0.1', port: 0 });
  base = `http://127.0.0.1:${(router.server.address() as AddressInfo).port}`;
  client = new OpenAI({ baseURL: `${base}/v1`, apiKey: 'unused', maxRetries: 0 });
});
afterAll(async () => {
  await router?.close();
  await Promise.all([...(alpha ?? []), ...(beta ?? [])].map((w) => w.close()));
});

/** Requests each group's workers have served (their own /metrics counters). */
async function served(ws: RunningMockWorker[]): Promise<number> {
  let n = 0;
  for (const w of ws) {
    const text = await (await fetch(`${w.url}/metrics`)).text();
    for (const m of text.matchAll(/^kvroute_worker_requests_total\{[^}]*\} (\d+)/gm))
      n += Number(m[1]);
  }
  return n;
}

describe('two models behind one router (OpenAI SDK)', () => {
  it('chat goes to the group of the model asked for, and answers as that model', async () => {
    const [a0, b0] = [await served(alpha), await served(beta)];
    for (let i = 0; i < 4; i++) {
      const r = await client.chat.completions.create({
        model: 'alpha-7b',
        messages: [{ role: 'user', content: `alpha question ${i}` }],
        max_tokens: 3,
      });
      expect(r.model).toBe('alpha-7b');
    }
    const b = await client.chat.completions.create({
      model: 'beta',
      messages: [{ role: 'user', content: 'beta question' }],
      max_tokens: 3,
    });
    // The worker answers with the name it was sent (the alias is forwarded as the client wrote it).
    expect(b.model).toBe('beta');
    expect((await served(alpha)) - a0).toBe(4);
    expect((await served(beta)) - b0).toBe(1);
  });

  it('streaming chat, completions, embeddings and responses are routed by model too', async () => {
    const b0 = await served(beta);
    const a0 = await served(alpha);
    const stream = await client.chat.completions.create({
      model: 'beta-1b',
      messages: [{ role: 'user', content: 'stream it' }],
      max_tokens: 4,
      stream: true,
    });
    let text = '';
    for await (const chunk of stream) text += chunk.choices[0]?.delta.content ?? '';
    expect(text.trim().split(/\s+/)).toHaveLength(4);
    const c = await client.completions.create({ model: 'beta-1b', prompt: 'once', max_tokens: 2 });
    expect(c.model).toBe('beta-1b');
    const e = await client.embeddings.create({ model: 'alpha-7b', input: 'embed this' });
    expect(e.data).toHaveLength(1);
    const r = await client.responses.create({
      model: 'beta-1b',
      input: 'respond',
      max_output_tokens: 3,
    });
    // Three output tokens end the answer by its limit: OpenAI's 'incomplete'.
    expect(r.model).toBe('beta-1b');
    expect(r.output_text.trim().split(/\s+/)).toHaveLength(3);
    expect((await served(beta)) - b0).toBe(3);
    expect((await served(alpha)) - a0).toBe(1);
  });

  it('models.list shows both models (and the alias); an unknown model is NotFoundError', async () => {
    const list = await client.models.list();
    expect(list.data.map((m) => m.id)).toEqual(['alpha-7b', 'beta-1b', 'beta']);
    const m = await client.models.retrieve('beta-1b');
    expect(m.id).toBe('beta-1b');
    const err = await client.chat.completions
      .create({ model: 'gamma', messages: [{ role: 'user', content: 'hi' }] })
      .catch((e: unknown) => e);
    expect(err).toBeInstanceOf(NotFoundError);
    expect((err as NotFoundError).code).toBe('model_not_found');
    expect((err as NotFoundError).message).toContain('The model `gamma` does not exist.');
    const missing = await client.models.retrieve('gamma').catch((e: unknown) => e);
    expect(missing).toBeInstanceOf(NotFoundError);
  });

  it("/metrics labels each rank with its group's model", async () => {
    const text = await (await fetch(`${base}/metrics`)).text();
    expect(text).toMatch(/kvroute_router_rank_healthy\{rank="0",[^}]*model="alpha-7b"\} 1/);
    expect(text).toMatch(/kvroute_router_rank_healthy\{rank="3",[^}]*model="beta-1b"\} 1/);
  });
});
