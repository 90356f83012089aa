import { type AddressInfo, createServer, type Server, type Socket } from 'node:net';
import fc from 'fast-check';
import { afterEach, describe, expect, it } from 'vitest';
import { ResponseParseError, ResponseParser } from '../src/proxy/http1-response.ts';
import { type UpstreamHandler, UpstreamPool } from '../src/proxy/upstream.ts';

interface Parsed {
  heads: { status: number; headers: string[] }[];
  body: Buffer;
  ended: number;
}

function parserFor(): { parser: ResponseParser; out: Parsed } {
  const out: Parsed = { heads: [], body: Buffer.alloc(0), ended: 0 };
  const parser = new ResponseParser({
    onHead: (status, headers) => out.heads.push({ status, headers }),
    // Copied: the parser hands out views into the buffer it was given.
    onBody: (chunk) => {
      out.body = Buffer.concat([out.body, Buffer.from(chunk)]);
    },
    onEnd: () => {
      out.ended++;
    },
  });
  return { parser, out };
}

/** Feeds `bytes` cut at the given offsets. */
function feed(parser: ResponseParser, bytes: Buffer, cuts: number[]): void {
  const at = [...new Set(cuts.map((c) => c % (bytes.length + 1)))].sort((a, b) => a - b);
  let prev = 0;
  for (const c of [...at, bytes.length]) {
    if (c > prev) parser.execute(bytes.subarray(prev, c));
    prev = c;
  }
}

const CHUNKED = Buffer.from(
  'HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n' +
    '5;ext=1;name="q"\r\nhello\r\n' +
    '1A\r\nabcdefghijklmnopqrstuvwxyz\r\n' +
    '0\r\nX-Trailer: yes\r\nX-Other: 2\r\n\r\n',
);

