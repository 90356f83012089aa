// The HTTP client stack kvroute talks to workers with: undici, so the router's proxied
// requests, health checks and load polls, validate's timed requests and the tests share one
// set of connection, timeout and error semantics.
import { Agent, type Dispatcher, request } from 'undici';

export type { Dispatcher } from 'undici';

export interface HttpAgentOptions {
  /** Idle keep-alive connections are closed after this long (default 30 s). */
  keepAliveTimeoutMs?: number;
  /** Connections per origin; undefined (default) leaves them unbounded. */
  connections?: number;
}

/**
 * A keep-alive pool per origin. Unbounded connections and no pipelining by default: the
 * caller's own concurrency bound (the router's admission, validate's --concurrency) is the
 * only one in play, and a slow stream never holds up a request queued behind it.
 */
export function createHttpAgent(opts: HttpAgentOptions = {}): Agent {
  return new Agent({
    keepAliveTimeout: opts.keepAliveTimeoutMs ?? 30_000,
    connections: opts.connections ?? null,
    pipelining: 1,
  });
}

export interface GetResult {
  status: number;
  text: string;
}

/**
 * GET with a hard timeout; rejects on connect errors and timeouts, resolves on any status.
 * `agent` undefined: undici's global dispatcher (one-off calls from a CLI).
 */
export async function getText(
  agent: Dispatcher | undefined,
  url: string | URL,
  timeoutMs: number,
  headers?: Record<string, string>,
): Promise<GetResult> {
  const res = await request(url, {
    method: 'GET',
    ...(agent ? { dispatcher: agent } : {}),
    signal: AbortSignal.timeout(timeoutMs),
    headersTimeout: timeoutMs,
    bodyTimeout: timeoutMs,
    ...(headers ? { headers } : {}),
  });
  const text = await res.body.text();
  return { status: res.statusCode, text };
}

export interface PostOptions {
  headers: Record<string, string>;
  body: Buffer | string;
  /** Aborting it cuts the request at any point; there is no other timeout (long prefills). */
  signal?: AbortSignal;
}

/** A POST whose response body is read as it arrives (streams): resolves at the headers. */
export function post(
  agent: Dispatcher,
  url: string | URL,
  opts: PostOptions,
): Promise<Dispatcher.ResponseData> {
  return request(url, {
    method: 'POST',
    dispatcher: agent,
    headers: opts.headers,
    body: opts.body,
    ...(opts.signal ? { signal: opts.signal } : {}),
    headersTimeout: 0,
    bodyTimeout: 0,
  });
}

/** GET a JSON document: rejects with a message naming the URL on a non-200 or non-JSON answer. */
export async function getJson(
  agent: Dispatcher,
  url: string | URL,
  timeoutMs: number,
): Promise<unknown> {
  const { status, text } = await getText(agent, url, timeoutMs);
  if (status !== 200) throw new Error(`GET ${url} answered ${status}: ${text.slice(0, 200)}`);
  try {
    return JSON.parse(text);
  } catch {
    throw new Error(`GET ${url} did not answer JSON: ${text.slice(0, 200)}`);
  }
}

/** The error's code, or its cause's (undici nests the system error, e.g. ECONNREFUSED). */
export function errorCode(err: unknown): string | undefined {
  const e = err as { code?: string; cause?: { code?: string } | null } | null | undefined;
  return e?.code ?? e?.cause?.code;
}

/** Codes that mean nothing answers at that address: the peer is gone, not misbehaving. */
const CONNECT_CODES = new Set([
  'ECONNREFUSED',
  'EHOSTUNREACH',
  'ENETUNREACH',
  'ENOTFOUND',
  'EAI_AGAIN',
  'UND_ERR_CONNECT_TIMEOUT',
]);

/** Whether the error is a failure to connect (refused, unreachable, no such host). */
export function isConnectError(err: unknown): boolean {
  const code = errorCode(err);
  return code !== undefined && CONNECT_CODES.has(code);
}

/** Short, log-friendly description of a network error, with its code. */
export function describeError(err: unknown): string {
  if (!(err instanceof Error)) return String(err);
  const code = errorCode(err);
  const msg = err.name === 'TimeoutError' ? 'timed out' : err.message;
  return code && !msg.includes(code) ? `${msg} (${code})` : msg;
}
