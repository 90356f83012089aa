// The mock worker speaks as SGLang (and OpenAI, where SGLang follows it) does: unique ids,
// output_ids and meta_info, batch /generate, SGLang-named metrics, and the routes beside
// inference a router forwards (models by id, tokenize, health_generate, embeddings, rerank,
// the Responses API).
import { approximateTokenIds } from '@kvroute/protocol';
import { afterEach, describe, expect, it } from 'vitest';
import { fillerText, fillerTokenId, promptSeed } from '../src/filler.ts';
import { closeAll, type Json, post, sseEvents, textOfTokens, worker } from './helpers.ts';

afterEach(closeAll);

const chat = (content: string, extra: Record<string, unknown> = {}) => ({
  messages: [{ role: 'user', content }],
  max_tokens: 3,
  ...extra,
});

describe('ids', () => {
  it('are unique across workers and requests, in OpenAI and SGLang formats', async () => {
    const a = worker();
    const b = worker();
    const ids = new Set<string>();
    for (const app of [a, b, a, b]) {
      const c = await post(app, '/v1/chat/completions', chat('same'));
      expect(c.body.id).toMatch(/^chatcmpl-[0-9a-f]{32}$/);
      ids.add(c.body.id);
      const p = await post(app, '/v1/completions', { prompt: 'same', max_tokens: 1 });
      expect(p.body.id).toMatch(/^cmpl-[0-9a-f]{32}$/);
      ids.add(p.body.id);
      const g = await post(app, '/generate', {
        text: 'same',
        sampling_params: { max_new_tokens: 1 },
      });
      expect(g.body.meta_info.id).toMatch(/^[0-9a-f]{32}$/);
      ids.add(g.body.meta_info.id);
    }
    expect(ids.size).toBe(12);
    // A client's rid is kept.
    const r = await post(a, '/generate', { text: 'x', rid: 'mine' });
    expect(r.body.meta_info.id).toBe('mine');
  });
});

describe('/generate as SGLang', () => {
  it('returns output_ids and meta_info; streams cumulative text and ids', async () => {
    const app = worker();
    const r = await post(app, '/generate', { text: 'abc', sampling_params: { max_new_tokens: 4 } });
    const seed = promptSeed(approximateTokenIds('abc'));
    expect(r.body.text).toBe(fillerText(seed, 4));
    expect(r.body.output_ids).toEqual([0, 1, 2, 3].map((i) => fillerTokenId(seed, i)));
    expect(r.body.meta_info).toMatchObject({
      finish_reason: { type: 'length', length: 4 },
      prompt_tokens: 1,
      completion_tokens: 4,
      cached_tokens: 0,
      weight_version: 'default',
      total_retractions: 0,
    });
    expect(typeof r.body.meta_info.e2e_latency).toBe('number');
    const res = await app.inject({
      method: 'POST',
      url: '/generate',
      payload: { text: 'abc', sampling_params: { max_new_tokens: 4 }, stream: true },
    });
    const frames = sseEvents(res.body).filter((e) => e !== '[DONE]') as Json[];
    expect(frames.map((f) => f.output_ids.length)).toEqual([1, 2, 3, 4, 4]);
    expect(frames.at(-1).output_ids).toEqual(r.body.output_ids);
  });

  it('a batch (text list or input_ids lists) answers a list in order, one per prompt', async () => {
    const app = worker({ dpSize: 2 });
    const long = textOfTokens(30);
    const r = await post(app, '/generate', {
      text: [long, `${long}more`, 'other'],
      sampling_params: { max_new_tokens: 2 },
      rid: ['a', 'b', 'c'],
    });
    expect(r.status).toBe(200);
    expect(Array.isArray(r.body)).toBe(true);
    const items = r.body as unknown as Json[];
    expect(items.map((i) => i.meta_info.id)).toEqual(['a', 'b', 'c']);
    expect(items.map((i) => i.meta_info.prompt_tokens)).toEqual([30, 31, 2]);
    expect(items[2].text).toBe(fillerText(promptSeed(approximateTokenIds('other')), 2));
    // Each item is its own request to the internal dispatcher (round robin over 2 ranks).
    expect(items.map((i) => i.meta_info.dp_rank)).toEqual([0, 1, 0]);

    // One rid for the batch: each item's is it with its index, as SGLang names them.
    const one = await post(app, '/generate', { text: ['x', 'y'], rid: 'batch' });
    expect((one.body as unknown as Json[]).map((i) => i.meta_info.id)).toEqual([
      'batch_0',
      'batch_1',
    ]);
    const ids = await post(app, '/generate', { input_ids: [[1, 2, 3], [4]] });
    expect((ids.body as unknown as Json[]).map((i) => i.meta_info.prompt_tokens)).toEqual([3, 1]);
    const bad = await post(app, '/generate', { text: ['ok', ''] });
    expect(bad.status).toBe(400);
    expect(bad.body.error.param).toBe('text[1]');
  });

  it('a streamed batch interleaves frames tagged with their index, then one [DONE]', async () => {
    const app = worker();
    const res = await app.inject({
      method: 'POST',
      url: '/generate',
      payload: { text: ['x', 'y'], sampling_params: { max_new_tokens: 3 }, stream: true },
    });
    const events = sseEvents(res.body) as Json[];
    expect(events.filter((e) => e === '[DONE]')).toHaveLength(1);
    expect(events.at(-1)).toBe('[DONE]');
    const frames = events.slice(0, -1);
    for (const index of [0, 1]) {
      const mine = frames.filter((f) => f.index === index);
      expect(mine.at(-1).meta_info.finish_reason).toEqual({ type: 'length', length: 3 });
      expect(mine.at(-1).text).toBe(
        fillerText(promptSeed(approximateTokenIds(index === 0 ? 'x' : 'y')), 3),
      );
    }
  });
});

