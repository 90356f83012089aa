// A scriptable stand-in for a worker, so router behaviour (retries, streaming, health,
// polling) is tested without the mock worker's cost model. Each handler can be replaced.
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';

export interface Received {
  path: string;
  headers: IncomingMessage['headers'];
  body: Record<string, unknown>;
}

export type Handler = (
  req: IncomingMessage,
  res: ServerResponse,
  body: Record<string, unknown>,
) => void;

export interface FakeWorker {
  url: string;
  received: Received[];
  handlers: Map<string, Handler>;
  /** Connections currently open to the fake (to see aborts reach the worker). */
  closedRequests: number;
  close(): Promise<void>;
}

export function completionBody(body: Record<string, unknown>, cached = 0): object {
  return {
    id: 'cmpl-1',
    object: 'chat.completion',
    choices: [{ index: 0, message: { role: 'assistant', content: 'hi' }, finish_reason: 'stop' }],
    usage: {
      prompt_tokens: 10,
      completion_tokens: 1,
      total_tokens: 11,
      prompt_tokens_details: { cached_tokens: cached },
    },
    echo: body,
  };
}

export async function startFakeWorker(
  opts: { dpSize?: number; name?: string } = {},
): Promise<FakeWorker> {
  const received: Received[] = [];
  const handlers = new Map<string, Handler>();
  const json = (res: ServerResponse, status: number, obj: unknown): void => {
    const text = JSON.stringify(obj);
    res.writeHead(status, {
      'content-type': 'application/json',
      'content-length': Buffer.byteLength(text),
    });
    res.end(text);
  };
  handlers.set('GET /health', (_q, res) => json(res, 200, {}));
  handlers.set('GET /get_server_info', (_q, res) =>
    json(res, 200, { dp_size: opts.dpSize ?? 1, engine: 'fake' }),
  );
  handlers.set('GET /v1/models', (_q, res) =>
    json(res, 200, { object: 'list', data: [{ id: opts.name ?? 'fake-model', object: 'model' }] }),
  );
  const ok: Handler = (_q, res, body) => json(res, 200, completionBody(body, 4));
  handlers.set('POST /v1/chat/completions', ok);
  handlers.set('POST /v1/completions', ok);
  handlers.set('POST /generate', (_q, res) =>
    json(res, 200, {
      text: 'hi',
      meta_info: { id: 'x', prompt_tokens: 10, completion_tokens: 1, cached_tokens: 3 },
    }),
  );
  const worker: FakeWorker = {
    url: '',
    received,
    handlers,
    closedRequests: 0,
    close: async () => {
      server.closeAllConnections();
      await new Promise<void>((r) => server.close(() => r()));
    },
  };
  const server: Server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const path = (req.url ?? '/').split('?')[0]!;
      let body: Record<string, unknown> = {};
      if (chunks.length) body = JSON.parse(Buffer.concat(chunks).toString('utf8'));
      if (req.method === 'POST') received.push({ path, headers: req.headers, body });
      res.on('close', () => {
        if (!res.writableFinished) worker.closedRequests++;
      });
      const h = handlers.get(`${req.method} ${path}`);
      if (!h)
        json(res, 404, {
          error: { message: 'nope', type: 'not_found_error', param: null, code: 'unknown_url' },
        });
      else h(req, res, body);
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', () => r()));
  worker.url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  return worker;
}
