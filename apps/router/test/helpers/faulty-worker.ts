// A worker that misbehaves on purpose, for the fault-injection tests and the fault benchmark
// (bench/fault.bench.ts). In mode 'ok' it answers chat completions correctly, plain or
// streamed; every other mode is one way real engines and networks fail. The mode can be
// changed at any time (a worker "recovers" by going back to 'ok').
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';

export const FAULT_MODES = [
  'mid-stream-close',
  'mid-body-close',
  'headers-then-close',
  'garbage-json',
  'garbage-sse',
  'hang-before-headers',
  'hang-mid-stream',
  'status-500',
  'reset',
  'slow-trickle',
] as const;

export type FaultMode = 'ok' | (typeof FAULT_MODES)[number];

/** Whether a mode fails before the client could have been sent any byte (so it is retriable). */
export function failsBeforeClientBytes(mode: FaultMode, stream: boolean): boolean {
  switch (mode) {
    case 'headers-then-close':
    case 'garbage-json':
    case 'hang-before-headers':
    case 'status-500':
    case 'reset':
    case 'garbage-sse':
      return true;
    case 'mid-body-close':
    case 'mid-stream-close':
    case 'hang-mid-stream':
      // A plain body is held until complete; a stream has sent its first event.
      return !stream;
    default:
      return false;
  }
}

export interface FaultyWorker {
  url: string;
  mode: FaultMode;
  /** Requests received on the inference route. */
  requests: number;
  /** Date.now() of the first request answered in a faulty mode. */
  firstFaultAt: number | undefined;
  /** Delay between streamed events in ms (slow-trickle uses 10x this). */
  eventGapMs: number;
  close(): Promise<void>;
}

const COMPLETION = JSON.stringify({
  id: 'c1',
  object: 'chat.completion',
  choices: [{ index: 0, message: { role: 'assistant', content: 'hello' }, finish_reason: 'stop' }],
  usage: { prompt_tokens: 10, completion_tokens: 1, total_tokens: 11 },
});
const event = (content: string): string =>
  `data: ${JSON.stringify({ id: 'c1', object: 'chat.completion.chunk', choices: [{ index: 0, delta: { content } }] })}\n\n`;
const USAGE_EVENT = `data: ${JSON.stringify({ id: 'c1', choices: [], usage: { prompt_tokens: 10, completion_tokens: 3, total_tokens: 13 } })}\n\n`;

/** An SSE answer written as `parts`, one write each, `gapMs` apart (the last ends it). */
export function streamParts(
  res: ServerResponse,
  parts: readonly (string | Buffer)[],
  gapMs: number,
): void {
  res.writeHead(200, { 'content-type': 'text/event-stream' });
  let i = 0;
  const next = (): void => {
    if (res.destroyed) return;
    if (i === parts.length - 1) {
      res.end(parts[i]);
      return;
    }
    res.write(parts[i++]);
    setTimeout(next, gapMs);
  };
  next();
}