describe('ResponseParser', () => {
  it('reads a content-length body and its headers in order', () => {
    const { parser, out } = parserFor();
    parser.execute(
      Buffer.from(
        'HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nSet-Cookie: a=1\r\nSet-Cookie: b=2\r\nContent-Length: 7\r\n\r\n{"a":1}',
      ),
    );
    expect(out.heads).toEqual([
      {
        status: 200,
        headers: [
          'Content-Type',
          'application/json',
          'Set-Cookie',
          'a=1',
          'Set-Cookie',
          'b=2',
          'Content-Length',
          '7',
        ],
      },
    ]);
    expect(out.body.toString()).toBe('{"a":1}');
    expect(out.ended).toBe(1);
    expect(parser.keepAlive).toBe(true);
  });

  it('de-chunks, dropping chunk extensions and trailers', () => {
    const { parser, out } = parserFor();
    parser.execute(CHUNKED);
    expect(out.body.toString()).toBe('helloabcdefghijklmnopqrstuvwxyz');
    expect(out.ended).toBe(1);
    expect(parser.done).toBe(true);
    expect(parser.keepAlive).toBe(true);
  });

  it('gives the same answer however the bytes are split (property)', () => {
    const bodies = [
      CHUNKED,
      Buffer.from(
        'HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 201 Created\r\ncontent-length: 3\r\n\r\nxyz',
      ),
      Buffer.from('HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n'),
    ];
    const whole = bodies.map((b) => {
      const { parser, out } = parserFor();
      parser.execute(b);
      return out;
    });
    fc.assert(
      fc.property(
        fc.integer({ min: 0, max: bodies.length - 1 }),
        fc.array(fc.nat(), { maxLength: 40 }),
        (which, cuts) => {
          const { parser, out } = parserFor();
          feed(parser, bodies[which]!, cuts);
          expect(out.heads).toEqual(whole[which]!.heads);
          expect(out.body.equals(whole[which]!.body)).toBe(true);
          expect(out.ended).toBe(1);
        },
      ),
      { numRuns: 300 },
    );
  });

  it('splits byte by byte, including inside CRLFs and the head terminator', () => {
    const { parser, out } = parserFor();
    feed(
      parser,
      CHUNKED,
      Array.from({ length: CHUNKED.length }, (_, i) => i),
    );
    expect(out.body.toString()).toBe('helloabcdefghijklmnopqrstuvwxyz');
    expect(out.ended).toBe(1);
  });

  it('skips interim 1xx responses and reports only the final one', () => {
    const { parser, out } = parserFor();
    parser.execute(
      Buffer.from(
        'HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok',
      ),
    );
    expect(out.heads.map((h) => h.status)).toEqual([200]);
    expect(out.body.toString()).toBe('ok');
  });

  it('reads a body without length until the connection closes, and never reuses it', () => {
    const { parser, out } = parserFor();
    parser.execute(Buffer.from('HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\npart one, '));
    parser.execute(Buffer.from('part two'));
    expect(out.ended).toBe(0);
    expect(parser.finishAtClose()).toBe(true);
    expect(out.body.toString()).toBe('part one, part two');
    expect(out.ended).toBe(1);
    expect(parser.keepAlive).toBe(false);
  });

  it('reports a body cut short by a close', () => {
    const { parser, out } = parserFor();
    parser.execute(Buffer.from('HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc'));
    expect(parser.finishAtClose()).toBe(false);
    expect(out.ended).toBe(0);
    const chunked = parserFor();
    chunked.parser.execute(
      Buffer.from('HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nab'),
    );
    expect(chunked.parser.finishAtClose()).toBe(false);
  });

  it('honours Connection: close, HTTP/1.0 and the Keep-Alive hint', () => {
    const close = parserFor();
    close.parser.execute(
      Buffer.from('HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 0\r\n\r\n'),
    );
    expect(close.out.ended).toBe(1);
    expect(close.parser.keepAlive).toBe(false);
    const old = parserFor();
    old.parser.execute(Buffer.from('HTTP/1.0 200 OK\r\nContent-Length: 0\r\n\r\n'));
    expect(old.parser.keepAlive).toBe(false);
    const hint = parserFor();
    hint.parser.execute(Buffer.from('HTTP/1.1 204 No Content\r\nKeep-Alive: timeout=5\r\n\r\n'));
    expect(hint.out.ended).toBe(1);
    expect(hint.parser.keepAlive).toBe(true);
    expect(hint.parser.keepAliveHintMs).toBe(5000);
  });

  it('refuses what would mis-frame the next response, naming the fault', () => {
    const bad: [string, RegExp][] = [
      [
        'HTTP/1.1 200 OK\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\n',
        /two different content-length/,
      ],
      ['HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n', /content-length that is not a number/],
      ['HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n', /bad chunk size/],
      [
        'HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nabX',
        /chunk not followed by CRLF/,
      ],
      ['SSH-2.0-OpenSSH\r\n\r\n', /not an HTTP\/1.x status line/],
      ['HTTP/1.1 200 OK\r\nno colon here\r\n\r\n', /header line without a name/],
      ['HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\nab', /bytes after the end/],
    ];
    for (const [text, message] of bad) {
      const { parser } = parserFor();
      expect(() => parser.execute(Buffer.from(text)), text).toThrow(ResponseParseError);
      const again = parserFor();
      expect(() => again.parser.execute(Buffer.from(text)), text).toThrow(message);
    }
    const huge = parserFor();
    expect(() =>
      huge.parser.execute(Buffer.from(`HTTP/1.1 200 OK\r\nX: ${'a'.repeat(70_000)}`)),
    ).toThrow(/longer than/);
  });
});

