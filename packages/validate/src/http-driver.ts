// Sends one planned request to a live SGLang/OpenAI-compatible endpoint with streaming on,
// and measures it the way a user feels it: TTFT is the time from writing the request to the
// first chunk that carries generated content (not the headers, not an empty role chunk).
//
// node:http rather than fetch: we need the moment each body chunk arrives with as little
// machinery in between as possible, and a keep-alive agent whose pool is not capped, so the
// harness's own concurrency bound is the only one in play.
import http from 'node:http';
import https from 'node:https';
import { performance } from 'node:perf_hooks';
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

const API_PATHS: Record<ApiKind, string> = {
  generate: '/generate',
  completions: '/v1/completions',
  chat: '/v1/chat/completions',
};

/** Joins the target and an API path, so `http://h:1/v1` + `/v1/completions` is not doubled. */
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
  if (prefix.endsWith('/v1') && path.startsWith('/v1/')) prefix = prefix.slice(0, -3);
  return new URL(`${base.origin}${prefix}${path}`);
}

/**
 * Chat endpoints take text, and plans carry token ids. Each id becomes four ASCII bytes
 * (three base-64 digits and a space) and the content starts with padding that aligns it to
 * a 4-byte boundary after the `<|user|>\n` header of the routing tokenizer (spec S-3), so a
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
 * The token ids a kvroute router or worker derives from the chat body sent for `ids` (spec
 * S-3: canonical chat text, UTF-8 bytes in little-endian groups of 4), so the simulator can
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

interface ChunkFacts {
  content: boolean;
  error?: string;
  promptTokens?: number;
  cachedTokens?: number;
  outputTokens?: number;
  rank?: number;
}

function num(v: unknown): number | undefined {
  return typeof v === 'number' && Number.isFinite(v) ? v : undefined;
}

function errorMessage(v: unknown): string | undefined {
  if (v === undefined || v === null) return undefined;
  if (typeof v === 'string') return v;
  if (typeof v === 'object' && typeof (v as { message?: unknown }).message === 'string') {
    return (v as { message: string }).message;
  }
  return JSON.stringify(v);
}

/** Reads what a streamed (or whole) JSON response body says, in any of the three shapes. */
export function parseChunk(obj: unknown): ChunkFacts {
  const facts: ChunkFacts = { content: false };
  if (typeof obj !== 'object' || obj === null) return facts;
  const o = obj as Record<string, unknown>;
  const err = errorMessage(o.error);
  if (err !== undefined) facts.error = err;
  // SGLang /generate: cumulative text plus meta_info on every chunk.
  const meta = o.meta_info as Record<string, unknown> | undefined;
  if (meta && typeof meta === 'object') {
    facts.promptTokens = num(meta.prompt_tokens);
    facts.cachedTokens = num(meta.cached_tokens);
    facts.outputTokens = num(meta.completion_tokens);
    facts.rank = num(meta.dp_rank);
    if ((facts.outputTokens ?? 0) > 0) facts.content = true;
  }
  if (typeof o.text === 'string' && o.text.length > 0) facts.content = true;
  if (Array.isArray(o.output_ids) && o.output_ids.length > 0) facts.content = true;
  // OpenAI: choices[].text (completions) or choices[].delta.content / message.content (chat).
  if (Array.isArray(o.choices)) {
    for (const c of o.choices as Record<string, unknown>[]) {
      if (!c || typeof c !== 'object') continue;
      if (typeof c.text === 'string' && c.text.length > 0) facts.content = true;
      const d = (c.delta ?? c.message) as Record<string, unknown> | undefined;
      if (d && typeof d === 'object') {
        if (typeof d.content === 'string' && d.content.length > 0) facts.content = true;
        if (typeof d.reasoning_content === 'string' && d.reasoning_content.length > 0) {
          facts.content = true;
        }
      }
    }
  }
  const usage = o.usage as Record<string, unknown> | undefined | null;
  if (usage && typeof usage === 'object') {
    facts.promptTokens = num(usage.prompt_tokens) ?? facts.promptTokens;
    facts.outputTokens = num(usage.completion_tokens) ?? facts.outputTokens;
    const details = usage.prompt_tokens_details as Record<string, unknown> | undefined | null;
    if (details && typeof details === 'object') {
      facts.cachedTokens = num(details.cached_tokens) ?? facts.cachedTokens;
    }
  }
  return facts;
}

const RANK_HEADERS = ['x-kvroute-rank', 'x-kvroute-dp-rank', 'x-data-parallel-rank', 'x-dp-rank'];

function rankFromHeaders(headers: http.IncomingHttpHeaders): number | undefined {
  for (const name of RANK_HEADERS) {
    const v = headers[name];
    const s = Array.isArray(v) ? v[0] : v;
    if (s !== undefined && /^\d+$/.test(s.trim())) return Number(s.trim());
  }
  return undefined;
}