export async function startFaultyWorker(mode: FaultMode = 'ok'): Promise<FaultyWorker> {
  const hung = new Set<ServerResponse>();
  const worker: FaultyWorker = {
    url: '',
    mode,
    requests: 0,
    firstFaultAt: undefined,
    eventGapMs: 5,
    close: async () => {
      for (const r of hung) r.destroy();
      server.closeAllConnections();
      await new Promise<void>((r) => server.close(() => r()));
    },
  };
  const json = (res: ServerResponse, status: number, text: string): void => {
    res.writeHead(status, {
      'content-type': 'application/json',
      'content-length': Buffer.byteLength(text),
    });
    res.end(text);
  };
  const streamOk = (res: ServerResponse, gap: number): void =>
    streamParts(res, [event('a'), event('b'), event('c'), USAGE_EVENT, 'data: [DONE]\n\n'], gap);
  const hang = (res: ServerResponse): void => {
    hung.add(res);
    res.on('close', () => hung.delete(res));
  };

  const infer = (
    req: IncomingMessage,
    res: ServerResponse,
    body: Record<string, unknown>,
  ): void => {
    worker.requests++;
    if (worker.mode !== 'ok' && worker.mode !== 'slow-trickle') worker.firstFaultAt ??= Date.now();
    const stream = body.stream === true;
    const gap = worker.eventGapMs;
    switch (worker.mode) {
      case 'ok':
        if (stream) streamOk(res, gap);
        else json(res, 200, COMPLETION);
        return;
      case 'slow-trickle':
        if (stream) streamOk(res, gap * 10);
        else {
          // A correct body, a few bytes at a time.
          res.writeHead(200, {
            'content-type': 'application/json',
            'content-length': Buffer.byteLength(COMPLETION),
          });
          let at = 0;
          const step = (): void => {
            if (res.destroyed) return;
            const piece = COMPLETION.slice(at, at + 40);
            at += 40;
            if (at >= COMPLETION.length) res.end(piece);
            else {
              res.write(piece);
              setTimeout(step, gap);
            }
          };
          step();
        }
        return;
      case 'mid-stream-close':
      case 'mid-body-close':
        if (stream) {
          res.writeHead(200, { 'content-type': 'text/event-stream' });
          res.write(event('a'));
          setTimeout(() => res.destroy(), gap);
        } else {
          res.writeHead(200, {
            'content-type': 'application/json',
            'content-length': Buffer.byteLength(COMPLETION),
          });
          res.write(COMPLETION.slice(0, 30));
          setTimeout(() => res.destroy(), gap);
        }
        return;
      case 'headers-then-close':
        res.writeHead(200, { 'content-type': stream ? 'text/event-stream' : 'application/json' });
        res.flushHeaders();
        setTimeout(() => res.destroy(), gap);
        return;
      case 'garbage-json':
        if (stream) {
          res.writeHead(200, { 'content-type': 'text/event-stream' });
          res.end('<html>502 Bad Gateway</html>\n\n');
        } else json(res, 200, '<html>502 Bad Gateway</html>');
        return;
      case 'garbage-sse':
        if (stream) {
          res.writeHead(200, { 'content-type': 'text/event-stream' });
          res.end('data: {"choices":[{"delta":{"content":"a"\n\ndata: [DONE]\n\n');
        } else json(res, 200, '{"choices": [');
        return;
      case 'hang-before-headers':
        hang(res);
        return;
      case 'hang-mid-stream':
        if (stream) {
          res.writeHead(200, { 'content-type': 'text/event-stream' });
          res.write(event('a'));
        } else {
          res.writeHead(200, {
            'content-type': 'application/json',
            'content-length': Buffer.byteLength(COMPLETION),
          });
          res.write(COMPLETION.slice(0, 30));
        }
        hang(res);
        return;
      case 'status-500':
        json(
          res,
          500,
          '{"error":{"message":"engine crashed","type":"server_error","param":null,"code":null}}',
        );
        return;
      case 'reset':
        req.socket.resetAndDestroy();
        return;
    }
  };

  const server: Server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const path = (req.url ?? '/').split('?')[0];
      if (req.method === 'GET' && path === '/health') return json(res, 200, '{}');
      if (req.method === 'GET' && path === '/health_generate') {
        if (worker.mode === 'hang-before-headers') return hang(res);
        if (worker.mode === 'status-500') return json(res, 500, '{}');
        return json(res, 200, '{}');
      }
      if (req.method === 'GET' && path === '/v1/models') {
        return json(
          res,
          200,
          '{"object":"list","data":[{"id":"m","object":"model","max_model_len":32768}]}',
        );
      }
      if (req.method === 'POST' && path === '/v1/chat/completions') {
        let body: Record<string, unknown> = {};
        try {
          body = JSON.parse(Buffer.concat(chunks).toString('utf8'));
        } catch {}
        return infer(req, res, body);
      }
      json(
        res,
        404,
        '{"error":{"message":"nope","type":"not_found_error","param":null,"code":null}}',
      );
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', () => r()));
  worker.url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  return worker;
}

export interface Outcome {
  stream: boolean;
  status: number;
  /** A complete, well-formed answer. */
  ok: boolean;
  /** An explicit error: an error status with OpenAI's error body, or a stream's error event. */
  explicitError: boolean;
  /** A 200 whose body is not a well-formed answer (must never happen). */
  garbage200: boolean;
  /** The client got nothing usable: connection cut, no end, no error (must never happen). */
  lost: boolean;
  ms: number;
}

/** Judges one response body as a client would. */
export function judge(stream: boolean, status: number, text: string, ms: number): Outcome {
  const out: Outcome = {
    stream,
    status,
    ok: false,
    explicitError: false,
    garbage200: false,
    lost: false,
    ms,
  };
  if (status !== 200) {
    try {
      const e = JSON.parse(text) as { error?: { message?: unknown } };
      out.explicitError = typeof e.error?.message === 'string';
    } catch {}
    out.lost = !out.explicitError;
    return out;
  }
  if (!stream) {
    try {
      const v = JSON.parse(text) as { choices?: unknown };
      out.ok = Array.isArray(v.choices);
    } catch {}
    out.garbage200 = !out.ok;
    return out;
  }
  const events = text.split('\n\n').filter((e) => e.trim().length > 0);
  let error = false;
  let done = false;
  for (const e of events) {
    if (!e.startsWith('data: ')) {
      out.garbage200 = true;
      return out;
    }
    const payload = e.slice(6);
    if (payload === '[DONE]') {
      done = true;
      continue;
    }
    try {
      const v = JSON.parse(payload) as { error?: unknown };
      if (v.error) error = true;
    } catch {
      out.garbage200 = true;
      return out;
    }
  }
  if (!done) out.lost = true;
  else if (error) out.explicitError = true;
  else out.ok = true;
  return out;
}
