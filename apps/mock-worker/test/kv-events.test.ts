import { decodeKvEventBatch, decodeSeq, type KvCacheEvent } from '@kvroute/protocol/kv-events';
import { afterEach, describe, expect, it } from 'vitest';
import { Dealer, Subscriber } from 'zeromq';
import { MockWorkerConfigError, parseMockWorkerArgs, resolveOptions } from '../src/options.ts';
import { closeAll, post, worker } from './helpers.ts';

afterEach(closeAll);

const EVENTS = {
  publisher: 'zmq',
  endpoint: 'tcp://127.0.0.1:0',
  replay_endpoint: 'tcp://127.0.0.1:0',
};

interface Received {
  seq: number;
  topic: string;
  events: KvCacheEvent[];
  rank: number | undefined;
}

async function subscribe(endpoint: string) {
  const sub = new Subscriber({ linger: 0 });
  sub.connect(endpoint);
  sub.subscribe();
  const got: Received[] = [];
  const loop = (async () => {
    try {
      for await (const [topic, seq, payload] of sub) {
        const b = decodeKvEventBatch(payload as Buffer);
        got.push({
          seq: decodeSeq(seq as Buffer),
          topic: (topic as Buffer).toString(),
          events: b.events,
          rank: b.dataParallelRank ?? undefined,
        });
      }
    } catch {
      // closed
    }
  })();
  // A SUB socket misses what is published before its subscription reaches the publisher.
  await new Promise((r) => setTimeout(r, 200));
  return {
    got,
    async until(pred: () => boolean): Promise<void> {
      for (let i = 0; i < 200 && !pred(); i++) await new Promise((r) => setTimeout(r, 10));
      expect(pred()).toBe(true);
    },
    close: async () => {
      sub.close();
      await loop;
    },
  };
}

const ids = (from: number, n: number) => Array.from({ length: n }, (_, i) => from + i);

