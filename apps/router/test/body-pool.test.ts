// Pooled buffers for request bodies of several chunks (src/proxy/body-pool.ts): a buffer is
// used again only when no connection its request went to has bytes left to write from it.
// The unit tests use stand-in sockets; the end-to-end test a worker that answers before it
// reads the body, which leaves the router's write of that body queued on the connection.
import { EventEmitter } from 'node:events';
import { createServer, type Socket } from 'node:net';
import { createHttpAgent } from '@kvroute/protocol';
import { request } from 'undici';
import { afterEach, describe, expect, it } from 'vitest';
import { BodyPool, MAX_POOLED_BYTES, UpstreamSockets } from '../src/proxy/body-pool.ts';
import { listenRouter, NO_ACTIVE_CHECKS } from './helpers/router.ts';

/** A stand-in connection: writableLength is what BodyPool looks at; 'close' ends the watch. */
function fakeSocket(writableLength = 0): Socket & { writableLength: number } {
  const s = new EventEmitter() as unknown as Socket & { writableLength: number };
  Object.defineProperty(s, 'writableLength', { value: writableLength, writable: true });
  return s;
}

const chunksOf = (size: number, parts: number, fill: number): Buffer[] => {
  const out: Buffer[] = [];
  const each = Math.ceil(size / parts);
  for (let at = 0; at < size; at += each) out.push(Buffer.alloc(Math.min(each, size - at), fill));
  return out;
};

describe('BodyPool', () => {
  it('a body of one chunk is that chunk; several are joined byte for byte', () => {
    const pool = new BodyPool(new UpstreamSockets());
    const one = Buffer.from('{"a":1}');
    expect(pool.join([one], one.length)).toEqual({ body: one });
    const parts = [Buffer.from('{"prompt":'), Buffer.from('"hello"'), Buffer.from('}')];
    const joined = pool.join(parts, 18);
    expect(joined.body.toString()).toBe('{"prompt":"hello"}');
    expect(joined.slab?.length).toBe(64 * 1024);
  });

  it('a buffer given back while its origins have nothing unwritten serves the next body', () => {
    const sockets = new UpstreamSockets();
    sockets.add('http://w1', fakeSocket(0));
    const pool = new BodyPool(sockets);
    const a = pool.join(chunksOf(100_000, 3, 1), 100_000);
    expect(a.slab?.length).toBe(128 * 1024);
    pool.give(a.slab!, ['http://w1']);
    expect(pool.retainedBytes).toBe(128 * 1024);
    const b = pool.join(chunksOf(90_000, 2, 2), 90_000);
    expect(b.slab === a.slab).toBe(true);
    expect(b.body.equals(Buffer.alloc(90_000, 2))).toBe(true);
    expect({ reused: pool.reused, allocated: pool.allocated }).toEqual({ reused: 1, allocated: 1 });
    // Another size class does not take it.
    const c = pool.join(chunksOf(300_000, 4, 3), 300_000);
    expect(c.slab === a.slab).toBe(false);
  });

  it('is dropped while any connection to one of its origins still has bytes to write', () => {
    const sockets = new UpstreamSockets();
    const busy = fakeSocket(4096);
    sockets.add('http://w1', fakeSocket(0));
    sockets.add('http://w1', busy);
    sockets.add('http://w2', fakeSocket(0));
    const pool = new BodyPool(sockets);
    const a = pool.join(chunksOf(100_000, 2, 1), 100_000);
    // A retried request: the first attempt's origin has a write queued.
    pool.give(a.slab!, ['http://w2', 'http://w1']);
    expect(pool.retainedBytes).toBe(0);
    expect(pool.join(chunksOf(100_000, 2, 2), 100_000).slab === a.slab).toBe(false);
    // Once the write is done, or the connection gone, buffers come back again.
    busy.writableLength = 0;
    const b = pool.join(chunksOf(100_000, 2, 3), 100_000);
    pool.give(b.slab!, ['http://w1']);
    expect(pool.retainedBytes).toBe(128 * 1024);
    busy.writableLength = 10;
    busy.emit('close');
    const c = pool.join(chunksOf(100_000, 2, 4), 100_000);
    expect(c.slab === b.slab).toBe(true);
    pool.give(c.slab!, ['http://w1']);
    expect(pool.retainedBytes).toBe(128 * 1024);
  });

  it('keeps at most its retained bound, and never pools bodies past the largest class', () => {
    const pool = new BodyPool(new UpstreamSockets(), { maxRetainedBytes: 256 * 1024 });
    const slabs = [0, 1, 2].map((i) => pool.join(chunksOf(100_000, 2, i), 100_000).slab!);
    for (const s of slabs) pool.give(s, []);
    expect(pool.retainedBytes).toBe(256 * 1024);
    const big = pool.join(chunksOf(MAX_POOLED_BYTES + 1, 8, 9), MAX_POOLED_BYTES + 1);
    expect(big.slab).toBeUndefined();
    expect(big.body.length).toBe(MAX_POOLED_BYTES + 1);
  });
});

