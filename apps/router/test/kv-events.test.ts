import { startMockWorker } from '@kvroute/mock-worker';
import { approximateTokenIds } from '@kvroute/protocol';
import {
  encodeKvEventBatch,
  encodeSeq,
  type KvCacheEvent,
  type KvEventBatch,
} from '@kvroute/protocol/kv-events';
import { afterEach, describe, expect, it } from 'vitest';
import { Publisher, Router } from 'zeromq';
import { resolveConfig } from '../src/config.ts';
import { KvEventStream, loadZmq } from '../src/kv-events/subscriber.ts';
import { buildRouter } from '../src/router.ts';

const cleanups: (() => Promise<unknown> | unknown)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
async function until(pred: () => boolean, what: string): Promise<void> {
  for (let i = 0; i < 300 && !pred(); i++) await sleep(10);
  if (!pred()) throw new Error(`timed out waiting for ${what}`);
}

/** A hand-driven engine publisher: PUB + ROUTER replay over a buffer we control. */
async function fakeEngine() {
  const pub = new Publisher({ linger: 0 });
  await pub.bind('tcp://127.0.0.1:*');
  const router = new Router({ linger: 0 });
  await router.bind('tcp://127.0.0.1:*');
  const buffer: { seq: number; payload: Buffer }[] = [];
  const replays: number[] = [];
  void (async () => {
    try {
      for await (const [id, , start] of router) {
        const from = Number((start as Buffer).readBigUInt64BE(0));
        replays.push(from);
        for (const b of buffer) {
          if (b.seq >= from)
            await router.send([id as Buffer, Buffer.alloc(0), encodeSeq(b.seq), b.payload]);
        }
        await router.send([id as Buffer, Buffer.alloc(0), encodeSeq(-1), Buffer.alloc(0)]);
      }
    } catch {
      // closed
    }
  })();
  const engine = {
    endpoint: pub.lastEndpoint as string,
    replayEndpoint: router.lastEndpoint as string,
    replays,
    buffer,
    /** Buffers batch `seq`; sends it on the PUB socket unless `drop`. */
    async publish(seq: number, events: KvCacheEvent[], drop = false): Promise<void> {
      const payload = encodeKvEventBatch({ ts: Date.now() / 1000, events });
      buffer.push({ seq, payload });
      if (!drop) await pub.send([Buffer.alloc(0), encodeSeq(seq), payload]);
    },
    /** Sends these exact bytes as batch `seq`, without buffering them. */
    async resend(seq: number, payload: Buffer): Promise<void> {
      await pub.send([Buffer.alloc(0), encodeSeq(seq), payload]);
    },
    close() {
      pub.close();
      router.close();
    },
  };
  cleanups.push(() => engine.close());
  return engine;
}

const stored = (h: number, parent: number | null, tokens: number[]): KvCacheEvent => ({
  type: 'BlockStored',
  blockHashes: [h],
  parentBlockHash: parent,
  tokenIds: tokens,
  blockSize: tokens.length,
  loraId: null,
  medium: 'GPU',
});

const zmq = await loadZmq();

function collect(endpoint: string, replayEndpoint?: string) {
  const got: { batch: KvEventBatch; replayed: boolean }[] = [];
  const resets: string[] = [];
  const stream = new KvEventStream(
    zmq,
    { endpoint, replayEndpoint, topic: '', replayTimeoutMs: 1000 },
    {
      batch: (batch, replayed) => got.push({ batch, replayed }),
      reset: (why) => resets.push(why),
      warn: () => {},
    },
  );
  stream.start();
  cleanups.push(() => stream.close());
  return { stream, got, resets };
}

