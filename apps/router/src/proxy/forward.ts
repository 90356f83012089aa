// Forwarding one attempt to one rank, and answering the client from it. The body is the
// client's raw bytes unless the router must change it (routed_dp_rank), so fields the router
// does not read pass through untouched.
//
// Nothing reaches the client before the worker has shown it can answer: the status and headers
// are held until the first body byte, a non-streaming body is held until it is complete and
// parses as JSON of the expected shape, and a stream is held until its first complete event.
// Until then any failure (reset, close, garbage, timeout) leaves the client untouched, so the
// caller can retry on another rank. Once a stream has sent bytes, it is written event by event
// (only validated events go out), the upstream connection is paused while the client's socket
// is full, and a failure ends the stream with an explicit error event in OpenAI's shape, never
// a silent cut. A client that goes away aborts the upstream request, which closes that
// connection, which is how SGLang and the mock worker learn to abort the generation.
import { isUtf8 } from 'node:buffer';
import type { IncomingHttpHeaders, ServerResponse } from 'node:http';
import { performance } from 'node:perf_hooks';
import { StringDecoder } from 'node:string_decoder';
import {
  carriesTokens,
  describeError,
  isConnectError,
  openAIErrorBody,
  RANK_HEADER,
  type ReportedUsage,
  type RequestKind,
  ROUTING_KEY_HEADERS,
  reportedUsage,
  SSE_DONE,
  SseDataFacts,
  SseTemplate,
  sseEvent,
  usageFromObject,
} from '@kvroute/protocol';
import type { Agent } from 'undici';

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

// Routing hints (the headers @kvroute/protocol reads) are consumed here; the worker gets the
// router's decision instead.
const CONSUMED = new Set<string>([RANK_HEADER, ...ROUTING_KEY_HEADERS]);

// What a client sends about itself or its credentials is not the workers' business unless the
// operator says so: a worker with its own --api-key gets the router's key instead.
const CLIENT_IDENTITY = new Set([
  'authorization',
  'cookie',
  'x-forwarded-for',
  'forwarded',
  'x-real-ip',
]);

export interface OutboundHeaderPolicy {
  /** Pass the client's Authorization and Cookie headers through (off by default). */
  forwardClientAuth: boolean;
  /** Sent to workers as `Authorization: Bearer <key>` (workers started with --api-key). */
  workerApiKey?: string;
}

/**
 * Whether a client header stays behind: its identity (X-Forwarded-For and the like are never
 * trusted) and its credentials, unless the operator forwards Authorization and Cookie.
 */
export function isClientIdentityHeader(name: string, forwardClientAuth: boolean): boolean {
  if (!CLIENT_IDENTITY.has(name)) return false;
  return !forwardClientAuth || (name !== 'authorization' && name !== 'cookie');
}

export function upstreamRequestHeaders(
  incoming: IncomingHttpHeaders,
  bodyLength: number,
  dpRank: number | undefined,
  policy: OutboundHeaderPolicy = { forwardClientAuth: false },
  clientAddress?: string,
): Record<string, string> {
  const out: Record<string, string> = {};
  for (const name in incoming) {
    if (HOP_BY_HOP.has(name) || CONSUMED.has(name)) continue;
    // A client-supplied X-Forwarded-For is never trusted: the router states the peer itself.
    if (isClientIdentityHeader(name, policy.forwardClientAuth)) continue;
    const v = incoming[name];
    if (v === undefined) continue;
    out[name] = Array.isArray(v) ? v.join(', ') : v;
  }
  out['content-type'] = 'application/json';
  out['content-length'] = String(bodyLength);
  if (dpRank !== undefined) out['x-data-parallel-rank'] = String(dpRank);
  if (clientAddress) out['x-forwarded-for'] = clientAddress;
  if (policy.workerApiKey !== undefined) out.authorization = `Bearer ${policy.workerApiKey}`;
  return out;
}

