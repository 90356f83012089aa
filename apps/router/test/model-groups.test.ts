// Worker groups keyed by model: the config forms (YAML `models:`, --model-group), routing by
// the body's `model` to the group's own workers and policy, OpenAI's 404 for a model no group
// serves, the default group for requests without one, /v1/models merged per group, and the
// admin API adding a worker to a named group.
import type { FastifyInstance } from 'fastify';
import { afterEach, describe, expect, it } from 'vitest';
import { resolveConfig } from '../src/config.ts';
import { buildRouter } from '../src/router.ts';
import { type FakeWorker, startFakeWorker } from './helpers/fake-worker.ts';

const cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  while (cleanups.length) await cleanups.pop()!();
});

async function workers(n: number, name: string): Promise<FakeWorker[]> {
  const ws = await Promise.all(Array.from({ length: n }, () => startFakeWorker({ name })));
  for (const w of ws) cleanups.push(() => w.close());
  return ws;
}

async function router(argv: string[], files: Record<string, string> = {}) {
  const config = resolveConfig(['--health-check-interval-ms', '0', ...argv], {}, (p) => {
    const text = files[p];
    if (text === undefined) throw new Error(`no such file ${p}`);
    return text;
  });
  const app = buildRouter(config);
  cleanups.push(() => app.close());
  await app.ready();
  return app;
}

const chat = (model: string | undefined, content = 'hello') => ({
  ...(model === undefined ? {} : { model }),
  messages: [{ role: 'user', content }],
  max_tokens: 4,
});

function post(app: FastifyInstance, url: string, payload: unknown, headers = {}) {
  return app.inject({
    method: 'POST',
    url,
    payload: JSON.stringify(payload),
    headers: { 'content-type': 'application/json', ...headers },
  });
}

describe('model groups: config', () => {
  it('reads YAML models: with per-group method and options on top of the top-level ones', () => {
    const yaml = `
load-balance-method: cache_aware
models:
  - model: llama
    aliases: [llama-3]
    worker-urls: [http://a:1, http://b:1/]
    load-balance-method: prefix_match
    window: 8
  - model: qwen
    default: true
    worker-urls: [http://c:1]
`;
    const cfg = resolveConfig(['--config', 'r.yaml'], {}, () => yaml);
    expect(cfg.modelGroups).toHaveLength(2);
    expect(cfg.modelGroups[0]).toMatchObject({
      model: 'llama',
      aliases: ['llama-3'],
      workerUrls: ['http://a:1', 'http://b:1'],
      loadBalanceMethod: 'prefix_match',
      methodOptions: { window: 8 },
      default: false,
    });
    expect(cfg.modelGroups[1]).toMatchObject({ model: 'qwen', default: true });
    // The groups' workers, in order, are the router's workers.
    expect(cfg.workerUrls).toEqual(['http://a:1', 'http://b:1', 'http://c:1']);
  });

  it('reads the flag form NAME=URL,URL;key=value (repeatable, values up to the next flag)', () => {
    const cfg = resolveConfig([
      '--model-group',
      'llama=http://a:1,http://b:1;method=round_robin',
      'qwen=http://c:1;default',
      '--model-group=mistral=http://d:1;window=16',
    ]);
    expect(cfg.modelGroups.map((g) => [g.model, g.workerUrls, g.default])).toEqual([
      ['llama', ['http://a:1', 'http://b:1'], false],
      ['qwen', ['http://c:1'], true],
      ['mistral', ['http://d:1'], false],
    ]);
    expect(cfg.modelGroups[0]!.loadBalanceMethod).toBe('round_robin');
    expect(cfg.modelGroups[2]!.methodOptions).toEqual({ window: 16 });
  });

  it('names what is wrong in a bad group', () => {
    const bad = (argv: string[], yaml?: string) => () =>
      resolveConfig(yaml ? ['--config', 'r.yaml', ...argv] : argv, {}, () => yaml ?? '');
    expect(bad(['--model-group', 'http://a:1'])).toThrow(/NAME=URL/);
    expect(bad(['--model-group', 'a=http://x:1;port=3'])).toThrow(/"port" is not a per-model key/);
    expect(bad(['--model-group', 'a=ftp://x:1'])).toThrow(/must be http/);
    expect(bad(['--model-group', 'a=http://x:1', 'b=http://x:1'])).toThrow(
      /worker http:\/\/x:1 is listed in "a" and "b"/,
    );
    expect(bad(['--model-group', 'a=http://x:1', 'a=http://y:1'])).toThrow(
      /the name "a" is used by/,
    );
    expect(bad(['--model-group', 'a=http://x:1', '--worker-urls', 'http://y:1'])).toThrow(
      /list each worker under its group/,
    );
    expect(bad([], 'models:\n  - worker-urls: [http://x:1]\n')).toThrow(/'model' is required/);
    expect(bad([], 'models:\n  - model: a\n    window: -1\n')).toThrow(/window: must be >= /);
    expect(bad([], 'models:\n  - model: a\n    default: 3\n')).toThrow(/'default' must be/);
  });

  it('an unknown method in a group is refused at build time with the group named', () => {
    const cfg = resolveConfig(['--model-group', 'a=http://x:1;method=nope']);
    expect(() => buildRouter(cfg)).toThrow(/models: "a": unknown method "nope"/);
  });
});

