// The KV store PD workers share (SGLang's HiCache storage backend), reply caching for token-id
// prompts, and the prefill / decode roles' use of the store.
import { afterEach, describe, expect, it } from 'vitest';
import { parseMockWorkerArgs, resolveOptions } from '../src/options.ts';
import { KvStoreClient, type RunningKvStore, startKvStore } from '../src/pd/kv-store.ts';
import { type RunningMockWorker, startMockWorker } from '../src/start.ts';

const closers: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const c of closers.splice(0)) await c();
});

async function store(opts: Parameters<typeof startKvStore>[0] = {}): Promise<RunningKvStore> {
  const s = await startKvStore(opts);
  closers.push(() => s.close());
  return s;
}
async function worker(opts: Parameters<typeof startMockWorker>[0]): Promise<RunningMockWorker> {
  const w = await startMockWorker({ timeScale: 0, ...opts });
  closers.push(() => w.close());
  return w;
}
const post = async (url: string, body: unknown) => {
  const res = await fetch(url, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: typeof body === 'string' ? body : JSON.stringify(body),
  });
  // biome-ignore lint/suspicious/noExplicitAny: response bodies are checked field by field
  return { status: res.status, body: JSON.parse(await res.text()) as any };
};
const range = (from: number, n: number) => Array.from({ length: n }, (_, i) => from + i);

describe('the KV store', () => {
  it('matches the longest stored prefix, counts, and evicts at its capacity', async () => {
    const s = await store({ capacityTokens: 100 });
    const client = new KvStoreClient(s.url);
    expect(await client.match(range(1, 10))).toBe(0);
    await client.write(range(1, 60));
    expect(await client.match(range(1, 80))).toBe(60);
    expect(await client.match([1, 2, 3, 99])).toBe(3);
    // A second path over the capacity evicts the least recently used part of the first.
    await client.write(range(1000, 60));
    const st = s.stats();
    expect(st.used_tokens).toBeLessThanOrEqual(100);
    expect(st.writes).toBe(2);
    expect(st.matches).toBe(3);
    expect(await client.match(range(1000, 60))).toBe(60);
    expect((await fetch(`${s.url}/flush_cache`, { method: 'POST' })).status).toBe(200);
    expect(await client.match(range(1000, 60))).toBe(0);
  });

  it('answers bad bodies and unknown routes with errors naming what is wrong', async () => {
    const s = await store();
    const notJson = await post(`${s.url}/match`, 'nope');
    expect(notJson.status).toBe(400);
    expect(notJson.body.error).toMatch(/JSON like/);
    const noIds = await post(`${s.url}/write`, { ids: [1] });
    expect(noIds.status).toBe(400);
    expect(noIds.body.error).toContain("'input_ids'");
    const badId = await post(`${s.url}/write`, { input_ids: [1, -2] });
    expect(badId.status).toBe(400);
    expect(badId.body.error).toContain("'input_ids[1]'");
    const other = await fetch(`${s.url}/nothing`);
    expect(other.status).toBe(404);
    expect(await other.text()).toContain('POST /match');
    expect(s.stats().writes).toBe(0);
    await expect(startKvStore({ capacityTokens: 0 })).rejects.toThrow(/capacity/);
    await expect(new KvStoreClient('http://127.0.0.1:1').match([1])).rejects.toThrow(
      /KV store http:\/\/127.0.0.1:1\/match/,
    );
  });
});

describe('worker options for the store', () => {
  it('parses --kv-store, --kv-store-gbps and --decode-offload (and SGLang spelling)', () => {
    const p = resolveOptions(
      parseMockWorkerArgs([
        '--role',
        'prefill',
        '--kv-store',
        'http://h:1/',
        '--kv-store-gbps',
        '25',
      ]).options,
    );
    expect(p.kvStore).toBe('http://h:1');
    expect(p.kvStoreGbps).toBe(25);
    const d = resolveOptions(
      parseMockWorkerArgs([
        '--role',
        'decode',
        '--kv-store',
        'http://h:1',
        '--disaggregation-decode-enable-offload-kvcache',
      ]).options,
    );
    expect(d.decodeOffload).toBe(true);
  });

  it('refuses a store without a PD role, a bad URL, and offload without a store or on prefill', () => {
    expect(() => resolveOptions({ kvStore: 'http://h:1' })).toThrow(
      /--role prefill or --role decode/,
    );
    expect(() => resolveOptions({ role: 'prefill', kvStore: 'h:1' })).toThrow(/http:\/\/ URL/);
    expect(() => resolveOptions({ role: 'decode', decodeOffload: true })).toThrow(/--kv-store URL/);
    expect(() =>
      resolveOptions({ role: 'prefill', kvStore: 'http://h:1', decodeOffload: true }),
    ).toThrow(/--role decode/);
    expect(() =>
      resolveOptions({ role: 'prefill', kvStore: 'http://h:1', kvStoreGbps: 0 }),
    ).toThrow(/kvStoreGbps/);
  });
});

describe('reply caching', () => {
  it('caches a token-id prompt with its reply, so the next turn hits both', async () => {
    const w = await worker({});
    const prompt = range(100, 200);
    const first = await post(`${w.url}/generate`, {
      input_ids: prompt,
      sampling_params: { max_new_tokens: 16 },
    });
    expect(first.status).toBe(200);
    const reply: number[] = first.body.output_ids;
    expect(reply.length).toBe(16);
    const next = await post(`${w.url}/generate`, {
      input_ids: [...prompt, ...reply, 7, 8, 9],
      sampling_params: { max_new_tokens: 4 },
    });
    // The prompt and the reply up to its last token (whose KV was never computed).
    expect(next.body.meta_info.cached_tokens).toBe(prompt.length + reply.length - 1);
  });

  it('does not for a text prompt (its reply does not tokenize back to the same ids)', async () => {
    const w = await worker({});
    const cache = w.app.mockEngine.ranks[0]!.cache;
    const text = await post(`${w.url}/generate`, {
      text: 'a long shared system prompt '.repeat(20),
      sampling_params: { max_new_tokens: 16 },
    });
    expect(text.status).toBe(200);
    // The prompt's path only.
    expect(cache.used).toBe(text.body.meta_info.prompt_tokens);
    expect((await fetch(`${w.url}/flush_cache`, { method: 'POST' })).status).toBe(200);
    const ids = await post(`${w.url}/generate`, {
      input_ids: range(5, 90),
      sampling_params: { max_new_tokens: 16 },
    });
    expect(ids.status).toBe(200);
    expect(cache.used).toBe(90 + 16 - 1);
  });
});
