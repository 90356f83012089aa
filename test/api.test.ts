// (e) --dp-aware sets routed_dp_rank and the mock worker serves on that rank; (f) bad requests
// get the right 4xx in OpenAI's shape, and a rank override without the flag gets 403;
// (g) admin routes refuse a missing or wrong token. All over loopback HTTP.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type Cluster, getText, metricValue, postJson, startCluster } from './helpers/cluster.ts';

describe('--dp-aware in front of one DP-attention worker', () => {
  let cluster: Cluster;
  beforeAll(async () => {
    cluster = await startCluster({
      workers: 1,
      worker: { dpSize: 4 },
      dpAware: true,
      routerArgs: ['--load-balance-method', 'round_robin'],
    });
  });
  afterAll(async () => {
    await cluster?.close();
  });

  it('reads dp_size from /get_server_info and each request is served on the rank the router chose', async () => {
    expect(cluster.router.kvroute.table.size).toBe(4);
    const served = new Map<number, number>();
    for (let i = 0; i < 8; i++) {
      const res = await postJson(`${cluster.url}/generate`, {
        text: `q${i}`,
        sampling_params: { max_new_tokens: 2 },
      });
      expect(res.status).toBe(200);
      const routed = Number(res.headers['x-kvroute-rank']);
      expect(res.body.meta_info.dp_rank).toBe(routed);
      served.set(routed, (served.get(routed) ?? 0) + 1);
    }
    expect([...served.entries()].sort()).toEqual([
      [0, 2],
      [1, 2],
      [2, 2],
      [3, 2],
    ]);
    // The worker's own per-DP-rank counters agree (it did not re-dispatch internally).
    const workerMetrics = (await getText(`${cluster.workers[0]!.url}/metrics`)).text;
    for (let dp = 0; dp < 4; dp++) {
      expect(workerMetrics).toMatch(
        new RegExp(`kvroute_worker_prompt_tokens_total\\{dp_rank="${dp}"\\} [1-9]`),
      );
    }
  });

  it('OpenAI chat requests carry routed_dp_rank too', async () => {
    const res = await postJson(`${cluster.url}/v1/chat/completions`, {
      messages: [{ role: 'user', content: 'hi' }],
      max_tokens: 2,
    });
    expect(res.status).toBe(200);
    expect(res.headers['x-kvroute-rank']).toMatch(/^[0-3]$/);
    // The worker says which DP rank served it (its own header, forwarded): the router's choice.
    expect(res.headers['x-kvroute-dp-rank']).toBe(res.headers['x-kvroute-rank']);
  });
});

describe('client errors and admin routes', () => {
  let cluster: Cluster;
  beforeAll(async () => {
    cluster = await startCluster({
      workers: 4,
      worker: { maxContext: 1000 },
      routerArgs: ['--admin-token', 'secret-token', '--max-body-bytes', '65536'],
    });
  });
  afterAll(async () => {
    await cluster?.close();
  });

  const chatUrl = () => `${cluster.url}/v1/chat/completions`;

  it.each([
    [
      'malformed JSON',
      '/v1/chat/completions',
      '{"messages": [{"role": "user", ',
      400,
      'invalid_json',
      null,
    ],
    ['a JSON array', '/v1/completions', '[1,2]', 400, 'invalid_body', null],
    [
      'missing messages',
      '/v1/chat/completions',
      { model: 'm' },
      400,
      'missing_required_parameter',
      'messages',
    ],
    [
      'messages of the wrong type',
      '/v1/chat/completions',
      { messages: 'hello' },
      400,
      'invalid_type',
      'messages',
    ],
    [
      'stream of the wrong type',
      '/v1/completions',
      { prompt: 'x', stream: 'yes' },
      400,
      'invalid_type',
      'stream',
    ],
    [
      'missing prompt',
      '/v1/completions',
      { max_tokens: 3 },
      400,
      'missing_required_parameter',
      'prompt',
    ],
    [
      'input_ids of the wrong type',
      '/generate',
      { input_ids: ['a'] },
      400,
      undefined,
      'input_ids[0]',
    ],
  ])('%s', async (_name, path, body, status, code, param) => {
    const res = await postJson(`${cluster.url}${path}`, body);
    expect(res.status).toBe(status);
    expect(res.body.error).toMatchObject({ type: 'invalid_request_error', param });
    if (code) expect(res.body.error.code).toBe(code);
    expect(res.body.error.message.length).toBeGreaterThan(10);
  });

  it('oversize body -> 413', async () => {
    const res = await postJson(chatUrl(), {
      messages: [{ role: 'user', content: 'x'.repeat(70_000) }],
    });
    expect(res.status).toBe(413);
    expect(res.body.error).toMatchObject({
      code: 'payload_too_large',
      type: 'invalid_request_error',
    });
  });

  it('a worker 400 (context length) passes through unchanged', async () => {
    const res = await postJson(chatUrl(), {
      messages: [{ role: 'user', content: 'y'.repeat(8000) }],
    });
    expect(res.status).toBe(400);
    expect(res.body.error.code).toBe('context_length_exceeded');
  });

  it('unknown route -> 404', async () => {
    const res = await postJson(`${cluster.url}/v1/audio/speech`, { input: 'x' });
    expect(res.status).toBe(404);
    expect(res.body.error).toMatchObject({ code: 'unknown_url', type: 'invalid_request_error' });
    expect((await getText(`${cluster.url}/v2/nothing`)).status).toBe(404);
  });

  it('rank override without --allow-rank-override -> 403 naming the flag', async () => {
    const viaHeader = await postJson(
      chatUrl(),
      { messages: [{ role: 'user', content: 'x' }] },
      { 'X-Data-Parallel-Rank': '2' },
    );
    expect(viaHeader.status).toBe(403);
    expect(viaHeader.body.error).toMatchObject({
      type: 'permission_error',
      code: 'rank_override_forbidden',
    });
    expect(viaHeader.body.error.message).toContain('--allow-rank-override');
    const viaBody = await postJson(`${cluster.url}/generate`, { text: 'x', routed_dp_rank: 1 });
    expect(viaBody.status).toBe(403);
    const metrics = (await getText(`${cluster.url}/metrics`)).text;
    expect(
      metricValue(
        metrics,
        'kvroute_router_requests_total{route="/generate",rank="none",reason="none",status="403"}',
      ),
    ).toBe(1);
  });

  it('admin routes refuse a missing or wrong token', async () => {
    const missing = await getText(`${cluster.url}/ranks`);
    expect(missing.status).toBe(401);
    expect(JSON.parse(missing.text).error.code).toBe('unauthorized');
    const wrong = await getText(`${cluster.url}/ranks`, { authorization: 'Bearer secret-tokeN' });
    expect(wrong.status).toBe(403);
    const basic = await getText(`${cluster.url}/ranks`, {
      authorization: 'Basic c2VjcmV0LXRva2Vu',
    });
    expect(basic.status).toBe(403);
    const post = await postJson(`${cluster.url}/ranks`, {
      action: 'remove',
      url: cluster.workers[0]!.url,
    });
    expect(post.status).toBe(401);
    expect(cluster.router.kvroute.table.info().every((r) => !r.removed)).toBe(true);

    const ok = await getText(`${cluster.url}/ranks`, { authorization: 'Bearer secret-token' });
    expect(ok.status).toBe(200);
    expect(JSON.parse(ok.text).ranks).toHaveLength(4);
  });
});
