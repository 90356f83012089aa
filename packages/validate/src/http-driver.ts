// Sends one planned request to a live SGLang/OpenAI-compatible endpoint with streaming on,
// and measures it the way a user feels it: TTFT is the time from writing the request to the
// first chunk that carries generated content (not the headers, not an empty role chunk).
//
// The HTTP client is protocol's (undici, a keep-alive pool whose connections are not capped,
// so the harness's own concurrency bound is the only one in play); chunks are timed as the
// body iterator yields them, and SSE and usage are read by protocol's one reader of each.
import type { IncomingHttpHeaders } from 'node:http';
import { performance } from 'node:perf_hooks';
import {
  createHttpAgent,
  type Dispatcher,
  describeError,
  errorCode,
  getText,
  post,
  REQUEST_PATHS,
  type RequestKind,
  type ResponseFacts,
  responseFacts,
  SSE_DONE_DATA,
  SseReader,
} from '@kvroute/protocol';
import { approximateTokenIds, canonicalChatText } from '@kvroute/protocol/routing-text';
import { UsageError } from '@kvroute/sim/cli';
import type { ApiKind, PlanRequest } from './types.ts';

export interface DriverOptions {
  /** Base URL of the target, e.g. http://127.0.0.1:30000 (a trailing /v1 is tolerated). */
  target: string;
  api: ApiKind;
  /** `model` field for the OpenAI APIs. */
  model?: string;
  /** Per-request limit; the request fails with status 0 after it. Default 10 minutes. */
  timeoutMs?: number;
  headers?: Record<string, string>;
  /** Sampling temperature sent with every request (default 0, as the seed runs used). */
  temperature?: number;
}

/** The result of one send, timed against `performance.now()`. */
export interface SendResult {
  status: number;
  ok: boolean;
  error?: string;
  sentAt: number;
  firstContentAt?: number;
  endAt: number;
  promptTokens?: number;
  cachedTokens?: number;
  outputTokens?: number;
  rank?: number;
}

export interface HttpDriver {
  readonly url: string;
  send(req: PlanRequest, signal?: AbortSignal): Promise<SendResult>;
  close(): void;
}

/** The protocol request kind (and so the path) each `--api` name sends to. */
const API_REQUEST_KIND: Record<ApiKind, RequestKind> = {
  generate: 'generate',
  completions: 'completion',
  chat: 'chat',
};

/**
 * Joins the target and an API path. A target given as the OpenAI SDK's base URL (`.../v1`)
 * stands for its server: `/v1/completions` is not doubled, and SGLang's own routes
 * (`/generate`, `/get_server_info`) are the server's, not under `/v1`.
 */
export function endpointUrl(target: string, path: string): URL {
  let base: URL;
  try {
    base = new URL(target);
  } catch {
    throw new UsageError(`--target: not a URL: '${target}'`, 'validate');
  }
  if (base.protocol !== 'http:' && base.protocol !== 'https:') {
    throw new UsageError(
      `--target: only http:// and https:// are supported, got '${target}'`,
      'validate',
    );
  }
  let prefix = base.pathname.replace(/\/+$/, '');
  if (prefix.endsWith('/v1')) prefix = prefix.slice(0, -3);
  return new URL(`${base.origin}${prefix}${path}`);
}

/**
 * Chat endpoints take text, and plans carry token ids. Each id becomes four ASCII bytes
 * (three base-64 digits and a space) and the content starts with padding that aligns it to
 * a 4-byte boundary after the `<|user|>\n` header of the routing tokenizer, so a
 * kvroute router or mock worker sees exactly one token per planned id and shared prefixes
 * stay shared. A real tokenizer will count differently; the hit rate is then approximate.
 */
const DIGITS = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/';
const CHAT_HEADER_BYTES = '<|user|>\n'.length;
const CHAT_PAD = 'x'.repeat((4 - (CHAT_HEADER_BYTES % 4)) % 4);