describe('SGLang metrics beside kvroute_worker_*', () => {
  it('exports sglang:* names with model_name (and scheduler labels per DP rank)', async () => {
    const app = worker({ dpSize: 2, modelName: 'm1' });
    const text = textOfTokens(20);
    await post(app, '/generate', {
      text,
      sampling_params: { max_new_tokens: 2 },
      routed_dp_rank: 1,
    });
    await post(app, '/generate', {
      text,
      sampling_params: { max_new_tokens: 2 },
      routed_dp_rank: 1,
    });
    const m = (await app.inject('/metrics')).body;
    expect(m).toContain('sglang:prompt_tokens_total{model_name="m1"} 40');
    expect(m).toContain('sglang:cached_tokens_total{model_name="m1"} 19');
    expect(m).toContain('sglang:generation_tokens_total{model_name="m1"} 4');
    expect(m).toContain('sglang:num_requests_total{model_name="m1"} 2');
    expect(m).toContain('sglang:time_to_first_token_seconds_count{model_name="m1"} 2');
    expect(m).toContain('sglang:e2e_request_latency_seconds_count{model_name="m1"} 2');
    const sched = 'model_name="m1",engine_type="unified",tp_rank="0",pp_rank="0"';
    expect(m).toContain(`sglang:num_running_reqs{${sched},dp_rank="0"} 0`);
    expect(m).toContain(`sglang:num_queue_reqs{${sched},dp_rank="1"} 0`);
    expect(m).toContain(`sglang:cache_hit_rate{${sched},dp_rank="1"} 0.475`);
    expect(m).toMatch(/sglang:max_total_num_tokens\{[^}]*dp_rank="0"\} \d+/);
    expect(m).toContain('# TYPE sglang:token_usage gauge');
    // The worker's own family stays.
    expect(m).toContain('kvroute_worker_cached_tokens_total{dp_rank="1"} 19');
  });
});