export function createHttpDriver(opts: DriverOptions): HttpDriver {
  const url = endpointUrl(opts.target, API_PATHS[opts.api]);
  const mod = url.protocol === 'https:' ? https : http;
  const agent = new mod.Agent({ keepAlive: true, maxSockets: Number.POSITIVE_INFINITY });
  const timeoutMs = opts.timeoutMs ?? 600_000;

  function send(req: PlanRequest, signal?: AbortSignal): Promise<SendResult> {
    const payload = Buffer.from(JSON.stringify(buildBody(req, opts)));
    const headers: Record<string, string | number> = {
      'content-type': 'application/json',
      accept: 'text/event-stream, application/json',
      'content-length': payload.length,
      ...opts.headers,
    };
    if (req.routingKey !== undefined) headers['x-routing-key'] = req.routingKey;

    return new Promise<SendResult>((resolve) => {
      const sentAt = performance.now();
      const result: SendResult = { status: 0, ok: false, sentAt, endAt: sentAt };
      let settled = false;
      const finish = (error?: string) => {
        if (settled) return;
        settled = true;
        clearTimeout(timer);
        signal?.removeEventListener('abort', onAbort);
        result.endAt = performance.now();
        if (error !== undefined) {
          result.ok = false;
          result.error = error;
        }
        resolve(result);
      };
      const apply = (f: ChunkFacts) => {
        if (f.promptTokens !== undefined) result.promptTokens = f.promptTokens;
        if (f.cachedTokens !== undefined) result.cachedTokens = f.cachedTokens;
        if (f.outputTokens !== undefined) result.outputTokens = f.outputTokens;
        if (f.rank !== undefined && result.rank === undefined) result.rank = f.rank;
        if (f.content && result.firstContentAt === undefined) {
          result.firstContentAt = performance.now();
        }
      };

      const r = mod.request(url, { method: 'POST', agent, headers }, (res) => {
        result.status = res.statusCode ?? 0;
        const rank = rankFromHeaders(res.headers);
        if (rank !== undefined) result.rank = rank;
        res.setEncoding('utf8');
        const isSse = String(res.headers['content-type'] ?? '').includes('text/event-stream');
        let buf = '';
        let streamError: string | undefined;
        let sawDone = false;
        const handleEvent = (block: string) => {
          const data = block
            .split(/\r?\n/)
            .filter((l) => l.startsWith('data:'))
            .map((l) => l.slice(5).replace(/^ /, ''))
            .join('\n');
          if (data === '') return;
          if (data.trim() === '[DONE]') {
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
          const f = parseChunk(obj);
          if (f.error !== undefined) streamError ??= f.error;
          apply(f);
        };
        res.on('data', (chunk: string) => {
          buf += chunk;
          if (!isSse) return;
          for (;;) {
            const m = /\r?\n\r?\n/.exec(buf);
            if (!m) break;
            handleEvent(buf.slice(0, m.index));
            buf = buf.slice(m.index + m[0].length);
          }
        });
        res.on('error', (e) => finish(`response from ${url.href} broke off: ${e.message}`));
        res.on('aborted', () => finish(`response from ${url.href} was aborted mid-stream`));
        res.on('end', () => {
          const ok2xx = result.status >= 200 && result.status < 300;
          if (isSse) {
            if (buf.trim() !== '') handleEvent(buf);
            if (!ok2xx) return finish(`HTTP ${result.status} from ${url.href}`);
            if (streamError !== undefined) return finish(streamError);
            if (!sawDone && result.firstContentAt === undefined) {
              return finish(`stream from ${url.href} ended without content`);
            }
            result.ok = true;
            return finish();
          }
          // Whole-body response: an error, or a server that ignored `stream: true`. In the
          // latter case content arrives with the body, so TTFT equals the e2e latency.
          let obj: unknown;
          try {
            obj = buf === '' ? undefined : JSON.parse(buf);
          } catch {
            obj = undefined;
          }
          const f = parseChunk(obj);
          if (!ok2xx) {
            const msg = f.error ?? (buf.trim().slice(0, 200) || res.statusMessage || '');
            return finish(`HTTP ${result.status} from ${url.href}: ${msg}`);
          }
          if (f.error !== undefined) return finish(f.error);
          apply(f);
          result.ok = true;
          finish();
        });
      });
      const onAbort = () => {
        r.destroy();
        finish('aborted');
      };
      const timer = setTimeout(() => {
        r.destroy();
        finish(`timed out after ${timeoutMs} ms waiting for ${url.href}`);
      }, timeoutMs);
      r.on('error', (e: NodeJS.ErrnoException) => {
        finish(`cannot reach ${url.href}: ${e.code ?? e.message}`);
      });
      if (signal?.aborted) return onAbort();
      signal?.addEventListener('abort', onAbort, { once: true });
      r.end(payload);
    });
  }

  return {
    url: url.href,
    send,
    close: () => agent.destroy(),
  };
}

/** GETs a JSON document from the target; undefined when it is absent or not JSON. */
export async function getJson(
  target: string,
  path: string,
  timeoutMs = 5000,
): Promise<{ status: number; body: unknown } | { status: 0; error: string }> {
  const url = endpointUrl(target, path);
  const mod = url.protocol === 'https:' ? https : http;
  return new Promise((resolve) => {
    const r = mod.get(url, { timeout: timeoutMs }, (res) => {
      let buf = '';
      res.setEncoding('utf8');
      res.on('data', (c: string) => {
        buf += c;
      });
      res.on('end', () => {
        let body: unknown;
        try {
          body = JSON.parse(buf);
        } catch {
          body = undefined;
        }
        resolve({ status: res.statusCode ?? 0, body });
      });
      res.on('error', (e) => resolve({ status: 0, error: e.message }));
    });
    r.on('timeout', () => r.destroy(new Error(`timed out after ${timeoutMs} ms`)));
    r.on('error', (e: NodeJS.ErrnoException) =>
      resolve({ status: 0, error: `cannot reach ${url.href}: ${e.code ?? e.message}` }),
    );
  });
}