describe('mock worker KV events', () => {
  it('publishes BlockStored for every full block of what the radix cache stores', async () => {
    const app = worker({ kvEventsConfig: EVENTS, kvEventsBlockSize: 4 });
    await app.ready();
    const pub = app.kvEventPublishers[0];
    expect(pub?.endpoint).toMatch(/^tcp:\/\/127\.0\.0\.1:\d+$/);
    const s = await subscribe(pub?.endpoint as string);
    await post(app, '/generate', {
      input_ids: ids(100, 10),
      sampling_params: { max_new_tokens: 1 },
    });
    await s.until(() => s.got.length > 0);
    const stored = s.got[0]?.events[0];
    expect(s.got[0]).toMatchObject({ seq: 0, topic: '', rank: undefined });
    expect(stored).toMatchObject({
      type: 'BlockStored',
      parentBlockHash: null,
      blockSize: 4,
      tokenIds: ids(100, 8),
      loraId: null,
      medium: 'GPU',
    });
    expect((stored as { blockHashes: unknown[] }).blockHashes).toHaveLength(2);
    // The same prefix again: nothing new is stored (cache hit).
    const before = s.got.length;
    await post(app, '/generate', {
      input_ids: ids(100, 10),
      sampling_params: { max_new_tokens: 1 },
    });
    await pub?.flushNow();
    await new Promise((r) => setTimeout(r, 100));
    const later = s.got.slice(before).flatMap((b) => b.events);
    expect(later.filter((e) => e.type === 'BlockStored' && e.parentBlockHash === null)).toEqual([]);
    // A diverging prompt chains from the shared block's hash.
    await post(app, '/generate', {
      input_ids: [...ids(100, 4), ...ids(900, 8)],
      sampling_params: { max_new_tokens: 1 },
    });
    await s.until(() =>
      s.got.some((b) => b.events.some((e) => e.type === 'BlockStored' && e.tokenIds[0] === 900)),
    );
    const child = s.got
      .flatMap((b) => b.events)
      .find((e) => e.type === 'BlockStored' && e.tokenIds[0] === 900);
    expect(child).toMatchObject({
      parentBlockHash: (stored as { blockHashes: unknown[] }).blockHashes[0],
      tokenIds: ids(900, 8),
    });
    // Sequence numbers count batches without holes.
    expect(s.got.map((b) => b.seq)).toEqual(s.got.map((_, i) => i));
    await s.close();
  });

  it('publishes BlockRemoved on eviction and AllBlocksCleared on /flush_cache', async () => {
    const app = worker({ kvEventsConfig: EVENTS, kvEventsBlockSize: 4, kvCapacity: 24 });
    await app.ready();
    const s = await subscribe(app.kvEventPublishers[0]?.endpoint as string);
    for (let k = 0; k < 4; k++) {
      await post(app, '/generate', {
        input_ids: ids(1000 * (k + 1), 12),
        sampling_params: { max_new_tokens: 1 },
      });
    }
    await s.until(() => s.got.some((b) => b.events.some((e) => e.type === 'BlockRemoved')));
    const all = s.got.flatMap((b) => b.events);
    const stored = new Set(all.flatMap((e) => (e.type === 'BlockStored' ? e.blockHashes : [])));
    const removed = all.flatMap((e) => (e.type === 'BlockRemoved' ? e.blockHashes : []));
    for (const h of removed) expect(stored.has(h)).toBe(true);
    const r = await app.inject({ method: 'POST', url: '/flush_cache' });
    expect(r.statusCode).toBe(200);
    await s.until(() => s.got.some((b) => b.events.some((e) => e.type === 'AllBlocksCleared')));
    await s.close();
  });

  it('serves replays on the ROUTER endpoint: batches from a sequence, then the -1 end marker', async () => {
    const app = worker({ kvEventsConfig: EVENTS, kvEventsBlockSize: 4 });
    await app.ready();
    const pub = app.kvEventPublishers[0];
    for (let k = 0; k < 3; k++) {
      await post(app, '/generate', {
        input_ids: ids(50 * (k + 1), 8),
        sampling_params: { max_new_tokens: 1 },
      });
      await pub?.flushNow();
    }
    const dealer = new Dealer({ linger: 0, receiveTimeout: 2000 });
    dealer.connect(pub?.replayEndpoint as string);
    const start = Buffer.alloc(8);
    start.writeBigUInt64BE(1n);
    await dealer.send([Buffer.alloc(0), start]);
    const seqs: number[] = [];
    for (let i = 0; i < 10; i++) {
      const [empty, seq, payload] = (await dealer.receive()) as Buffer[];
      expect(empty?.length).toBe(0);
      const n = decodeSeq(seq as Buffer);
      if (n === -1) {
        expect(payload?.length).toBe(0);
        break;
      }
      expect(decodeKvEventBatch(payload as Buffer).events.length).toBeGreaterThan(0);
      seqs.push(n);
    }
    expect(seqs[0]).toBe(1);
    expect(seqs).toEqual(seqs.map((_, i) => i + 1));
    dealer.close();
  });

  it('annotates batches with the DP rank and gives each rank its own endpoint', async () => {
    const app = worker({ kvEventsConfig: EVENTS, kvEventsBlockSize: 4, dpSize: 2 });
    await app.ready();
    const eps = app.kvEventPublishers.map((p) => p.endpoint);
    expect(new Set(eps).size).toBe(2);
    const subs = await Promise.all(eps.map((e) => subscribe(e)));
    await post(app, '/generate', {
      input_ids: ids(7, 8),
      sampling_params: { max_new_tokens: 1 },
      routed_dp_rank: 1,
    });
    await subs[1]?.until(() => (subs[1]?.got.length ?? 0) > 0);
    expect(subs[1]?.got[0]?.rank).toBe(1);
    expect(subs[0]?.got).toEqual([]);
    await Promise.all(subs.map((s) => s.close()));
  });

  it('takes vLLM/SGLang --kv-events-config JSON and rejects bad values by name', () => {
    const a = parseMockWorkerArgs([
      '--kv-events-config',
      '{"publisher":"zmq","endpoint":"tcp://*:5557","replay_endpoint":"tcp://*:5558","topic":"kv"}',
      '--kv-events-block-size',
      '32',
    ]);
    expect(resolveOptions(a.options).kvEvents).toEqual({
      endpoint: 'tcp://*:5557',
      replayEndpoint: 'tcp://*:5558',
      blockSize: 32,
      bufferSteps: 10_000,
      topic: 'kv',
    });
    expect(() => parseMockWorkerArgs(['--kv-events-config', '{bad'])).toThrow(/must be JSON/);
    expect(() => resolveOptions({ kvEventsConfig: { publisher: 'kafka' } })).toThrow(
      MockWorkerConfigError,
    );
    expect(() => resolveOptions({ kvEventsConfig: { endpoint: 'http://x' } })).toThrow(
      /endpoint must be a tcp/,
    );
    expect(resolveOptions({ kvEventsConfig: { publisher: 'null' } }).kvEvents).toBeUndefined();
  });
});