describe('KvEventStream', () => {
  it('fills a sequence gap from the replay endpoint, in order', async () => {
    const e = await fakeEngine();
    const s = collect(e.endpoint, e.replayEndpoint);
    await until(() => s.stream.connected, 'connect');
    await sleep(100);
    await e.publish(0, [stored(1, null, [1, 2])]);
    await until(() => s.got.length === 1, 'batch 0');
    await e.publish(1, [stored(2, 1, [3, 4])], true);
    await e.publish(2, [stored(3, 2, [5, 6])], true);
    await e.publish(3, [stored(4, 3, [7, 8])]);
    await until(() => s.got.length === 4, 'gap filled');
    expect(s.got.map((g) => g.replayed)).toEqual([false, true, true, false]);
    expect(s.stream.counters).toMatchObject({
      gaps: 1,
      replayedBatches: 2,
      missedBatches: 0,
      batches: 2,
    });
    // The join replay (an empty buffer then), then the gap's.
    expect(e.replays).toEqual([0, 1]);
    expect(s.stream.lastSeq).toBe(3);
  });

  it("learns a warm engine's history when it connects, without waiting for a live batch", async () => {
    const e = await fakeEngine();
    e.buffer.push({
      seq: 0,
      payload: encodeKvEventBatch({ ts: 1, events: [stored(1, null, [1, 2])] }),
    });
    e.buffer.push({
      seq: 1,
      payload: encodeKvEventBatch({ ts: 1, events: [stored(2, 1, [3, 4])] }),
    });
    const s = collect(e.endpoint, e.replayEndpoint);
    // Nothing is published: the engine is idle (or serves only full hits).
    await until(() => s.got.length === 2, 'the history');
    expect(s.got.map((g) => g.replayed)).toEqual([true, true]);
    expect(s.stream.lastSeq).toBe(1);
    // A live batch the replay already gave (published while it ran) is not applied twice,
    // nor taken for a publisher restart; the next one is applied.
    await e.resend(1, e.buffer[1]!.payload);
    await e.publish(2, [stored(3, 2, [5, 6])]);
    await until(() => s.got.length === 3, 'the next live batch');
    expect(s.resets).toEqual([]);
    expect(s.stream.counters).toMatchObject({ restarts: 0, replayedBatches: 2, batches: 1 });
  });

  it('catches up on history when it joins late, and counts what the buffer no longer has', async () => {
    const e = await fakeEngine();
    // seq 0 rolled out of the buffer; 1 and 2 are still there; 3 is the first live one.
    e.buffer.push({
      seq: 1,
      payload: encodeKvEventBatch({ ts: 1, events: [stored(2, null, [3, 4])] }),
    });
    e.buffer.push({
      seq: 2,
      payload: encodeKvEventBatch({ ts: 1, events: [stored(3, 2, [5, 6])] }),
    });
    const s = collect(e.endpoint, e.replayEndpoint);
    await until(() => s.stream.connected, 'connect');
    await sleep(100);
    await e.publish(3, [stored(4, 3, [7, 8])]);
    await until(() => s.got.length === 3, 'history');
    expect(e.replays).toEqual([0]);
    expect(s.stream.counters).toMatchObject({ missedBatches: 1, replayedBatches: 2, gaps: 0 });
    // Missing history is not a live loss: the stream stays trusted.
    expect(s.stream.lastLossAt).toBe(0);
  });

  it('counts unreplayable live batches as drops and marks the loss time', async () => {
    const e = await fakeEngine();
    const s = collect(e.endpoint); // no replay endpoint
    await until(() => s.stream.connected, 'connect');
    await sleep(100);
    await e.publish(0, [stored(1, null, [1, 2])]);
    await until(() => s.got.length === 1, 'batch 0');
    await e.publish(4, [stored(5, null, [9, 9])]);
    await until(() => s.got.length === 2, 'batch 4');
    expect(s.stream.counters).toMatchObject({ gaps: 1, missedBatches: 3 });
    expect(s.stream.lastLossAt).toBeGreaterThan(0);
  });

  it('treats a sequence reset as a publisher restart', async () => {
    const e = await fakeEngine();
    const s = collect(e.endpoint, e.replayEndpoint);
    await until(() => s.stream.connected, 'connect');
    await sleep(100);
    await e.publish(0, [stored(1, null, [1, 2])]);
    await e.publish(1, [stored(2, 1, [3, 4])]);
    await until(() => s.got.length === 2, 'two batches');
    e.buffer.length = 0;
    await e.publish(0, [{ type: 'AllBlocksCleared' }]);
    await until(() => s.got.length === 3, 'after restart');
    expect(s.resets).toEqual(['restart']);
    expect(s.stream.counters.restarts).toBe(1);
    expect(s.stream.lastSeq).toBe(0);
  });
});

