// A tiny SGLang/OpenAI-shaped server for the validate harness's tests: it streams a fixed
// number of content chunks, reports cached tokens from its own prefix memory (the longest
// prefix of any earlier prompt), and records every body it received.
import http from 'node:http';
import type { AddressInfo } from 'node:net';

export interface FakeTargetOptions {
  /** Delay before the first content chunk, ms. */
  firstChunkDelayMs?: number;
  /** Answer this status with an OpenAI error body instead of streaming. */
  failStatus?: number;
  /** Only the first this many requests get failStatus (default: every one). */
  failFirst?: number;
  /** Respond with a plain JSON body even when asked to stream. */
  ignoreStream?: boolean;
  /** Put this rank in an x-kvroute-rank header. */
  rankHeader?: (body: Record<string, unknown>) => number | undefined;
  /** Send an SSE error chunk instead of content. */
  streamError?: string;
  /** Omit cached token counts from responses. */
  noCachedTokens?: boolean;
  /** dp_size for /get_server_info; undefined makes /get_server_info 404. */
  dpSize?: number;
  /** Extra /get_server_info fields. */
  serverInfo?: Record<string, unknown>;
}

export interface FakeTarget {
  url: string;
  bodies: Record<string, unknown>[];
  headers: http.IncomingHttpHeaders[];
  paths: string[];
  close(): Promise<void>;
}

function commonPrefix(a: readonly number[], b: readonly number[]): number {
  let i = 0;
  while (i < a.length && i < b.length && a[i] === b[i]) i++;
  return i;
}

export async function startFakeTarget(opts: FakeTargetOptions = {}): Promise<FakeTarget> {
  const seen: number[][] = [];
  const bodies: Record<string, unknown>[] = [];
  const headers: http.IncomingHttpHeaders[] = [];
  const paths: string[] = [];
  const server = http.createServer((req, res) => {
    if (req.method === 'GET') {
      if (req.url === '/get_server_info' && opts.dpSize !== undefined) {
        res.writeHead(200, { 'content-type': 'application/json' });
        res.end(
          JSON.stringify({
            dp_size: opts.dpSize,
            max_total_num_tokens: 50_000,
            page_size: 1,
            chunked_prefill_size: 4096,
            engine: 'fake',
            ...opts.serverInfo,
          }),
        );
        return;
      }
      if (req.url === '/v1/models') {
        res.writeHead(200, { 'content-type': 'application/json' });
        res.end(JSON.stringify({ object: 'list', data: [{ id: 'fake-model', object: 'model' }] }));
        return;
      }
      res.writeHead(404, { 'content-type': 'application/json' });
      res.end(
        JSON.stringify({
          error: { message: 'not found', type: 'invalid_request_error', param: null, code: null },
        }),
      );
      return;
    }
    let raw = '';
    req.setEncoding('utf8');
    req.on('data', (c: string) => {
      raw += c;
    });
    req.on('end', () => {
      const body = JSON.parse(raw) as Record<string, unknown>;
      bodies.push(body);
      headers.push(req.headers);
      paths.push(req.url ?? '');
      if (
        opts.failStatus !== undefined &&
        (opts.failFirst === undefined || bodies.length <= opts.failFirst)
      ) {
        res.writeHead(opts.failStatus, { 'content-type': 'application/json' });
        res.end(
          JSON.stringify({
            error: {
              message: 'input too long',
              type: 'invalid_request_error',
              param: 'input_ids',
              code: 'context_length_exceeded',
            },
          }),
        );
        return;
      }
      const ids = (body.input_ids ?? body.prompt ?? []) as number[];
      const ids2 = Array.isArray(ids) ? ids : [];
      let cached = 0;
      for (const s of seen) cached = Math.max(cached, commonPrefix(s, ids2));
      seen.push(ids2);
      const maxNew = Number(
        (body.sampling_params as Record<string, unknown> | undefined)?.max_new_tokens ??
          body.max_tokens ??
          4,
      );
      const isGenerate = req.url === '/generate';
      const rank = opts.rankHeader?.(body);
      const h: Record<string, string> = {};
      if (rank !== undefined) h['x-kvroute-rank'] = String(rank);
      const meta = (n: number) => ({
        id: 'r',
        prompt_tokens: ids2.length,
        completion_tokens: n,
        ...(opts.noCachedTokens ? {} : { cached_tokens: cached }),
        finish_reason: n === maxNew ? { type: 'length' } : null,
      });
      const usage = {
        prompt_tokens: ids2.length,
        completion_tokens: maxNew,
        total_tokens: ids2.length + maxNew,
        ...(opts.noCachedTokens ? {} : { prompt_tokens_details: { cached_tokens: cached } }),
      };
      if (opts.ignoreStream) {
        res.writeHead(200, { 'content-type': 'application/json', ...h });
        res.end(
          JSON.stringify(
            isGenerate
              ? { text: 'x'.repeat(maxNew), meta_info: meta(maxNew) }
              : {
                  object: 'text_completion',
                  choices: [{ index: 0, text: 'x'.repeat(maxNew) }],
                  usage,
                },
          ),
        );
        return;
      }
      res.writeHead(200, { 'content-type': 'text/event-stream', ...h });
      const chat = req.url === '/v1/chat/completions';
      if (chat) {
        // A role-only first chunk carries no content and must not count as the first token.
        res.write(
          `data: ${JSON.stringify({ object: 'chat.completion.chunk', choices: [{ index: 0, delta: { role: 'assistant' } }] })}\n\n`,
        );
      }
      setTimeout(() => {
        if (opts.streamError !== undefined) {
          res.write(`data: ${JSON.stringify({ error: { message: opts.streamError } })}\n\n`);
          res.end('data: [DONE]\n\n');
          return;
        }
        for (let n = 1; n <= maxNew; n++) {
          const chunk = isGenerate
            ? { text: 'x'.repeat(n), meta_info: meta(n) }
            : chat
              ? {
                  object: 'chat.completion.chunk',
                  choices: [{ index: 0, delta: { content: 'x' } }],
                }
              : { object: 'text_completion', choices: [{ index: 0, text: 'x' }] };
          res.write(`data: ${JSON.stringify(chunk)}\n\n`);
        }
        if (!isGenerate) {
          res.write(
            `data: ${JSON.stringify({ object: 'text_completion', choices: [], usage })}\n\n`,
          );
        }
        res.end('data: [DONE]\n\n');
      }, opts.firstChunkDelayMs ?? 5);
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    bodies,
    headers,
    paths,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}