export type AttemptFailure =
  /** Could not connect (refused, unreachable, connect timeout): the worker is gone. */
  | { kind: 'connect'; detail: string }
  /** The connection broke (reset, closed) before the client was sent anything. */
  | { kind: 'socket'; detail: string }
  /** Headers arrived with a 5xx status; its body was discarded so the request can be retried. */
  | { kind: 'status'; status: number; detail: string }
  /** No first body byte within the first-byte timeout, or no chunk within the idle timeout. */
  | { kind: 'timeout'; detail: string }
  /** A 2xx whose body is not JSON of the expected shape, or a stream that is not SSE. */
  | { kind: 'bad-body'; detail: string }
  /** The worker was ejected or marked down while this attempt waited; nothing was sent. */
  | { kind: 'worker-down'; detail: string };

export function classifyNetworkError(err: unknown): AttemptFailure {
  const detail = describeError(err);
  return isConnectError(err) ? { kind: 'connect', detail } : { kind: 'socket', detail };
}

export interface ForwardOptions {
  agent: Agent;
  /** The worker's origin (`http://host:port`) and the request path including any base path. */
  origin: string;
  path: string;
  headers: Record<string, string>;
  body: Buffer;
  /** The request kind: what a complete 2xx body must look like. */
  kind: RequestKind;
  /** The client's response, written to only once the worker's answer is known to be good. */
  res: ServerResponse;
  /** Added to the response headers (x-kvroute-rank, x-kvroute-reason). */
  extraHeaders: Record<string, string>;
  /** From dispatch to the first body byte; 0 = no limit. */
  firstByteTimeoutMs: number;
  /** Between body chunks once the first arrived, while the client keeps reading; 0 = no limit. */
  idleTimeoutMs: number;
  /** A non-streaming body past this size is passed through unchecked instead of held. */
  maxHeldBytes: number;
  /**
   * Called synchronously when the worker's status arrives, before any byte goes to the client:
   * 'pipe' keeps the answer, 'discard' drains the worker's body (a 5xx to be retried).
   */
  decide(status: number): 'pipe' | 'discard';
  /** The first body byte arrived from the worker. */
  onFirstByte(): void;
  /**
   * Streams: the first event that carried generated output arrived: the time to first token.
   * Not the first byte, which an engine may spend on events before any output (a chat role
   * chunk, a Responses `response.created`).
   */
  onFirstToken?: () => void;
  /** Streams: seconds between successive events carrying generated tokens. */
  interToken?: { observe(seconds: number): void };
  /**
   * Responses API: the answer's response id (a body's `id`, a stream's `response.id` in its
   * first events), so that follow-ups naming it reach this worker.
   */
  onResponseId?: (id: string) => void;
}

/** How many of a Responses stream's first events are read for its id (response.created is the first). */
const RESPONSE_ID_EVENTS = 3;

/** One reader's facts, reused: an event is read synchronously, start to end. */
const FACTS = new SseDataFacts();

export type ForwardResult =
  /** Nothing reached the client: connect/socket failure, timeout, bad body, discarded 5xx. */
  | { kind: 'failed'; failure: AttemptFailure }
  /** Aborted by the caller (request deadline, client gone) before the client was sent anything. */
  | { kind: 'aborted' }
  /** The client was answered from this attempt, until `end`. */
  | {
      kind: 'piped';
      status: number;
      end: PipeEnd;
      usage?: ReportedUsage;
      /** What went wrong for end 'upstream-error'. */
      failure?: AttemptFailure;
    };

export type PipeEnd =
  /** The worker's body ended and the client got all of it. */
  | 'complete'
  /** The client went away before the end; the upstream request was aborted. */
  | 'client-closed'
  /** The upstream failed after the client had bytes: the stream ended with an error event. */
  | 'upstream-error';

/** An SSE error event in OpenAI's shape, then the terminator clients wait for. */
export function sseErrorEvent(message: string, code: string): string {
  const body = openAIErrorBody(502, clientSafe(message), { code });
  return sseEvent(body) + SSE_DONE;
}