export function idsToChatText(ids: ArrayLike<number>): string {
  const parts: string[] = [CHAT_PAD];
  for (let i = 0; i < ids.length; i++) {
    const id = ids[i]! % 262_144;
    parts.push(
      DIGITS[(id >> 12) & 63]! +
        DIGITS[(id >> 6) & 63]! +
        DIGITS[id & 63]! +
        (i % 16 === 15 ? '\n' : ' '),
    );
  }
  return parts.join('');
}

/**
 * The token ids a kvroute router or worker derives from the chat body sent for `ids` (canonical
 * chat text, UTF-8 bytes in little-endian groups of 4), so the simulator can
 * route and cache exactly what such a target sees.
 */
export function chatRoutingIds(ids: ArrayLike<number>): Uint32Array {
  return approximateTokenIds(canonicalChatText([{ role: 'user', content: idsToChatText(ids) }]));
}

export function buildBody(req: PlanRequest, opts: DriverOptions): Record<string, unknown> {
  const temperature = opts.temperature ?? 0;
  const ids = Array.from(req.inputIds);
  switch (opts.api) {
    case 'generate':
      return {
        input_ids: ids,
        sampling_params: {
          max_new_tokens: req.outputTokens,
          temperature,
          // The plan fixes the output length; a model that stops early would change the load.
          ignore_eos: true,
        },
        stream: true,
        rid: `kvroute-validate-${req.id}`,
      };
    case 'completions':
      return {
        model: opts.model ?? 'default',
        prompt: ids,
        max_tokens: req.outputTokens,
        temperature,
        ignore_eos: true,
        stream: true,
        stream_options: { include_usage: true },
      };
    case 'chat':
      return {
        model: opts.model ?? 'default',
        messages: [{ role: 'user', content: idsToChatText(ids) }],
        max_tokens: req.outputTokens,
        temperature,
        ignore_eos: true,
        stream: true,
        stream_options: { include_usage: true },
      };
  }
}

const RANK_HEADERS = ['x-kvroute-rank', 'x-kvroute-dp-rank', 'x-data-parallel-rank', 'x-dp-rank'];

function rankFromHeaders(headers: IncomingHttpHeaders): number | undefined {
  for (const name of RANK_HEADERS) {
    const v = headers[name];
    const s = Array.isArray(v) ? v[0] : v;
    if (s !== undefined && /^\d+$/.test(s.trim())) return Number(s.trim());
  }
  return undefined;
}

