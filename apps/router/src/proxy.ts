// Forwarding one attempt to one rank, and piping the answer back. The body is the client's
// raw bytes unless the router must change it (routed_dp_rank), so fields the router does not
// read pass through untouched. Streams are piped chunk by chunk: each upstream chunk is
// written as it arrives, the upstream is paused while the client's socket is full, and a
// client that goes away destroys the upstream body, which closes that connection, which is
// how SGLang and the mock worker learn to abort the request.
import type { IncomingHttpHeaders, ServerResponse } from 'node:http';
import { type Agent, type Dispatcher, request } from 'undici';
import type { ReportedUsage } from './usage-scanner.ts';
import { UsageScanner } from './usage-scanner.ts';

// Hop-by-hop and framing headers are the proxy's own business on each leg.
const HOP_BY_HOP = new Set([
  'connection',
  'keep-alive',
  'proxy-authenticate',
  'proxy-authorization',
  'proxy-connection',
  'te',
  'trailer',
  'transfer-encoding',
  'upgrade',
  'host',
  'content-length',
  'expect',
]);

// Routing hints are consumed here; the worker gets the router's decision instead.
const CONSUMED = new Set(['x-data-parallel-rank', 'x-routing-key', 'x-smg-routing-key']);

export function upstreamRequestHeaders(
  incoming: IncomingHttpHeaders,
  bodyLength: number,
  dpRank: number | undefined,
): Record<string, string> {
  const out: Record<string, string> = {};
  for (const name in incoming) {
    if (HOP_BY_HOP.has(name) || CONSUMED.has(name)) continue;
    const v = incoming[name];
    if (v === undefined) continue;
    out[name] = Array.isArray(v) ? v.join(', ') : v;
  }
  out['content-type'] = 'application/json';
  out['content-length'] = String(bodyLength);
  if (dpRank !== undefined) out['x-data-parallel-rank'] = String(dpRank);
  return out;
}

export function downstreamHeaders(
  upstream: IncomingHttpHeaders,
  extra: Record<string, string>,
): Record<string, string | string[]> {
  const out: Record<string, string | string[]> = {};
  for (const name in upstream) {
    if (name !== 'content-length' && HOP_BY_HOP.has(name)) continue;
    const v = upstream[name];
    if (v !== undefined) out[name] = v;
  }
  return Object.assign(out, extra);
}

export type AttemptFailure =
  /** Could not connect (refused, unreachable, connect timeout): the worker is gone. */
  | { kind: 'connect'; detail: string }
  /** The connection broke before response headers (reset, closed). */
  | { kind: 'socket'; detail: string }
  /** Headers arrived with a 5xx status. The response is still open, to forward or discard. */
  | { kind: 'status'; detail: string; response: Dispatcher.ResponseData };

const CONNECT_CODES = new Set([
  'ECONNREFUSED',
  'EHOSTUNREACH',
  'ENETUNREACH',
  'ENOTFOUND',
  'EAI_AGAIN',
  'UND_ERR_CONNECT_TIMEOUT',
]);

function errorCode(err: unknown): string | undefined {
  const e = err as { code?: string; cause?: { code?: string } } | undefined;
  return e?.code ?? e?.cause?.code;
}

export function classifyNetworkError(err: unknown): AttemptFailure {
  const code = errorCode(err);
  const message = err instanceof Error ? err.message : String(err);
  const detail = code && !message.includes(code) ? `${message} (${code})` : message;
  return code && CONNECT_CODES.has(code) ? { kind: 'connect', detail } : { kind: 'socket', detail };
}

export interface AttemptOptions {
  agent: Agent;
  url: string;
  headers: Record<string, string>;
  body: Buffer;
  signal: AbortSignal;
}

export type AttemptResult =
  | { ok: true; response: Dispatcher.ResponseData }
  | { ok: false; failure: AttemptFailure };

/** One POST to one worker. Resolves when headers arrive; rejects only when `signal` aborted. */
export async function attempt(opts: AttemptOptions): Promise<AttemptResult> {
  let response: Dispatcher.ResponseData;
  try {
    response = await request(opts.url, {
      method: 'POST',
      headers: opts.headers,
      body: opts.body,
      signal: opts.signal,
      dispatcher: opts.agent,
      // The router's own timer (--request-timeout-ms) bounds the whole request.
      headersTimeout: 0,
      bodyTimeout: 0,
    });
  } catch (err) {
    if (opts.signal.aborted) throw err;
    return { ok: false, failure: classifyNetworkError(err) };
  }
  if (response.statusCode >= 500) {
    return {
      ok: false,
      failure: { kind: 'status', detail: `worker answered ${response.statusCode}`, response },
    };
  }
  return { ok: true, response };
}

export type PipeEnd =
  /** The worker's body ended and the client got all of it. */
  | 'complete'
  /** The client went away before the end; the upstream was destroyed. */
  | 'client-closed'
  /** The upstream body failed mid-way (worker died, timeout); the client's stream was cut. */
  | 'upstream-error';

export interface PipeOutcome {
  end: PipeEnd;
  usage?: ReportedUsage;
  error?: unknown;
}

/**
 * Writes status, headers and the body to the client as the worker produces it.
 * `onFirstByte` fires at the first body chunk (TTFT for streams).
 */
export function pipeResponse(
  response: Dispatcher.ResponseData,
  res: ServerResponse,
  extraHeaders: Record<string, string>,
  onFirstByte: () => void,
): Promise<PipeOutcome> {
  const body = response.body;
  const contentType = String(response.headers['content-type'] ?? '');
  const scanner = new UsageScanner(contentType.startsWith('text/event-stream'));
  // Headers leave with the first body chunk (one write instead of two per response).
  res.writeHead(response.statusCode, downstreamHeaders(response.headers, extraHeaders));
  return new Promise<PipeOutcome>((resolve) => {
    let first = true;
    let settled = false;
    const settle = (outcome: PipeOutcome): void => {
      if (settled) return;
      settled = true;
      body.off('data', onData);
      res.off('close', onClose);
      res.off('drain', onDrain);
      resolve(outcome);
    };
    const onDrain = (): void => {
      body.resume();
    };
    const onData = (chunk: Buffer): void => {
      if (first) {
        first = false;
        onFirstByte();
      }
      scanner.push(chunk);
      if (!res.write(chunk)) body.pause();
    };
    const onClose = (): void => {
      // 'close' before 'finish' means the client's connection went away mid-response.
      if (!res.writableFinished) {
        body.destroy();
        settle({ end: 'client-closed' });
      }
    };
    res.on('drain', onDrain);
    res.on('close', onClose);
    body.on('data', onData);
    body.once('end', () => {
      res.end();
      settle({ end: 'complete', usage: scanner.result() });
    });
    body.on('error', (err) => {
      if (settled) return;
      // Status and part of the body are already out: all we can do is cut the connection,
      // so the client sees an incomplete response rather than a clean end.
      res.destroy();
      settle({ end: 'upstream-error', error: err });
    });
  });
}
