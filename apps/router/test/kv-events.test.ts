import { startMockWorker } from '@kvroute/mock-worker';
import { approximateTokenIds } from '@kvroute/protocol';
import {
  encodeKvEventBatch,
  encodeSeq,
  type KvCacheEvent,
  type KvEventBatch,
} from '@kvroute/protocol/kv-events';
import { Packr } from 'msgpackr';
import { Registry } from 'prom-client';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { Publisher, Router } from 'zeromq';
import { resolveConfig } from '../src/config.ts';
import { KvEventsFeed } from '../src/kv-events/feed.ts';
import { KvEventStream, loadZmq } from '../src/kv-events/subscriber.ts';
import { RankTable } from '../src/rank-table.ts';
import { buildRouter } from '../src/router.ts';
import { startFakeWorker } from './helpers/fake-worker.ts';
import { NO_ACTIVE_CHECKS } from './helpers/router.ts';

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
    /** The publisher thread stops answering replays (its PUB socket stays connected). */
    closeReplay() {
      router.close();
    },
    close() {
      pub.close();
      if (!router.closed) router.close();
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
  const warns: string[] = [];
  const stream = new KvEventStream(
    zmq,
    { endpoint, replayEndpoint, topic: '', replayTimeoutMs: 1000 },
    {
      batch: (batch, replayed) => got.push({ batch, replayed }),
      reset: (why) => resets.push(why),
      warn: (cause, m) => warns.push(`${cause}: ${m}`),
      info: () => {},
    },
  );
  stream.start();
  cleanups.push(() => stream.close());
  return { stream, got, resets, warns };
}

