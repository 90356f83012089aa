// What a streamed answer looks like to the client, byte for byte, when the worker's chunks
// split characters and events anywhere: a chunk of whole events goes out as the bytes it came
// in, anything else as the text of its complete events, and a byte that is not UTF-8 reaches
// the client as U+FFFD, as the router's decoder read it.
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { request } from 'undici';
import { afterEach, describe, expect, it } from 'vitest';
import { streamParts } from './helpers/faulty-worker.ts';
import { listenRouter } from './helpers/router.ts';

const cleanups: (() => Promise<void> | void)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

const event = (content: string, crlf = false): Buffer => {
  const nl = crlf ? '\r\n' : '\n';
  return Buffer.from(
    `data: {"object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":${JSON.stringify(content)}},"finish_reason":null}]}${nl}${nl}`,
  );
};
const DONE = Buffer.from('data: [DONE]\n\n');

/** A worker that streams `parts` (each its own write, 15 ms apart) for every chat request. */
async function scriptedWorker(parts: Buffer[]): Promise<string> {
  const server: Server = createServer((req, res) => {
    req.resume();
    req.on('end', () => {
      const path = (req.url ?? '/').split('?')[0];
      if (req.method === 'POST' && path === '/v1/chat/completions') {
        streamParts(res, parts, 15);
        return;
      }
      const body =
        path === '/v1/models'
          ? '{"object":"list","data":[{"id":"m","object":"model","max_model_len":32768}]}'
          : '{}';
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(body);
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', () => r()));
  cleanups.push(async () => {
    server.closeAllConnections();
    await new Promise<void>((r) => server.close(() => r()));
  });
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
}

async function streamThrough(parts: Buffer[]): Promise<{ status: number; bytes: Buffer }> {
  const worker = await scriptedWorker(parts);
  const { url } = await listenRouter(['--worker-urls', worker], cleanups);
  const res = await request(`${url}/v1/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'm', messages: [{ role: 'user', content: 'hi' }], stream: true }),
  });
  return { status: res.statusCode, bytes: Buffer.from(await res.body.arrayBuffer()) };
}

describe('a streamed answer, byte for byte', () => {
  it('is the worker bytes when chunks split characters and events, and when they are whole', async () => {
    const split = event('é€😀 and more');
    const inEuro = split.indexOf(Buffer.from('€')) + 1;
    const inEmoji = split.indexOf(Buffer.from('😀')) + 2;
    const two = Buffer.concat([event('x', true), event('y', true)]);
    const parts = [
      event('first'),
      split.subarray(0, inEuro),
      split.subarray(inEuro, inEmoji),
      split.subarray(inEmoji),
      // Whole events again, after a chunk that ended mid-event.
      two,
      // Split between two ASCII bytes: the second half is valid UTF-8 and ends the event.
      event('cut here').subarray(0, 30),
      event('cut here').subarray(30),
      event('ü'),
      DONE,
    ];
    const { status, bytes } = await streamThrough(parts);
    expect(status).toBe(200);
    expect(bytes.equals(Buffer.concat(parts))).toBe(true);
  });

  it('carries a byte that is not UTF-8 as U+FFFD, whole chunk or not', async () => {
    const bad = Buffer.from(event('a#b').toString('latin1').replace('#', '\xff'), 'latin1');
    expect(bad.includes(0xff)).toBe(true);
    const parts = [event('ok'), bad, bad.subarray(0, 20), bad.subarray(20), DONE];
    const { status, bytes } = await streamThrough(parts);
    expect(status).toBe(200);
    const fixed = event('a\ufffdb');
    expect(bytes.toString('utf8')).toBe(
      Buffer.concat([event('ok'), fixed, fixed, DONE]).toString('utf8'),
    );
    expect(bytes.includes(0xff)).toBe(false);
  });
});