describe('routes beside inference', () => {
  it('/v1/models/{id}: the card, or 404 model_not_found in OpenAI shape', async () => {
    const app = worker({ modelName: 'm1' });
    const ok = await app.inject('/v1/models/m1');
    expect(ok.json()).toMatchObject({ id: 'm1', object: 'model' });
    const no = await app.inject('/v1/models/gpt-9');
    expect(no.statusCode).toBe(404);
    expect(no.json().error).toMatchObject({
      type: 'invalid_request_error',
      param: 'model',
      code: 'model_not_found',
    });
  });

  it('/tokenize: prompt, prompt list, chat messages; 400 naming a bad prompt', async () => {
    const app = worker();
    const one = await post(app, '/tokenize', { prompt: 'abcdefgh' });
    expect(one.body).toMatchObject({ tokens: [...approximateTokenIds('abcdefgh')], count: 2 });
    expect(one.body.max_model_len).toBe(131072);
    const many = await post(app, '/tokenize', { prompt: ['abcd', 'abcdefgh'] });
    expect(many.body.count).toEqual([1, 2]);
    const msgs = await post(app, '/tokenize', { messages: [{ role: 'user', content: 'hi' }] });
    expect(msgs.body.count).toBeGreaterThan(1);
    const bad = await post(app, '/tokenize', { prompt: 5 });
    expect([bad.status, bad.body.error.param]).toEqual([400, 'prompt']);
  });

  it('/detokenize gives back what /tokenize took, as text (SGLang) and prompt (vLLM); 400 naming bad tokens', async () => {
    const app = worker();
    // Several lengths, so the zero padding of a last group of 1, 2, 3 and 4 bytes is covered,
    // and multi-byte characters.
    for (const text of ['abcdefgh', 'abcde', 'héllo wörld', 'agent 🤖 turn 3\n']) {
      const { tokens } = (await post(app, '/tokenize', { prompt: text })).body;
      const back = await post(app, '/detokenize', { tokens });
      expect(back.status).toBe(200);
      expect(back.body).toEqual({ text, prompt: text });
    }
    for (const tokens of [[1.5], [-1], ['a'], 5, [2 ** 32]]) {
      const bad = await post(app, '/detokenize', { tokens });
      expect([bad.status, bad.body.error.param]).toEqual([400, 'tokens']);
    }
    const badSkip = await post(app, '/detokenize', { tokens: [97], skip_special_tokens: 'yes' });
    expect([badSkip.status, badSkip.body.error.param]).toEqual([400, 'skip_special_tokens']);
  });

  it('/health_generate runs a generation (200), and 503 once --fail-after trips', async () => {
    const app = worker({ failAfter: 0 });
    expect((await app.inject('/health_generate')).statusCode).toBe(200);
    expect(app.mockEngine.activeRequests).toBe(0);
    await post(app, '/generate', { text: 'x' });
    expect((await app.inject('/health_generate')).statusCode).toBe(503);
  });

  it('/get_model_info names the model', async () => {
    const info = (await worker({ modelName: 'm1' }).inject('/get_model_info')).json();
    expect(info).toMatchObject({ model_path: 'm1', is_generation: true });
  });
});

describe('/v1/embeddings', () => {
  it('one unit vector per input, the same for the same text; base64 and dimensions', async () => {
    const app = worker();
    const r = await post(app, '/v1/embeddings', { input: ['hello', 'world', 'hello'], model: 'e' });
    expect(r.body).toMatchObject({ object: 'list', model: 'e', usage: { prompt_tokens: 6 } });
    const data = r.body.data as Json[];
    expect(data.map((d) => d.index)).toEqual([0, 1, 2]);
    expect(data[0].embedding).toHaveLength(256);
    expect(data[0].embedding).toEqual(data[2].embedding);
    expect(data[0].embedding).not.toEqual(data[1].embedding);
    const norm = Math.hypot(...(data[0].embedding as number[]));
    expect(norm).toBeCloseTo(1, 5);
    const b64 = await post(app, '/v1/embeddings', {
      input: 'hello',
      encoding_format: 'base64',
      dimensions: 8,
    });
    const buf = Buffer.from(b64.body.data[0].embedding, 'base64');
    expect(buf.length).toBe(32);
    const floats = Array.from({ length: 8 }, (_, i) => buf.readFloatLE(i * 4));
    const asFloat = await post(app, '/v1/embeddings', { input: 'hello', dimensions: 8 });
    expect(floats).toEqual(asFloat.body.data[0].embedding);
  });

  it('prefills through the engine: a repeated input is a cache hit', async () => {
    const app = worker();
    const text = textOfTokens(40);
    await post(app, '/v1/embeddings', { input: text });
    await post(app, '/v1/embeddings', { input: text });
    const m = (await app.inject('/metrics')).body;
    expect(m).toContain('sglang:cached_tokens_total{model_name="kvroute-mock"} 39');
  });
});