export function createHttpDriver(opts: DriverOptions): HttpDriver {
  const url = endpointUrl(opts.target, REQUEST_PATHS[API_REQUEST_KIND[opts.api]]);
  const agent = createHttpAgent();
  const timeoutMs = opts.timeoutMs ?? 600_000;

  async function send(req: PlanRequest, signal?: AbortSignal): Promise<SendResult> {
    const payload = Buffer.from(JSON.stringify(buildBody(req, opts)));
    const headers: Record<string, string> = {
      'content-type': 'application/json',
      accept: 'text/event-stream, application/json',
      'content-length': String(payload.length),
      ...opts.headers,
    };
    if (req.routingKey !== undefined) headers['x-routing-key'] = req.routingKey;

    const sentAt = performance.now();
    const result: SendResult = { status: 0, ok: false, sentAt, endAt: sentAt };
    // Why the request was cut short (timeout, caller's abort): that, not undici's AbortError,
    // is what the result reports.
    let cutShort: string | undefined;
    const cut = new AbortController();
    const timer = setTimeout(() => {
      cutShort ??= `timed out after ${timeoutMs} ms waiting for ${url.href}`;
      cut.abort();
    }, timeoutMs);
    const onAbort = () => {
      cutShort ??= 'aborted';
      cut.abort();
    };
    if (signal?.aborted) onAbort();
    else signal?.addEventListener('abort', onAbort, { once: true });
    const finish = (error?: string): SendResult => {
      clearTimeout(timer);
      signal?.removeEventListener('abort', onAbort);
      result.endAt = performance.now();
      if (error !== undefined) {
        result.ok = false;
        result.error = error;
      }
      return result;
    };
    if (cutShort !== undefined) return finish(cutShort);
    const apply = (f: ResponseFacts) => {
      if (f.promptTokens !== undefined) result.promptTokens = f.promptTokens;
      if (f.cachedTokens !== undefined) result.cachedTokens = f.cachedTokens;
      if (f.outputTokens !== undefined) result.outputTokens = f.outputTokens;
      if (f.rank !== undefined && result.rank === undefined) result.rank = f.rank;
      if (f.content && result.firstContentAt === undefined) {
        result.firstContentAt = performance.now();
      }
    };

    let res: Dispatcher.ResponseData;
    try {
      // The per-request timer above bounds the whole exchange; a long prefill is legitimate.
      res = await post(agent, url, { headers, body: payload, signal: cut.signal });
    } catch (e) {
      return finish(
        cutShort ?? `cannot reach ${url.href}: ${errorCode(e) ?? (e as Error).message}`,
      );
    }
    result.status = res.statusCode;
    const rank = rankFromHeaders(res.headers);
    if (rank !== undefined) result.rank = rank;
    const isSse = String(res.headers['content-type'] ?? '').includes('text/event-stream');
    let whole = '';
    let streamError: string | undefined;
    let sawDone = false;
    const reader = isSse
      ? new SseReader((data) => {
          if (data.trim() === SSE_DONE_DATA) {
            sawDone = true;
            return;
          }
          let obj: unknown;
          try {
            obj = JSON.parse(data);
          } catch {
            streamError ??= `unparseable stream chunk: ${data.slice(0, 120)}`;
            return;
          }
          const f = responseFacts(obj);
          if (f.error !== undefined) streamError ??= f.error;
          apply(f);
        })
      : undefined;
    try {
      res.body.setEncoding('utf8');
      for await (const chunk of res.body as AsyncIterable<string>) {
        if (reader) reader.push(chunk);
        else whole += chunk;
      }
    } catch (e) {
      return finish(cutShort ?? `response from ${url.href} broke off: ${(e as Error).message}`);
    }
    const ok2xx = result.status >= 200 && result.status < 300;
    if (reader) {
      reader.end();
      if (!ok2xx) return finish(`HTTP ${result.status} from ${url.href}`);
      if (streamError !== undefined) return finish(streamError);
      if (!sawDone && result.firstContentAt === undefined) {
        return finish(`stream from ${url.href} ended without content`);
      }
      result.ok = true;
      return finish();
    }
    // Whole-body response: an error, or a server that ignored `stream: true`. In the latter
    // case content arrives with the body, so TTFT equals the e2e latency.
    let obj: unknown;
    try {
      obj = whole === '' ? undefined : JSON.parse(whole);
    } catch {
      obj = undefined;
    }
    const f = responseFacts(obj);
    if (!ok2xx) {
      const msg = f.error ?? whole.trim().slice(0, 200);
      return finish(`HTTP ${result.status} from ${url.href}: ${msg}`);
    }
    if (f.error !== undefined) return finish(f.error);
    apply(f);
    result.ok = true;
    return finish();
  }

  return {
    url: url.href,
    send,
    close: () => void agent.close(),
  };
}

/** GETs a JSON document from the target; undefined when it is absent or not JSON. */
export async function getJson(
  target: string,
  path: string,
  timeoutMs = 5000,
): Promise<{ status: number; body: unknown } | { status: 0; error: string }> {
  const url = endpointUrl(target, path);
  try {
    const { status, text } = await getText(undefined, url, timeoutMs);
    let body: unknown;
    try {
      body = JSON.parse(text);
    } catch {
      body = undefined;
    }
    return { status, body };
  } catch (e) {
    return { status: 0, error: `cannot reach ${url.href}: ${describeError(e)}` };
  }
}
