import { afterEach, describe, expect, it } from 'vitest';
import {
  buildBody,
  chatRoutingIds,
  createHttpDriver,
  endpointUrl,
  idsToChatText,
} from '../src/http-driver.ts';
import type { PlanRequest } from '../src/types.ts';
import { type FakeTarget, startFakeTarget } from './validate-fake-target.ts';

const req = (id: number, ids: number[], extra: Partial<PlanRequest> = {}): PlanRequest => ({
  id,
  clientId: 0,
  inputIds: Uint32Array.from(ids),
  outputTokens: 3,
  sessionKey: 's',
  ...extra,
});

let target: FakeTarget | undefined;
afterEach(async () => {
  await target?.close();
  target = undefined;
});

describe('endpointUrl', () => {
  it('joins base and path, tolerating a trailing /v1 and slashes', () => {
    expect(endpointUrl('http://h:1', '/generate').href).toBe('http://h:1/generate');
    expect(endpointUrl('http://h:1/', '/v1/completions').href).toBe('http://h:1/v1/completions');
    expect(endpointUrl('http://h:1/v1/', '/v1/completions').href).toBe('http://h:1/v1/completions');
    expect(endpointUrl('http://h:1/api', '/generate').href).toBe('http://h:1/api/generate');
    // The OpenAI SDK's base URL names the server: its native routes are not under /v1.
    expect(endpointUrl('http://h:1/v1', '/generate').href).toBe('http://h:1/generate');
    expect(endpointUrl('http://h:1/v1/', '/get_server_info').href).toBe(
      'http://h:1/get_server_info',
    );
    expect(endpointUrl('http://h:1/api/v1', '/generate').href).toBe('http://h:1/api/generate');
  });
  it('names a bad target', () => {
    expect(() => endpointUrl('localhost:3000', '/generate')).toThrow(
      /only http:\/\/ and https:\/\//,
    );
    expect(() => endpointUrl('not a url', '/generate')).toThrow(/--target: not a URL: 'not a url'/);
  });
});

describe('request bodies', () => {
  it('generate sends input_ids, max_new_tokens and stream', () => {
    const b = buildBody(req(7, [5, 6, 7]), { target: 'http://x', api: 'generate' });
    expect(b).toMatchObject({
      input_ids: [5, 6, 7],
      stream: true,
      sampling_params: { max_new_tokens: 3, temperature: 0, ignore_eos: true },
    });
  });
  it('completions sends a token-array prompt and asks for usage', () => {
    const b = buildBody(req(7, [5, 6]), { target: 'http://x', api: 'completions', model: 'm' });
    expect(b).toMatchObject({
      model: 'm',
      prompt: [5, 6],
      max_tokens: 3,
      stream: true,
      stream_options: { include_usage: true },
    });
  });
  it('chatRoutingIds are the routing tokenizer ids of the chat text: header, one token per id, tail', () => {
    const ids = chatRoutingIds([1, 2]);
    const le = (s: string) => Buffer.from(s, 'latin1').readUInt32LE(0);
    // "<|us" "er|>" "\nxxx" then "AAB " "AAC " then "\n<|a" "ssis" "tant" "|>\n" (zero-padded).
    expect(ids.length).toBe(3 + 2 + 4);
    expect(ids[0]).toBe(le('<|us'));
    expect(ids[2]).toBe(le('\nxxx'));
    expect(ids[3]).toBe(le('AAB '));
    expect(ids[4]).toBe(le('AAC '));
    expect(ids[8]).toBe(le('|>\n\0'));
    // A shared id prefix is a shared token prefix.
    expect(Array.from(chatRoutingIds([1, 2, 3])).slice(0, 5)).toEqual(Array.from(ids).slice(0, 5));
  });
  it('chat text keeps one 4-byte group per id after the routing header', () => {
    const text = idsToChatText([1, 29999, 4096]);
    // "<|user|>\n" is 9 bytes: 3 bytes of padding align the ids to the tokenizer's groups.
    expect(('<|user|>\n'.length + text.length) % 4).toBe(0);
    expect(text.length).toBe(3 + 3 * 4);
    const groups = text.slice(3).match(/.{4}/g)!;
    expect(new Set(groups).size).toBe(3);
    // Same ids give the same text; a shared id prefix gives a shared text prefix.
    expect(idsToChatText([1, 29999, 5]).startsWith(text.slice(0, 3 + 8))).toBe(true);
  });
});