describe('/v1/rerank (SGLang shape)', () => {
  it('scores each document against the query, best first, cut to top_n', async () => {
    const app = worker();
    const r = await post(app, '/v1/rerank', {
      query: 'giant panda bear',
      documents: ['a llama', 'the giant panda is a bear', { text: 'a panda' }],
    });
    const list = r.body as unknown as Json[];
    expect(list.map((x) => x.index)).toEqual([1, 2, 0]);
    expect(list[0]).toMatchObject({ score: 1, document: 'the giant panda is a bear' });
    expect(list[1].score).toBeCloseTo(1 / 3);
    expect(list[0].meta_info.prompt_tokens).toBeGreaterThan(0);
    const top = await post(app, '/v1/rerank', {
      query: 'panda',
      documents: ['x', 'panda'],
      top_n: 1,
      return_documents: false,
    });
    expect(top.body).toEqual([
      expect.objectContaining({ index: 1, score: 1, meta_info: expect.any(Object) }),
    ]);
    expect((top.body as unknown as Json[])[0].document).toBeUndefined();
  });
});

describe('/v1/responses (OpenAI Responses API)', () => {
  it('non-streaming: a response object with the message and usage', async () => {
    const app = worker();
    const r = await post(app, '/v1/responses', {
      model: 'm',
      instructions: 'be brief',
      input: 'hello',
      max_output_tokens: 5,
    });
    expect(r.body.id).toMatch(/^resp_[0-9a-f]{32}$/);
    expect(r.body).toMatchObject({
      object: 'response',
      model: 'm',
      status: 'incomplete',
      incomplete_details: { reason: 'max_output_tokens' },
      instructions: 'be brief',
      max_output_tokens: 5,
      usage: { output_tokens: 5, input_tokens_details: { cached_tokens: 0 } },
    });
    const msg = r.body.output[0];
    expect(msg).toMatchObject({ type: 'message', role: 'assistant' });
    expect(msg.content[0].type).toBe('output_text');
    expect(msg.content[0].text.trim().split(' ')).toHaveLength(5);
  });

  it('streaming: the named events in order with sequence numbers, no [DONE]', async () => {
    const app = worker();
    const res = await app.inject({
      method: 'POST',
      url: '/v1/responses',
      payload: { input: 'hello', max_output_tokens: 3, stream: true },
    });
    const blocks = res.body.split('\n\n').filter(Boolean);
    const names = blocks.map((b) => /^event: (.+)$/m.exec(b)?.[1]);
    expect(names).toEqual([
      'response.created',
      'response.in_progress',
      'response.output_item.added',
      'response.content_part.added',
      'response.output_text.delta',
      'response.output_text.delta',
      'response.output_text.delta',
      'response.output_text.done',
      'response.content_part.done',
      'response.output_item.done',
      'response.incomplete',
    ]);
    const data = blocks.map((b) => JSON.parse(/^data: (.+)$/m.exec(b)?.[1] ?? 'null'));
    expect(data.map((d) => d.sequence_number)).toEqual(data.map((_, i) => i));
    const text = data
      .filter((d) => d.type === 'response.output_text.delta')
      .map((d) => d.delta)
      .join('');
    expect(data.at(-1).response.output[0].content[0].text).toBe(text);
  });
});