/**
 * A failure detail fit for a client: worker URLs and addresses (which may carry credentials or
 * reveal the internal network) become `<worker>`.
 */
export function clientSafe(detail: string): string {
  return detail
    .replace(/\b[a-z][a-z0-9+.-]*:\/\/[^\s)'"]+/gi, '<worker>')
    .replace(/\[?[0-9a-f]*:[0-9a-f:.]*\]?:\d+|\b\d{1,3}(?:\.\d{1,3}){3}(?::\d+)?/gi, '<worker>');
}

/** Why a complete 2xx body is not an answer of `kind`, or undefined when it is. */
export function checkAnswer(kind: RequestKind, value: unknown): string | undefined {
  if (typeof value !== 'object' || value === null) return 'the body is not a JSON object';
  if (kind === 'generate') {
    // SGLang answers a batch with an array, one request with {text | output_ids, meta_info}.
    if (Array.isArray(value)) return undefined;
    const o = value as Record<string, unknown>;
    return typeof o.text === 'string' || Array.isArray(o.output_ids)
      ? undefined
      : "the body has neither 'text' nor 'output_ids'";
  }
  if (kind === 'rerank') {
    // SGLang answers a list of {score, index}; vLLM's Jina/Cohere form an object with results.
    if (Array.isArray(value)) return undefined;
    return Array.isArray((value as Record<string, unknown>).results)
      ? undefined
      : "the body is neither a list nor has a 'results' array";
  }
  if (Array.isArray(value)) return 'the body is a JSON array';
  if (kind === 'embedding') {
    return Array.isArray((value as Record<string, unknown>).data)
      ? undefined
      : "the body has no 'data' array";
  }
  if (kind === 'responses') {
    return Array.isArray((value as Record<string, unknown>).output)
      ? undefined
      : "the body has no 'output' array";
  }
  return Array.isArray((value as Record<string, unknown>).choices)
    ? undefined
    : "the body has no 'choices' array";
}

const EMPTY = Buffer.alloc(0);
const EVENT_END = Buffer.from('\n\n');

/**
 * One forwarding attempt as an undici dispatch handler: no intermediate stream, promise per
 * chunk or AbortSignal, since this is the router's hot path. Returning false from onData
 * (client socket full) pauses the worker's connection until 'drain'.
 */
export class ForwardCall {
  readonly done: Promise<ForwardResult>;
  private settle!: (r: ForwardResult) => void;
  private settled = false;
  private abortUpstream: ((err?: Error) => void) | undefined;
  private pendingAbort: Error | undefined;
  /** waiting: no headers yet; discard: a 5xx being drained; hold: nothing sent yet; sent. */
  private mode: 'waiting' | 'discard' | 'hold' | 'sent' = 'waiting';
  private status = 0;
  private headers: string[] = [];
  private sse = false;
  /** SSE: the stream's event template (sse-data.ts). */
  private template: SseTemplate | undefined;
  /** Responses streams: events read for the response id so far. */
  private idEvents = 0;
  private first = true;
  /** Held body chunks (non-streaming), or undefined once passed through unchecked. */
  private held: Buffer[] | undefined;
  private heldBytes = 0;
  private passThrough = false;
  /** SSE: text after the last complete event, and the decoder for split UTF-8 sequences. */
  private decoder: StringDecoder | undefined;
  private partial = '';
  /** SSE: the last chunk ended with a newline, so the decoder holds no bytes of a character. */
  private decoderEmpty = true;
  private usage: ReportedUsage | undefined;
  private resumeUpstream: (() => void) | undefined;
  /** Listening for 'drain': only once a write found the client's socket full. */
  private awaitingDrain = false;
  private paused = false;
  private clientClosed = false;
  /** Set when the caller aborted (deadline, client gone): the outcome is theirs to report. */
  private externalAbort = false;
  /** Set when this attempt gave up on the worker itself (timeout, garbage, worker down). */
  private ownFailure: AttemptFailure | undefined;
  private timer: NodeJS.Timeout | undefined;
  private lastChunkAt = 0;
  /** performance.now() of the last event that carried tokens (0: none yet). */
  private lastTokenAt = 0;
  /** Stream events that carried generated output (about one per token). */
  tokenEvents = 0;
  /** This call's place in its worker's Outstanding registry (-1: not registered). */
  registryIndex = -1;

  constructor(private readonly o: ForwardOptions) {
    this.done = new Promise((resolve) => {
      this.settle = resolve;
    });
  }

  /** Whether any byte of this attempt's answer reached the client. */
  get sentToClient(): boolean {
    return this.mode === 'sent';
  }

  start(): Promise<ForwardResult> {
    // One timer per attempt: armed for the first byte, then re-armed from onTimer for the idle
    // bound as long as chunks keep coming (onData only notes the time, it never touches it).
    if (this.o.firstByteTimeoutMs > 0) {
      this.timer = setTimeout(this.onTimer, this.o.firstByteTimeoutMs);
    }
    this.o.agent.dispatch(
      {
        origin: this.o.origin,
        path: this.o.path,
        method: 'POST',
        headers: this.o.headers,
        body: this.o.body,
        // This call's own timers (first byte, idle) and the route's deadline govern instead.
        headersTimeout: 0,
        bodyTimeout: 0,
      },
      this,
    );
    return this.done;
  }

  /** Aborts the upstream request for the caller (deadline, client gone). */
  abort(reason: Error): void {
    this.externalAbort = true;
    this.cancelUpstream(reason);
  }

  /**
   * The client's connection closed before its answer was finished (the route's one 'close'
   * listener calls this): before any byte went out the attempt is aborted; mid-answer it ends
   * as client-closed and the upstream request is aborted, which is how the worker learns to
   * stop generating.
   */
  clientGone(): void {
    if (this.settled) return;
    if (this.mode !== 'sent') {
      this.abort(new Error('client closed the connection'));
      return;
    }
    this.clientClosed = true;
    // Settle first: undici may report the abort through onError synchronously.
    this.finish({ kind: 'piped', status: this.status, end: 'client-closed' });
    this.abort(new Error('client closed the connection'));
  }

  /**
   * Gives up on the worker (it was ejected or marked down): a failure the caller may retry if
   * nothing was sent, an error event if a stream had started.
   */
  fail(failure: AttemptFailure): void {
    if (this.settled) return;
    this.ownFailure ??= failure;
    this.cancelUpstream(new Error(failure.detail));
  }

  private cancelUpstream(reason: Error): void {
    if (this.abortUpstream) this.abortUpstream(reason);
    else this.pendingAbort ??= reason;
  }

  private readonly onTimer = (): void => {
    this.timer = undefined;
    if (this.settled) return;
    if (this.first) {
      this.fail({
        kind: 'timeout',
        detail: `no response byte within ${this.o.firstByteTimeoutMs} ms (first-byte timeout)`,
      });
      return;
    }
    if (this.o.idleTimeoutMs <= 0) return;
    // A paused upstream is the client's doing (it stopped reading), not the worker's.
    const idleFor = Date.now() - this.lastChunkAt;
    if (this.paused) {
      // Checked again a whole idle period on (not every millisecond while the client is away).
      this.timer = setTimeout(this.onTimer, this.o.idleTimeoutMs);
      return;
    }
    if (idleFor < this.o.idleTimeoutMs) {
      this.timer = setTimeout(this.onTimer, this.o.idleTimeoutMs - idleFor);
      return;
    }
    this.fail({
      kind: 'timeout',
      detail: `no response chunk for ${this.o.idleTimeoutMs} ms (idle timeout)`,
    });
  };

  private finish(r: ForwardResult): void {
    if (this.settled) return;
    this.settled = true;
    if (this.timer) clearTimeout(this.timer);
    if (this.awaitingDrain) this.o.res.off('drain', this.onDrain);
    this.settle(r);
  }

  private readonly onDrain = (): void => {
    this.paused = false;
    this.resumeUpstream?.();
  };

  onConnect(abort: (err?: Error) => void): void {
    if (this.pendingAbort) abort(this.pendingAbort);
    else this.abortUpstream = abort;
  }

  onHeaders(statusCode: number, rawHeaders: Buffer[], resume: () => void): boolean {
    this.status = statusCode;
    if (this.o.decide(statusCode) === 'discard') {
      this.mode = 'discard';
      return true;
    }
    // A flat [name, value, ...] list, which writeHead takes as is. A repeated header stays one
    // line per value; the router's own headers (extraHeaders) replace any the worker sent under
    // the same names; content-length is the router's to set on the body it sends.
    const extra = this.o.extraHeaders;
    const headers = this.headers;
    let contentType = '';
    for (let i = 0; i + 1 < rawHeaders.length; i += 2) {
      const name = rawHeaders[i]!.toString('latin1').toLowerCase();
      if (HOP_BY_HOP.has(name)) continue;
      if (Object.hasOwn(extra, name)) continue;
      const value = rawHeaders[i + 1]!.toString('latin1');
      if (name === 'content-type') contentType = value;
      headers.push(name, value);
    }
    for (const name in extra) headers.push(name, extra[name]!);
    // Only a 2xx is checked; a worker's 4xx/5xx body is passed on as the clearest answer.
    this.sse = contentType.startsWith('text/event-stream') && statusCode < 300;
    if (this.sse) {
      this.decoder = new StringDecoder('utf8');
      this.template = new SseTemplate();
    } else this.held = [];
    this.resumeUpstream = resume;
    this.mode = 'hold';
    return true;
  }

  onData(chunk: Buffer): boolean {
    if (this.settled || this.mode === 'discard' || this.ownFailure) return true;
    this.lastChunkAt = Date.now();
    if (this.first) {
      this.first = false;
      this.o.onFirstByte();
      // Without a first-byte bound no timer runs yet; the idle bound starts here.
      if (this.timer === undefined && this.o.idleTimeoutMs > 0) {
        this.timer = setTimeout(this.onTimer, this.o.idleTimeoutMs);
      }
    }
    if (this.sse) return this.onSseData(chunk);
    if (this.passThrough) return this.write(chunk);
    this.held!.push(chunk);
    this.heldBytes += chunk.length;
    if (this.heldBytes > this.o.maxHeldBytes) {
      // Too large to hold: pass the rest through unchecked rather than buffer without bound.
      this.passThrough = true;
      this.sendHead(undefined);
      const held = this.held!;
      this.held = undefined;
      let ok = true;
      for (const c of held) ok = this.o.res.write(c) && ok;
      return ok || this.waitForDrain();
    }
    return true;
  }

  /** SSE: validated complete events go out; the first bad line ends the attempt. */
  private onSseData(chunk: Buffer): boolean {
    // A chunk of whole events, as engines write them, goes out as the bytes it came in; else
    // the text of its complete events does (re-encoded).
    const fresh = this.partial === '' && this.decoderEmpty;
    this.decoderEmpty = chunk[chunk.length - 1] === 0x0a;
    const text = this.partial + this.decoder!.write(chunk);
    let start = 0;
    let lastEventEnd = 0;
    for (let nl = text.indexOf('\n'); nl !== -1; nl = text.indexOf('\n', start)) {
      const end = nl > start && text.charCodeAt(nl - 1) === 13 ? nl - 1 : nl;
      if (end === start) {
        lastEventEnd = nl + 1;
      } else {
        const bad = this.checkLine(text, start, end);
        if (bad) {
          this.badStream(text.slice(0, lastEventEnd), bad);
          return true;
        }
      }
      start = nl + 1;
    }
    this.partial = text.slice(lastEventEnd);
    if (this.partial.length > this.o.maxHeldBytes) {
      this.badStream('', `an SSE event longer than ${this.o.maxHeldBytes} bytes`);
      return true;
    }
    if (lastEventEnd === 0) return true;
    if (this.mode === 'hold') this.sendHead(undefined);
    // The chunk itself when its text is all of the events: it began no event of its own
    // earlier text, left nothing over, and decoded without replacing a byte.
    if (fresh && this.decoderEmpty && lastEventEnd === text.length && isUtf8(chunk)) {
      return this.write(chunk);
    }
    return this.write(text.slice(0, lastEventEnd));
  }

  /** Why an SSE line is not one a worker would send, or undefined when it is fine. */
  private checkLine(text: string, start: number, end: number): string | undefined {
    const c = text.charCodeAt(start);
    if (c === 58 /* : comment */) return undefined;
    if (c === 100 /* d */ && text.startsWith('data:', start)) {
      if (this.o.onResponseId !== undefined && this.idEvents < RESPONSE_ID_EVENTS) {
        this.readResponseId(text.slice(start + 5, end));
      }
      // An event's JSON is read without building it: against the stream's last event where
      // only the token text differs, else in one pass (protocol's sse-data.ts). What that
      // leaves undecided (and [DONE], and garbage) goes through JSON.parse, whose verdict
      // stands. (A payload whose counts it read names "prompt_tokens" as such, so /generate's
      // filter below is already met: it reads no member named with an escape.)
      let tokens: boolean;
      let usage: ReportedUsage | undefined;
      if (this.template!.read(text, start + 5, end, FACTS)) {
        tokens = FACTS.tokens;
        usage = reportedUsage(FACTS.promptTokens, FACTS.cachedTokens, FACTS.outputTokens);
      } else {
        const payload = text.slice(start + 5, end).trim();
        if (payload === '[DONE]') return undefined;
        let value: unknown;
        try {
          value = JSON.parse(payload);
        } catch {
          return `an SSE data line that is not JSON: ${JSON.stringify(payload.slice(0, 60))}`;
        }
        tokens = carriesTokens(value);
        if (this.o.kind !== 'generate' || payload.includes('"prompt_tokens"')) {
          usage = usageFromObject(value);
        }
      }
      if (tokens) {
        if (this.tokenEvents === 0) this.o.onFirstToken?.();
        this.tokenEvents++;
        const itl = this.o.interToken;
        if (itl !== undefined) {
          const now = performance.now();
          if (this.lastTokenAt !== 0) itl.observe((now - this.lastTokenAt) / 1e3);
          this.lastTokenAt = now;
        }
      }
      if (usage) this.usage = usage;
      return undefined;
    }
    if (
      text.startsWith('event:', start) ||
      text.startsWith('id:', start) ||
      text.startsWith('retry:', start)
    ) {
      return undefined;
    }
    return `a line that is not SSE: ${JSON.stringify(text.slice(start, Math.min(end, start + 60)))}`;
  }

  /** A Responses stream event's `response.id`, passed on once (its own JSON.parse: rare). */
  private readResponseId(payload: string): void {
    this.idEvents++;
    let value: unknown;
    try {
      value = JSON.parse(payload);
    } catch {
      return; // The check below refuses it.
    }
    const id = (value as { response?: { id?: unknown } } | null)?.response?.id;
    if (typeof id === 'string' && id !== '') {
      this.idEvents = RESPONSE_ID_EVENTS;
      this.o.onResponseId!(id);
    }
  }

  /** A stream went bad: retry if the client has nothing yet, else end it with an error event. */
  private badStream(goodText: string, detail: string): void {
    if (this.mode === 'sent' && goodText.length > 0) this.o.res.write(goodText);
    this.fail({ kind: 'bad-body', detail: `the worker sent ${detail}` });
  }

  private sendHead(contentLength: number | undefined): void {
    const headers = this.headers;
    if (contentLength !== undefined) headers.push('content-length', String(contentLength));
    this.mode = 'sent';
    // Headers leave with the first body write (one write instead of two per response).
    this.o.res.writeHead(this.status, headers);
  }

  private write(data: Buffer | string): boolean {
    if (this.o.res.write(data)) return true;
    return this.waitForDrain();
  }

  private waitForDrain(): false {
    this.paused = true;
    // Most responses never fill the socket: the 'drain' listener is added on the first full
    // write only (and kept until the call finishes), not on and off for every request.
    if (!this.awaitingDrain) {
      this.awaitingDrain = true;
      this.o.res.on('drain', this.onDrain);
    }
    return false;
  }

  onComplete(): void {
    if (this.settled) return;
    if (this.ownFailure) {
      this.onError(new Error(this.ownFailure.detail));
      return;
    }
    if (this.mode === 'discard') {
      this.finish({
        kind: 'failed',
        failure: { kind: 'status', status: this.status, detail: `worker answered ${this.status}` },
      });
      return;
    }
    const res = this.o.res;
    if (this.sse) {
      this.partial += this.decoder!.end();
      // A last event without its blank line is still an event.
      if (this.partial.trim().length > 0) {
        this.onSseData(EVENT_END);
        const f = this.ownFailure as AttemptFailure | undefined;
        if (f) {
          this.onError(new Error(f.detail));
          return;
        }
      }
      if (this.mode === 'hold') {
        this.finish({
          kind: 'failed',
          failure: { kind: 'bad-body', detail: 'the worker ended the stream without an event' },
        });
        return;
      }
      res.end();
      this.finish({ kind: 'piped', status: this.status, end: 'complete', usage: this.usage });
      return;
    }
    if (this.passThrough) {
      res.end();
      this.finish({ kind: 'piped', status: this.status, end: 'complete' });
      return;
    }
    const held = this.held!;
    const body = held.length === 1 ? held[0]! : held.length === 0 ? EMPTY : Buffer.concat(held);
    let usage: ReportedUsage | undefined;
    if (this.status < 300) {
      let value: unknown;
      let bad: string | undefined;
      try {
        value = JSON.parse(body.toString('utf8'));
        bad = checkAnswer(this.o.kind, value);
      } catch {
        bad =
          body.length === 0
            ? 'an empty body'
            : `a body that is not JSON: ${JSON.stringify(body.subarray(0, 60).toString('utf8'))}`;
      }
      if (bad) {
        this.finish({
          kind: 'failed',
          failure: { kind: 'bad-body', detail: `the worker answered ${this.status} with ${bad}` },
        });
        return;
      }
      usage = usageFromObject(value);
      const id = this.o.onResponseId && (value as { id?: unknown }).id;
      if (typeof id === 'string' && id !== '') this.o.onResponseId!(id);
    }
    this.sendHead(body.length);
    res.end(body);
    this.finish({ kind: 'piped', status: this.status, end: 'complete', usage });
  }

  onError(err: Error): void {
    if (this.settled) return;
    const failure = this.ownFailure;
    if (this.mode === 'sent') {
      // The client has part of the answer: end it in a way it cannot mistake for success.
      const f = failure ?? { kind: 'socket' as const, detail: describeError(err) };
      if (!this.clientClosed) {
        const res = this.o.res;
        if (this.sse && !res.writableEnded) {
          res.end(sseErrorEvent(`The worker failed mid-stream: ${f.detail}`, 'upstream_error'));
        } else {
          res.destroy();
        }
      }
      this.finish({ kind: 'piped', status: this.status, end: 'upstream-error', failure: f });
      return;
    }
    if (failure) {
      this.finish({ kind: 'failed', failure });
      return;
    }
    if (this.externalAbort) {
      this.finish({ kind: 'aborted' });
      return;
    }
    this.finish({ kind: 'failed', failure: classifyNetworkError(err) });
  }
}