/** A stream connected to `e` that applied batches 0..n-1 (each a block chained to the last). */
async function inSequence(e: Awaited<ReturnType<typeof fakeEngine>>, n: number, replay = true) {
  const s = collect(e.endpoint, replay ? e.replayEndpoint : undefined);
  await until(() => s.stream.connected, 'connect');
  await sleep(100);
  for (let i = 0; i < n; i++) {
    await e.publish(i, [stored(i + 1, i === 0 ? null : i, [2 * i, 2 * i + 1])]);
  }
  await until(() => s.got.length === n, `${n} batches`);
  return s;
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

describe('KvEventStream: sequences that do not follow', () => {
  it('skips a byte-identical duplicate of the last batch instead of clearing the rank', async () => {
    const e = await fakeEngine();
    const s = await inSequence(e, 2);
    await e.resend(1, e.buffer[1]!.payload);
    await e.publish(2, [stored(3, 2, [4, 5])]);
    await until(() => s.got.length === 3, 'the next batch');
    expect(s.resets).toEqual([]);
    expect(s.stream.counters).toMatchObject({ restarts: 0, skippedBatches: 1, gaps: 0 });
    expect(s.stream.lastSeq).toBe(2);
  });

  it('asks the replay before taking a sequence that goes back for a restart: a stray is skipped', async () => {
    const e = await fakeEngine();
    const s = await inSequence(e, 3);
    // Not in the publisher's buffer: its replay still holds seq 2 as applied.
    await e.resend(1, encodeKvEventBatch({ ts: 1, events: [stored(99, null, [9, 9])] }));
    await e.publish(3, [stored(4, 3, [6, 7])]);
    await until(() => s.got.length === 4, 'the next batch');
    expect(s.resets).toEqual([]);
    expect(s.stream.counters).toMatchObject({ restarts: 0, skippedBatches: 1, gaps: 0 });
    expect(s.got.map((g) => g.batch.events.length)).toEqual([1, 1, 1, 1]);
    expect(s.warns.some((w) => /^sequence: .*seq 1 after 2 skipped/.test(w))).toBe(true);
  });

  it('skips an absurd jump instead of counting it as missed and clearing at the next batch', async () => {
    const e = await fakeEngine();
    const s = await inSequence(e, 2);
    await e.resend(2 ** 53 - 10, encodeKvEventBatch({ ts: 1, events: [] }));
    await e.publish(2, [stored(3, 2, [4, 5])]);
    await until(() => s.got.length === 3, 'the next batch');
    expect(s.resets).toEqual([]);
    expect(s.stream.counters).toMatchObject({
      missedBatches: 0,
      gaps: 0,
      restarts: 0,
      skippedBatches: 1,
    });
    expect(s.stream.lastLossAt).toBe(0);
    expect(s.stream.lastSeq).toBe(2);
  });

  it('without a replay endpoint, takes a sequence back near 0 for a restart and skips others', async () => {
    const e = await fakeEngine();
    const s = collect(e.endpoint);
    await until(() => s.stream.connected, 'connect');
    await sleep(100);
    await e.publish(2000, [stored(1, null, [1, 2])]);
    await e.publish(2001, [stored(2, 1, [3, 4])]);
    await until(() => s.got.length === 2, 'two batches');
    await e.resend(1500, encodeKvEventBatch({ ts: 1, events: [] }));
    await e.publish(0, [{ type: 'AllBlocksCleared' }]);
    await until(() => s.got.length === 3, 'after the restart');
    expect(s.resets).toEqual(['restart']);
    expect(s.stream.counters).toMatchObject({ restarts: 1, skippedBatches: 1 });
    expect(s.stream.lastSeq).toBe(0);
  });

  it('catches a publisher that restarted while the stream was quiet when probed', async () => {
    const e = await fakeEngine();
    const s = await inSequence(e, 3);
    const heard = s.stream.lastHeardAt;
    await sleep(5);
    // Same publisher: the probe is answered, nothing changes.
    s.stream.probe();
    await until(() => s.stream.lastHeardAt > heard, 'the probe answered');
    expect(s.resets).toEqual([]);
    // The engine restarted (its new buffer holds only its own seq 0) and published nothing
    // this stream saw.
    e.buffer.length = 0;
    e.buffer.push({
      seq: 0,
      payload: encodeKvEventBatch({ ts: 2, events: [stored(7, null, [8, 9])] }),
    });
    s.stream.probe();
    await until(() => s.got.length === 4, "the new publisher's history");
    expect(s.resets).toEqual(['restart']);
    expect(s.got[3]).toMatchObject({ replayed: true });
    expect(s.stream.lastSeq).toBe(0);
  });

  it('counts a batch with a NaN timestamp as a decode error naming the field and seq', async () => {
    const e = await fakeEngine();
    const s = await inSequence(e, 1);
    await e.resend(1, new Packr({ useRecords: false }).pack([Number.NaN, []]));
    await e.publish(2, [stored(2, 1, [2, 3])]);
    await until(() => s.got.length === 2, 'the next batch');
    expect(s.stream.counters).toMatchObject({ decodeErrors: 1, gaps: 0 });
    expect(s.warns.some((w) => /seq 1: .*EventBatch\.ts .*NaN/.test(w))).toBe(true);
  });
});

/** A router on fake workers, subscribed to these engines, with a short staleness window. */
async function eventsRouter(engines: Awaited<ReturnType<typeof fakeEngine>>[], stale = '300ms') {
  const workers = await Promise.all(engines.map(() => startFakeWorker()));
  for (const w of workers) cleanups.push(() => w.close());
  const app = buildRouter(
    resolveConfig([
      '--worker-urls',
      ...workers.map((w) => w.url),
      ...NO_ACTIVE_CHECKS,
      '--kv-events-endpoints',
      ...engines.map((e) => e.endpoint),
      '--kv-events-replay-endpoints',
      ...engines.map((e) => e.replayEndpoint),
      '--kv-events-stale',
      stale,
    ]),
  );
  cleanups.push(() => app.close());
  const warn = vi.spyOn(app.log, 'warn');
  const info = vi.spyOn(app.log, 'info');
  await app.ready();
  const feed = app.kvroute.kvEvents;
  if (!feed) throw new Error('no KV events feed');
  return { app, feed, warn, info };
}

describe('KV event feed: ranks that renumber', () => {
  it('moves a stream and what it indexed with its worker, without reconnecting or replaying', async () => {
    const engines = [await fakeEngine(), await fakeEngine(), await fakeEngine()];
    // Pods by URL: A sorts first, then B, then C (as service discovery numbers them).
    const urls = ['http://10.0.0.1:30000', 'http://10.0.0.3:30000', 'http://10.0.0.5:30000'];
    const table = new RankTable();
    table.ordered = true;
    const quiet = { warn() {}, info() {}, error() {}, debug() {} };
    const feed = new KvEventsFeed(
      {
        endpoints: engines.map((e) => e.endpoint),
        replayEndpoints: engines.map((e) => e.replayEndpoint),
        topic: '',
        staleMs: 300,
        maxBlocksPerRank: 1000,
      },
      table,
      urls,
      new Registry(),
      quiet as unknown as ConstructorParameters<typeof KvEventsFeed>[4],
      () => undefined,
    );
    cleanups.push(() => feed.close());
    table.onRenumber = (moves, n) => feed.remap(moves, n);
    table.addWorker(urls[1]!, 1, false);
    table.addWorker(urls[2]!, 1, false);
    await feed.start();
    await until(() => feed.isLive(0) && feed.isLive(1), 'B and C live');
    const c = engines[2]!;
    const tokens = (from: number) => Array.from({ length: 16 }, (_, i) => from + i);
    await c.publish(0, [stored(7, null, tokens(0))]);
    await until(() => feed.index.blocks(1) === 1, "C's block at rank 1");
    const streamC = feed.stream(1);
    const replays = c.replays.length;

    // A joins and sorts first: B moves to rank 1, C to rank 2, with C's block and stream.
    table.addWorker(urls[0]!, 1, false);
    expect(feed.stream(2)).toBe(streamC);
    expect([0, 1, 2].map((r) => feed.index.blocks(r))).toEqual([0, 0, 1]);
    const out = [0, 0, 0];
    feed.index.match(tokens(0), [0, 1, 2], out);
    expect(out).toEqual([0, 0, 16]);
    feed.sync();
    expect(feed.stream(2)).toBe(streamC);
    await until(() => feed.isLive(0), "A's new stream live");
    expect(feed.isLive(2)).toBe(true);
    // C's next batch lands at its new rank; its stream never reconnected or asked to replay.
    await c.publish(1, [stored(8, 7, tokens(16))]);
    await until(() => feed.index.blocks(2) === 2, "C's next block at rank 2");
    expect(c.replays.length).toBe(replays);
    expect(streamC?.counters.reconnects).toBe(0);
    expect(streamC?.disconnectedAt).toBe(0);

    // B leaves: C moves down to rank 1 and keeps its blocks; B's stream is closed.
    table.removeWorker(urls[1]!);
    expect(feed.stream(1)).toBe(streamC);
    expect(feed.index.blocks(1)).toBe(2);
    expect(feed.stream(2)).toBeUndefined();
  });
});

describe('KV event feed: liveness replicas agree on, logs, metrics', () => {
  it('keeps a rank live on every replica while its publisher answers, whatever each one routed', async () => {
    const e = await fakeEngine();
    const a = await eventsRouter([e]);
    const b = await eventsRouter([e]);
    await until(() => a.feed.isLive(0) && b.feed.isLive(0), 'both replicas live');
    await e.publish(0, [
      stored(
        1,
        null,
        Array.from({ length: 16 }, (_, i) => i),
      ),
    ]);
    await until(() => a.feed.index.blocks(0) === 1 && b.feed.index.blocks(0) === 1, 'indexed');
    // A routes a request whose prefill stores no block (a full hit): no batch follows it.
    const res = await a.app.inject({
      method: 'POST',
      url: '/v1/chat/completions',
      payload: { model: 'm', messages: [{ role: 'user', content: 'hi' }], max_tokens: 1 },
    });
    expect(res.statusCode).toBe(200);
    await sleep(900); // three staleness windows without a batch
    expect([a.feed.isLive(0), b.feed.isLive(0)]).toEqual([true, true]);
    // The publisher thread dies (its socket stays up): both replicas stop trusting the rank.
    e.closeReplay();
    await until(() => !a.feed.isLive(0) && !b.feed.isLive(0), 'both replicas not live');
  });

  it('exports every per-rank counter and index op from 0, before the first event', async () => {
    const e = await fakeEngine();
    const { app, feed } = await eventsRouter([e]);
    await until(() => feed.isLive(0), 'live');
    const metrics = (await app.inject({ method: 'GET', url: '/metrics' })).body;
    for (const name of [
      'batches',
      'replayed_batches',
      'gaps',
      'missed_batches',
      'restarts',
      'decode_errors',
      'disconnects',
      'skipped_batches',
    ]) {
      expect(metrics).toMatch(new RegExp(`kvroute_kv_events_${name}_total\\{rank="0"\\} 0\n`));
    }
    for (const op of ['stored', 'orphan', 'capacity_eviction', 'block_size_mismatch']) {
      expect(metrics).toMatch(new RegExp(`kvroute_kv_index_events_total\\{op="${op}"\\} 0\n`));
    }
    expect(metrics).toMatch(/kvroute_kv_index_rank_scores_total\{source="learned"\} 0\n/);
  });

  it("refuses one engine's other block size for its rank only, and says so", async () => {
    const good = await fakeEngine();
    const odd = await fakeEngine();
    const { feed, warn } = await eventsRouter([good, odd]);
    await until(() => feed.isLive(0) && feed.isLive(1), 'live');
    // An empty BlockStored of size 7, then real blocks of 8: neither changes the index's 16.
    await odd.publish(0, [
      {
        type: 'BlockStored',
        blockHashes: [],
        parentBlockHash: null,
        tokenIds: [],
        blockSize: 7,
        loraId: null,
        medium: 'GPU',
      },
      stored(2, null, [1, 2, 3, 4, 5, 6, 7, 8]),
    ]);
    await good.publish(0, [
      stored(
        1,
        null,
        Array.from({ length: 16 }, (_, i) => i),
      ),
    ]);
    await until(() => feed.index.blocks(0) === 1, 'the 16-token block indexed');
    expect(feed.blockSize).toBe(16);
    expect(feed.index.blocks(1)).toBe(0);
    expect([feed.isLive(0), feed.isLive(1)]).toEqual([true, false]);
    const lines = warn.mock.calls.map((c) => `${(c[0] as { cause?: string }).cause} ${c[1]}`);
    expect(
      lines.some((l) => /^block_size .*rank 1's engine reports block_size 8.* 16/.test(l)),
    ).toBe(true);
  });

  it('logs what turns precise routing off: an endpoint never reached, a restart', async () => {
    const e = await fakeEngine();
    const gone = await fakeEngine();
    gone.close(); // a typo'd port: nothing listens there
    const { feed, warn, info } = await eventsRouter([e, gone]);
    expect(info).toHaveBeenCalledWith(
      expect.objectContaining({ streams: 2, blockSize: 16 }),
      expect.stringMatching(/^kv-events on: 2 streams \(tcp:.*replay on, block size 16/),
    );
    await until(() => feed.isLive(0), 'live');
    const causes = () => warn.mock.calls.map((c) => (c[0] as { cause?: string }).cause);
    await until(() => causes().includes('unconnected'), 'the unconnected warning');
    const line = warn.mock.calls.find((c) => (c[0] as { cause?: string }).cause === 'unconnected');
    expect(line?.[0]).toMatchObject({ rank: 1, endpoint: gone.endpoint });
    expect(String(line?.[1])).toMatch(/not connected for \d+ s .*wrong endpoint or port/);
    await e.publish(0, [
      stored(
        1,
        null,
        Array.from({ length: 16 }, (_, i) => i),
      ),
    ]);
    await until(() => feed.index.blocks(0) === 1, 'indexed');
    e.buffer.length = 0;
    await e.publish(0, [{ type: 'AllBlocksCleared' }]);
    await until(() => causes().includes('restart'), 'the restart warning');
    expect(feed.index.blocks(0)).toBe(0);
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