describe('model groups: routing', () => {
  async function twoGroups() {
    const llama = await workers(2, 'llama');
    const qwen = await workers(2, 'qwen');
    const app = await router([
      '--admin-token',
      'tok-tok-tok',
      '--model-group',
      `llama=${llama.map((w) => w.url).join(',')};method=round_robin`,
      `qwen=${qwen.map((w) => w.url).join(',')};method=total_requests;aliases=qwen-2`,
    ]);
    return { app, llama, qwen };
  }

  it('sends each model to its own group, with its own method, and the default without a model', async () => {
    const { app, llama, qwen } = await twoGroups();
    for (let i = 0; i < 6; i++) {
      const r = await post(app, '/v1/chat/completions', chat('llama', `q${i}`));
      expect(r.statusCode).toBe(200);
      expect(r.headers['x-kvroute-reason']).toBe('round-robin');
    }
    for (let i = 0; i < 4; i++) {
      const r = await post(app, '/v1/chat/completions', chat(i % 2 ? 'qwen' : 'qwen-2', `q${i}`));
      expect(r.statusCode).toBe(200);
      expect(r.headers['x-kvroute-reason']).not.toBe('round-robin');
    }
    // Without a model: the default group (the first one listed).
    const r = await post(app, '/v1/completions', { prompt: 'no model', max_tokens: 2 });
    expect(r.statusCode).toBe(200);
    const count = (ws: FakeWorker[]) => ws.reduce((n, w) => n + w.received.length, 0);
    expect(count(llama)).toBe(7);
    expect(count(qwen)).toBe(4);
    // Round robin within the group: both llama workers served.
    expect(llama.every((w) => w.received.length >= 3)).toBe(true);
    // Every request kind is routed by its model.
    for (const w of qwen) {
      w.handlers.set('POST /v1/embeddings', (_q, res) => {
        res.writeHead(200, { 'content-type': 'application/json' });
        res.end(JSON.stringify({ object: 'list', data: [], model: 'qwen' }));
      });
    }
    const kinds: [string, object][] = [
      ['/generate', { model: 'qwen', text: 'x', sampling_params: { max_new_tokens: 2 } }],
      ['/v1/embeddings', { model: 'qwen', input: 'embed me' }],
    ];
    for (const [url, body] of kinds) {
      const before = count(qwen);
      const res = await post(app, url, body);
      expect(res.statusCode, url).toBe(200);
      expect(count(qwen), url).toBe(before + 1);
    }
  });

  it("an unknown model is a 404 in OpenAI's shape and reaches no worker", async () => {
    const { app, llama, qwen } = await twoGroups();
    const r = await post(app, '/v1/chat/completions', chat('gpt-17'));
    expect(r.statusCode).toBe(404);
    expect(r.json()).toEqual({
      error: {
        message: 'The model `gpt-17` does not exist.',
        type: 'invalid_request_error',
        param: 'model',
        code: 'model_not_found',
      },
    });
    expect([...llama, ...qwen].every((w) => w.received.length === 0)).toBe(true);
    const card = await app.inject({ method: 'GET', url: '/v1/models/gpt-17' });
    expect(card.statusCode).toBe(404);
    expect(card.json().error.code).toBe('model_not_found');
  });

  it("/v1/models lists every name once, the workers' card when they list it, else the configured name", async () => {
    const { app, qwen } = await twoGroups();
    const r = await app.inject({ method: 'GET', url: '/v1/models' });
    expect(r.statusCode).toBe(200);
    const data = r.json().data as { id: string; owned_by?: string }[];
    expect(data.map((c) => c.id)).toEqual(['llama', 'qwen', 'qwen-2']);
    // qwen-2 is an alias no worker lists: a card from the configuration.
    expect(data[2]!.owned_by).toBe('kvroute-router');
    expect(data[1]!.owned_by).toBeUndefined();
    // With the group's workers unreachable, its name is still listed.
    for (const w of qwen) await w.close();
    const again = (await app.inject({ method: 'GET', url: '/v1/models' })).json();
    expect(again.data.map((c: { id: string }) => c.id)).toEqual(['llama', 'qwen', 'qwen-2']);
  });

  it('a group whose workers are all down fails alone; the other keeps serving', async () => {
    const { app, qwen } = await twoGroups();
    for (const w of qwen) await w.close();
    const down = await post(app, '/v1/chat/completions', chat('qwen'));
    expect(down.statusCode).toBeGreaterThanOrEqual(502);
    const up = await post(app, '/v1/chat/completions', chat('llama'));
    expect(up.statusCode).toBe(200);
  });

  it('an explicit rank of another group is refused', async () => {
    const llama = await workers(1, 'llama');
    const qwen = await workers(1, 'qwen');
    const app = await router([
      '--allow-rank-override',
      '--model-group',
      `llama=${llama[0]!.url}`,
      `qwen=${qwen[0]!.url}`,
    ]);
    const r = await post(app, '/v1/chat/completions', { ...chat('llama'), routed_dp_rank: 1 });
    expect(r.statusCode).toBe(400);
    expect(r.json().error.message).toMatch(/serves another model than "llama"/);
    const ok = await post(app, '/v1/chat/completions', { ...chat('qwen'), routed_dp_rank: 1 });
    expect(ok.statusCode).toBe(200);
  });

  it('admin POST /ranks adds a worker to the named group; GET /ranks shows the groups', async () => {
    const { app } = await twoGroups();
    const [extra] = await workers(1, 'qwen');
    const auth = { authorization: 'Bearer tok-tok-tok' };
    const bad = await post(app, '/ranks', { action: 'add', url: extra!.url, model: 'nope' }, auth);
    expect(bad.statusCode).toBe(400);
    expect(bad.json().error.message).toMatch(/'model' must name a worker group/);
    const added = await post(
      app,
      '/ranks',
      { action: 'add', url: extra!.url, model: 'qwen' },
      auth,
    );
    expect(added.statusCode).toBe(200);
    const groups = added.json().models as { model: string; ranks: number[]; method: string }[];
    expect(groups.map((g) => [g.model, g.ranks, g.method])).toEqual([
      ['llama', [0, 1], 'round_robin'],
      ['qwen', [2, 3, 4], 'total_requests'],
    ]);
    // Requests for qwen now reach it too; llama never does.
    for (let i = 0; i < 6; i++) await post(app, '/v1/chat/completions', chat('qwen', `x${i}`));
    expect(extra!.received.length).toBeGreaterThan(0);
    const before = extra!.received.length;
    for (let i = 0; i < 4; i++) await post(app, '/v1/chat/completions', chat('llama', `y${i}`));
    expect(extra!.received.length).toBe(before);
  });

  it("per-rank metrics carry the group's model name", async () => {
    const { app } = await twoGroups();
    await post(app, '/v1/chat/completions', chat('qwen'));
    const text = (await app.inject({ method: 'GET', url: '/metrics' })).body;
    expect(text).toMatch(/kvroute_router_rank_healthy\{rank="0",[^}]*model="llama"\} 1/);
    expect(text).toMatch(/kvroute_router_rank_healthy\{rank="2",[^}]*model="qwen"\} 1/);
  });
});