/** A raw TCP server whose answer per request the test scripts. */
async function rawServer(
  onRequest: (socket: Socket, request: string, n: number) => void,
): Promise<{ server: Server; origin: string; connections: () => number; requests: string[] }> {
  const requests: string[] = [];
  let connections = 0;
  const server = createServer((socket) => {
    connections++;
    let buf = '';
    socket.on('data', (d) => {
      buf += d.toString('latin1');
      for (;;) {
        const end = buf.indexOf('\r\n\r\n');
        if (end === -1) return;
        const len = Number(/content-length: (\d+)/i.exec(buf.slice(0, end))?.[1] ?? 0);
        if (buf.length < end + 4 + len) return;
        const req = buf.slice(0, end + 4 + len);
        buf = buf.slice(end + 4 + len);
        requests.push(req);
        onRequest(socket, req, requests.length);
      }
    });
    socket.on('error', () => {});
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const { port } = server.address() as AddressInfo;
  return { server, origin: `http://127.0.0.1:${port}`, connections: () => connections, requests };
}

interface Collected {
  status: number;
  headers: string[];
  body: string;
  error?: Error;
}

function call(
  pool: UpstreamPool,
  origin: string,
  body = '{"x":1}',
  hooks: { onConnect?: (abort: (e?: Error) => void) => void } = {},
): Promise<Collected> {
  return new Promise((resolve) => {
    const got: Collected = { status: 0, headers: [], body: '' };
    const handler: UpstreamHandler = {
      onConnect: (abort) => hooks.onConnect?.(abort),
      onHeaders: (status, raw) => {
        got.status = status;
        got.headers = raw.map(String);
        return true;
      },
      onData: (chunk) => {
        got.body += chunk.toString();
        return true;
      },
      onComplete: () => resolve(got),
      onError: (err) => resolve({ ...got, error: err }),
    };
    pool.dispatch(
      {
        origin,
        path: '/v1/chat/completions',
        method: 'POST',
        headers: { 'content-type': 'application/json', 'content-length': String(body.length) },
        body: Buffer.from(body),
      },
      handler,
    );
  });
}

describe('UpstreamPool', () => {
  const cleanup: (() => unknown)[] = [];
  afterEach(async () => {
    for (const f of cleanup.splice(0)) await f();
  });

  it('sends head and body, and reuses the connection for the next request', async () => {
    const srv = await rawServer((socket, _req, n) => {
      const body = `{"n":${n}}`;
      socket.write(`HTTP/1.1 200 OK\r\nContent-Length: ${body.length}\r\n\r\n${body}`);
    });
    const pool = new UpstreamPool();
    cleanup.push(
      () => pool.destroy(),
      () => srv.server.close(),
    );
    const a = await call(pool, srv.origin);
    const b = await call(pool, srv.origin, '{"second":true}');
    expect([a.status, a.body, b.body]).toEqual([200, '{"n":1}', '{"n":2}']);
    expect(srv.connections()).toBe(1);
    const host = new URL(srv.origin).host;
    expect(srv.requests[1]).toBe(
      `POST /v1/chat/completions HTTP/1.1\r\nhost: ${host}\r\ncontent-type: application/json\r\ncontent-length: 15\r\n\r\n{"second":true}`,
    );
  });

  it('streams a chunked answer written in pieces and reuses the connection after it', async () => {
    const srv = await rawServer((socket) => {
      socket.write(
        'HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n',
      );
      socket.write('6;x=y\r\ndata: ');
      setTimeout(() => socket.write('\r\n3\r\n{}\n\r'), 5);
      setTimeout(() => socket.write('\n0\r\nTrailer-A: 1\r\n\r\n'), 10);
    });
    const pool = new UpstreamPool();
    cleanup.push(
      () => pool.destroy(),
      () => srv.server.close(),
    );
    const a = await call(pool, srv.origin);
    expect(a.error).toBeUndefined();
    expect(a.body).toBe('data: {}\n');
    const b = await call(pool, srv.origin);
    expect(b.body).toBe('data: {}\n');
    expect(srv.connections()).toBe(1);
  });

  it('opens a new connection after Connection: close, and after the worker closed an idle one', async () => {
    const srv = await rawServer((socket, _req, n) => {
      if (n === 1)
        socket.end('HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\nok');
      else if (n === 2) {
        socket.write('HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok');
        // Closes the now idle connection, as a worker's keep-alive timeout does.
        setTimeout(() => socket.end(), 5);
      } else socket.write('HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok');
    });
    const pool = new UpstreamPool();
    cleanup.push(
      () => pool.destroy(),
      () => srv.server.close(),
    );
    expect((await call(pool, srv.origin)).body).toBe('ok');
    expect((await call(pool, srv.origin)).body).toBe('ok');
    for (let i = 0; i < 100 && pool.size > 0; i++) await new Promise((r) => setTimeout(r, 10));
    expect(pool.size).toBe(0);
    const c = await call(pool, srv.origin);
    expect([c.body, c.error]).toEqual(['ok', undefined]);
    expect(srv.connections()).toBe(3);
  });

  it('completes a body read until close, and fails one cut short', async () => {
    const srv = await rawServer((socket, _req, n) => {
      if (n === 1) socket.end('HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\nto the end');
      else socket.end('HTTP/1.1 200 OK\r\nContent-Length: 50\r\n\r\nshort');
    });
    const pool = new UpstreamPool();
    cleanup.push(
      () => pool.destroy(),
      () => srv.server.close(),
    );
    const a = await call(pool, srv.origin);
    expect([a.body, a.error]).toEqual(['to the end', undefined]);
    const b = await call(pool, srv.origin);
    expect(b.error?.message).toMatch(/closed the connection before its response was complete/);
  });

  it('reports a refused connection with its code, and a worker that says nothing', async () => {
    const srv = await rawServer((socket) => socket.destroy());
    const pool = new UpstreamPool();
    cleanup.push(
      () => pool.destroy(),
      () => srv.server.close(),
    );
    const silent = await call(pool, srv.origin);
    expect(silent.error).toBeDefined();
    const closed = await rawServer(() => {});
    const origin = closed.origin;
    await new Promise((r) => closed.server.close(r));
    const refused = await call(pool, origin);
    expect((refused.error as NodeJS.ErrnoException).code).toBe('ECONNREFUSED');
  });

  it('fails a malformed answer and does not reuse its connection', async () => {
    const srv = await rawServer((socket, _req, n) => {
      if (n === 1) socket.write('HTTP/1.1 200 OK\r\nContent-Length: x\r\n\r\n');
      else socket.write('HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok');
    });
    const pool = new UpstreamPool();
    cleanup.push(
      () => pool.destroy(),
      () => srv.server.close(),
    );
    const a = await call(pool, srv.origin);
    expect(a.error?.message).toMatch(/content-length that is not a number/);
    const b = await call(pool, srv.origin);
    expect(b.body).toBe('ok');
    expect(srv.connections()).toBe(2);
  });

  it('aborts a request in progress: the handler hears the reason, the connection closes', async () => {
    let serverSocketClosed = false;
    const srv = await rawServer((socket) => {
      socket.write('HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n');
      socket.on('close', () => {
        serverSocketClosed = true;
      });
    });
    const pool = new UpstreamPool();
    cleanup.push(
      () => pool.destroy(),
      () => srv.server.close(),
    );
    let abort: ((e?: Error) => void) | undefined;
    const pending = call(pool, srv.origin, '{}', { onConnect: (a) => (abort = a) });
    for (let i = 0; i < 100 && srv.requests.length === 0; i++)
      await new Promise((r) => setTimeout(r, 5));
    await new Promise((r) => setTimeout(r, 20));
    abort!(new Error('client went away'));
    const got = await pending;
    expect(got.body).toBe('abc');
    expect(got.error?.message).toBe('client went away');
    for (let i = 0; i < 100 && !serverSocketClosed; i++) await new Promise((r) => setTimeout(r, 5));
    expect(serverSocketClosed).toBe(true);
    expect(pool.size).toBe(0);
  });

  it('pauses the connection while the handler is full, resumes on request', async () => {
    const big = 'y'.repeat(256 * 1024);
    const srv = await rawServer((socket) => {
      socket.write(`HTTP/1.1 200 OK\r\nContent-Length: ${big.length}\r\n\r\n${big}`);
    });
    const pool = new UpstreamPool();
    cleanup.push(
      () => pool.destroy(),
      () => srv.server.close(),
    );
    let received = 0;
    let pausedAt = -1;
    let resume: (() => void) | undefined;
    const done = new Promise<void>((resolve, reject) => {
      pool.dispatch(
        { origin: srv.origin, path: '/', method: 'POST', headers: {}, body: Buffer.alloc(0) },
        {
          onConnect: () => {},
          onHeaders: (_s, _h, r) => {
            resume = r;
            return true;
          },
          onData: (chunk) => {
            received += chunk.length;
            if (pausedAt === -1) {
              pausedAt = received;
              setTimeout(() => resume!(), 30);
              return false;
            }
            return true;
          },
          onComplete: () => resolve(),
          onError: reject,
        },
      );
    });
    await done;
    expect(received).toBe(big.length);
    expect(pausedAt).toBeGreaterThan(0);
  });

  it('refuses a header value with CR or LF instead of sending it', async () => {
    const srv = await rawServer((socket) =>
      socket.write('HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n'),
    );
    const pool = new UpstreamPool();
    cleanup.push(
      () => pool.destroy(),
      () => srv.server.close(),
    );
    const got = await new Promise<Error | undefined>((resolve) => {
      pool.dispatch(
        {
          origin: srv.origin,
          path: '/',
          method: 'POST',
          headers: { 'x-evil': 'a\r\nx-injected: 1' },
          body: Buffer.alloc(0),
        },
        {
          onConnect: () => {},
          onHeaders: () => true,
          onData: () => true,
          onComplete: () => resolve(undefined),
          onError: resolve,
        },
      );
    });
    expect(got?.message).toMatch(/x-evil has a value with CR, LF or NUL/);
    expect(srv.requests).toEqual([]);
  });
});