describe('HTTP driver against a fake target', () => {
  it('streams /generate: TTFT before the end, cached tokens and rank as reported, routing key sent', async () => {
    target = await startFakeTarget({ firstChunkDelayMs: 20, rankHeader: () => 3 });
    const d = createHttpDriver({ target: target.url, api: 'generate' });
    const a = await d.send(req(1, [1, 2, 3, 4, 5, 6]));
    const b = await d.send(req(2, [1, 2, 3, 4, 9], { routingKey: 'sess-1' }));
    d.close();
    expect(a).toMatchObject({
      ok: true,
      status: 200,
      promptTokens: 6,
      cachedTokens: 0,
      outputTokens: 3,
      rank: 3,
    });
    expect(b).toMatchObject({ ok: true, promptTokens: 5, cachedTokens: 4 });
    for (const r of [a, b]) {
      expect(r.firstContentAt).toBeDefined();
      expect(r.firstContentAt!).toBeGreaterThan(r.sentAt);
      expect(r.endAt).toBeGreaterThanOrEqual(r.firstContentAt!);
    }
    expect(target.paths).toEqual(['/generate', '/generate']);
    expect(target.bodies[1]).toMatchObject({ input_ids: [1, 2, 3, 4, 9], stream: true });
    expect(target.headers[0]!['x-routing-key']).toBeUndefined();
    expect(target.headers[1]!['x-routing-key']).toBe('sess-1');
  });

  it('streams /v1/completions and takes cached tokens from the usage chunk', async () => {
    target = await startFakeTarget();
    const d = createHttpDriver({ target: target.url, api: 'completions', model: 'm' });
    await d.send(req(1, [7, 7, 7, 7]));
    const r = await d.send(req(2, [7, 7, 7, 8]));
    d.close();
    expect(r).toMatchObject({ ok: true, promptTokens: 4, cachedTokens: 3, outputTokens: 3 });
    expect(target.paths[0]).toBe('/v1/completions');
  });

  it('chat: a role-only first chunk does not set TTFT', async () => {
    target = await startFakeTarget({ firstChunkDelayMs: 30 });
    const d = createHttpDriver({ target: target.url, api: 'chat', model: 'm' });
    const r = await d.send(req(1, [1, 2]));
    d.close();
    expect(r.ok).toBe(true);
    expect(target.paths[0]).toBe('/v1/chat/completions');
    expect((target.bodies[0]!.messages as { content: string }[])[0]!.content).toBe(
      idsToChatText([1, 2]),
    );
    expect(r.firstContentAt).toBeDefined();
  });

  it('a server that ignores stream: content arrives with the body', async () => {
    target = await startFakeTarget({ ignoreStream: true });
    const d = createHttpDriver({ target: target.url, api: 'generate' });
    const r = await d.send(req(1, [1, 2, 3]));
    d.close();
    expect(r).toMatchObject({ ok: true, promptTokens: 3, cachedTokens: 0 });
    expect(r.firstContentAt).toBeDefined();
  });

  it('an HTTP error keeps the status and the server message', async () => {
    target = await startFakeTarget({ failStatus: 400 });
    const d = createHttpDriver({ target: target.url, api: 'generate' });
    const r = await d.send(req(1, [1]));
    d.close();
    expect(r.ok).toBe(false);
    expect(r.status).toBe(400);
    expect(r.error).toMatch(/HTTP 400 from http:\/\/127\.0\.0\.1:\d+\/generate: input too long/);
  });

  it('an error chunk inside a 200 stream fails the request', async () => {
    target = await startFakeTarget({ streamError: 'out of memory' });
    const d = createHttpDriver({ target: target.url, api: 'generate' });
    const r = await d.send(req(1, [1]));
    d.close();
    expect(r).toMatchObject({ ok: false, status: 200, error: 'out of memory' });
  });

  it('an unreachable target fails with status 0 and names the URL', async () => {
    target = await startFakeTarget();
    const url = target.url;
    await target.close();
    target = undefined;
    const d = createHttpDriver({ target: url, api: 'generate' });
    const r = await d.send(req(1, [1]));
    d.close();
    expect(r.ok).toBe(false);
    expect(r.status).toBe(0);
    expect(r.error).toContain(`cannot reach ${url}/generate`);
    expect(r.error).toContain('ECONNREFUSED');
  });

  it('an abort signal cuts the request short', async () => {
    target = await startFakeTarget({ firstChunkDelayMs: 5_000 });
    const d = createHttpDriver({ target: target.url, api: 'generate' });
    const ac = new AbortController();
    const p = d.send(req(1, [1]), ac.signal);
    setTimeout(() => ac.abort(), 30);
    const r = await p;
    d.close();
    expect(r).toMatchObject({ ok: false, error: 'aborted' });
  });

  it('a per-request timeout fails with a message naming the limit', async () => {
    target = await startFakeTarget({ firstChunkDelayMs: 5_000 });
    const d = createHttpDriver({ target: target.url, api: 'generate', timeoutMs: 50 });
    const r = await d.send(req(1, [1]));
    d.close();
    expect(r.ok).toBe(false);
    expect(r.error).toMatch(/timed out after 50 ms/);
  });
});