const cleanups: (() => Promise<void> | void)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

const CHAT_ANSWER = JSON.stringify({
  id: 'c1',
  object: 'chat.completion',
  model: 'm',
  choices: [{ index: 0, message: { role: 'assistant', content: 'ok' }, finish_reason: 'stop' }],
  usage: { prompt_tokens: 1, completion_tokens: 1, total_tokens: 2 },
});
const MODELS = '{"object":"list","data":[{"id":"m","object":"model","max_model_len":1000000}]}';

const answer = (body: string): string =>
  `HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: ${Buffer.byteLength(body)}\r\n\r\n${body}`;

/**
 * A worker that answers every POST as soon as its headers arrive, then reads nothing for
 * `stallMs` before it takes the body (what a worker rejecting early, or one stalled, does):
 * the router's write of that body stays queued on the connection, and the answer completes
 * first. It keeps each POST body it read, in order.
 */
async function earlyAnswerWorker(stallMs: number): Promise<{ url: string; bodies: Buffer[] }> {
  const bodies: Buffer[] = [];
  const server = createServer((socket) => {
    // Bytes not yet parsed, as chunks (a body of many megabytes is not copied per chunk).
    let parts: Buffer[] = [];
    let held = 0;
    let need = -1; // body bytes still to take for the current POST (-1: reading headers)
    let stalled = false;
    const take = (n: number): Buffer => {
      const all = parts.length === 1 ? parts[0]! : Buffer.concat(parts, held);
      const out = Buffer.from(all.subarray(0, n));
      parts = held > n ? [all.subarray(n)] : [];
      held -= n;
      return out;
    };
    const pump = (): void => {
      while (!stalled) {
        if (need < 0) {
          if (parts.length > 1) parts = [Buffer.concat(parts, held)];
          const end = parts[0]?.indexOf('\r\n\r\n') ?? -1;
          if (end < 0) return;
          const head = take(end + 4).toString('latin1');
          const length = Number(/content-length: *(\d+)/i.exec(head)?.[1] ?? 0);
          if (head.startsWith('POST')) {
            socket.write(answer(CHAT_ANSWER));
            need = length;
            stalled = true;
            socket.pause();
            setTimeout(() => {
              stalled = false;
              socket.resume();
              pump();
            }, stallMs);
            return;
          }
          if (length > 0) take(length);
          socket.write(answer(head.includes('/v1/models') ? MODELS : '{}'));
          continue;
        }
        if (held < need) return;
        bodies.push(take(need));
        need = -1;
      }
    };
    socket.on('data', (d: Buffer) => {
      parts.push(d);
      held += d.length;
      if (need < 0 || held >= need) pump();
    });
    socket.on('error', () => {});
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', () => r()));
  const sockets = new Set<Socket>();
  server.on('connection', (s) => {
    sockets.add(s);
    s.once('close', () => sockets.delete(s));
  });
  cleanups.push(async () => {
    for (const s of sockets) s.destroy();
    await new Promise<void>((r) => server.close(() => r()));
  });
  const port = (server.address() as { port: number }).port;
  return { url: `http://127.0.0.1:${port}`, bodies };
}

/** A chat body of about `bytes` bytes whose prompt is `letter` repeated. */
const chatBody = (bytes: number, letter: string): Buffer =>
  Buffer.from(
    JSON.stringify({
      model: 'm',
      max_tokens: 1,
      messages: [{ role: 'user', content: letter.repeat(bytes) }],
    }),
  );

describe('a pooled body and a worker that answers before reading it', () => {
  it('is not reused while the write to that worker is still queued', async () => {
    const worker = await earlyAnswerWorker(300);
    const sockets = new UpstreamSockets();
    const agent = createHttpAgent({ onConnection: sockets.add });
    cleanups.push(() => agent.destroy());
    const pool = new BodyPool(sockets, {
      maxPooledBytes: 64 * 1024 * 1024,
      maxRetainedBytes: 64 * 1024 * 1024,
    });
    // Larger than the kernel's buffers on both ends take while the worker reads nothing.
    const size = 24 * 1024 * 1024;
    const a = pool.join(chunksOf(size, 4, 0x61), size);
    const res = await request(`${worker.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: a.body,
      dispatcher: agent,
    });
    expect(JSON.parse(await res.body.text()).choices[0].message.content).toBe('ok');
    // undici reports the answer complete with the body still being written: the case at hand.
    expect(sockets.flushed(worker.url)).toBe(false);
    pool.give(a.slab!, [worker.url]);
    expect(pool.retainedBytes).toBe(0);
    // The next body of the same size class gets a buffer of its own, not the one being sent.
    const b = pool.join(chunksOf(size, 4, 0x62), size);
    expect(b.slab === a.slab).toBe(false);
    const deadline = Date.now() + 10_000;
    while (worker.bodies.length < 1 && Date.now() < deadline) {
      await new Promise((r) => setTimeout(r, 20));
    }
    expect(worker.bodies[0]?.length).toBe(size);
    expect(worker.bodies[0]!.equals(Buffer.alloc(size, 0x61))).toBe(true);
    // Written out: the buffer can come back now.
    expect(sockets.flushed(worker.url)).toBe(true);
    pool.give(b.slab!, [worker.url]);
    expect(pool.join(chunksOf(size, 2, 0x63), size).slab === b.slab).toBe(true);
  }, 30_000);

  it('through the router, the worker receives each body as the client sent it', async () => {
    const worker = await earlyAnswerWorker(300);
    const { url } = await listenRouter(
      ['--worker-urls', worker.url, ...NO_ACTIVE_CHECKS],
      cleanups,
    );
    // Bodies of several chunks in the largest pooled size class, each with other bytes: on
    // this machine's loopback the kernel does not take a whole one while the worker reads
    // nothing, so each is still being written when its answer completes.
    const sent = [chatBody(4_150_000, 'a'), chatBody(4_100_000, 'b'), chatBody(4_150_000, 'c')];
    for (const body of sent) {
      const res = await request(`${url}/v1/chat/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body,
      });
      expect(res.statusCode).toBe(200);
      expect(JSON.parse(await res.body.text()).choices[0].message.content).toBe('ok');
    }
    const deadline = Date.now() + 10_000;
    while (worker.bodies.length < sent.length && Date.now() < deadline) {
      await new Promise((r) => setTimeout(r, 50));
    }
    expect(worker.bodies.length).toBe(sent.length);
    for (let i = 0; i < sent.length; i++) {
      expect(worker.bodies[i]!.length).toBe(sent[i]!.length);
      expect(worker.bodies[i]!.equals(sent[i]!)).toBe(true);
    }
  }, 30_000);
});