describe('router with KV events from mock workers', () => {
  it('indexes what the worker caches, routes by it, and reports it on /metrics', async () => {
    const events = {
      publisher: 'zmq',
      endpoint: 'tcp://127.0.0.1:0',
      replay_endpoint: 'tcp://127.0.0.1:0',
    };
    const workers = await Promise.all(
      [0, 1].map(() =>
        startMockWorker({ timeScale: 0, kvEventsConfig: events, kvEventsBlockSize: 16 }),
      ),
    );
    for (const w of workers) cleanups.push(() => w.close());
    const config = resolveConfig([
      '--worker-urls',
      ...workers.map((w) => w.url),
      '--kv-events-endpoints',
      ...workers.map((w) => w.app.kvEventPublishers[0]?.endpoint as string),
      '--kv-events-replay-endpoints',
      ...workers.map((w) => w.app.kvEventPublishers[0]?.replayEndpoint as string),
    ]);
    const app = buildRouter(config);
    cleanups.push(() => app.close());
    await app.ready();
    const feed = app.kvroute.kvEvents;
    expect(feed).toBeDefined();
    await until(() => feed?.isLive(0) === true && feed?.isLive(1) === true, 'streams live');
    const prompt = `${'You are a careful assistant with tools. '.repeat(40)}Question one?`;
    const first = await app.inject({
      method: 'POST',
      url: '/generate',
      payload: { text: prompt, sampling_params: { max_new_tokens: 2 } },
    });
    expect(first.statusCode).toBe(200);
    const rank = Number(first.headers['x-kvroute-rank'] ?? -1);
    await until(() => (feed?.index.totalBlocks() ?? 0) > 0, 'blocks indexed');
    const holder = [0, 1].find((r) => (feed?.index.blocks(r) ?? 0) > 0) as number;
    if (rank >= 0) expect(holder).toBe(rank);
    // The router's own token ids for the prompt match what the engine reported.
    const out: number[] = [];
    const ids = approximateTokenIds(prompt);
    expect(ids.length).toBeGreaterThan(300);
    feed?.index.match(ids, [0, 1], out);
    expect(out[holder]).toBe(Math.floor(ids.length / 16) * 16);
    expect(out[1 - holder]).toBe(0);
    // A new request sharing the prefix goes to the holder, by events.
    const second = await app.inject({
      method: 'POST',
      url: '/generate',
      payload: { text: `${prompt} And two?`, sampling_params: { max_new_tokens: 2 } },
    });
    expect(JSON.parse(second.body).meta_info.cached_tokens).toBeGreaterThanOrEqual(
      Math.floor(ids.length / 16) * 16,
    );
    const metrics = (await app.inject({ method: 'GET', url: '/metrics' })).body;
    expect(metrics).toMatch(/kvroute_kv_events_live\{rank="0"\} 1/);
    expect(metrics).toMatch(/kvroute_kv_index_rank_scores_total\{source="events"\} [1-9]/);
    expect(metrics).toMatch(/kvroute_kv_events_batches_total\{rank="\d"\} [1-9]/);
    expect(metrics).toMatch(/kvroute_kv_index_events_total\{op="stored"\} [1-9]/);
    expect(metrics).toMatch(/kvroute_kv_events_lag_seconds_count [1-9]/);
    // /flush_cache on the holder: AllBlocksCleared empties its rank.
    const flush = await fetch(`${workers[holder]?.url}/flush_cache`, { method: 'POST' });
    expect(flush.status).toBe(200);
    await until(() => feed?.index.blocks(holder) === 0, 'cleared');
  });

  it('rejects malformed KV event settings by name', () => {
    expect(() =>
      resolveConfig(['--worker-urls', 'http://a:1', '--kv-events-endpoint', 'http://a:5557']),
    ).toThrow(/--kv-events-endpoint: "http:\/\/a:5557" is not a ZMQ endpoint/);
    expect(() =>
      resolveConfig([
        '--worker-urls',
        'http://a:1',
        '--kv-events-endpoints',
        'tcp://a:1',
        'tcp://a:2',
      ]),
    ).toThrow(/2 endpoints for 1 --worker-urls/);
    const c = resolveConfig([
      '--worker-urls',
      'http://a:1',
      '--kv-events-endpoint',
      'tcp://{host}:5557',
      '--kv-events-stale',
      '3s',
    ]);
    expect(c.kvEventsStaleMs).toBe(3000);
    expect(c.kvEventsBlockSize).toBe(16);
    const sized = resolveConfig([
      '--worker-urls',
      'http://a:1',
      '--kv-events-endpoint',
      'tcp://{host}:5557',
      '--kv-events-block-size',
      '32',
    ]);
    expect(sized.kvEventsBlockSize).toBe(32);
    expect(() =>
      resolveConfig(['--worker-urls', 'http://a:1', '--kv-events-block-size', '0']),
    ).toThrow(/kv-events-block-size/);
  });
});
