// Forwarding one attempt to one rank, and piping the answer back. The body is the client's
// raw bytes unless the router must change it (routed_dp_rank), so fields the router does not
// read pass through untouched. Streams are piped chunk by chunk: each upstream chunk is
// written as it arrives, the upstream connection is paused while the client's socket is full,
// and a client that goes away aborts the upstream request, which closes that connection,
// which is how SGLang and the mock worker learn to abort the generation.
import type { IncomingHttpHeaders, ServerResponse } from 'node:http';
import {
  describeError,
  errorCode,
  RANK_HEADER,
  type ReportedUsage,
  ROUTING_KEY_HEADERS,
  UsageScanner,
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

export type AttemptFailure =
  /** Could not connect (refused, unreachable, connect timeout): the worker is gone. */
  | { kind: 'connect'; detail: string }
  /** The connection broke before response headers (reset, closed). */
  | { kind: 'socket'; detail: string }
  /** Headers arrived with a 5xx status; its body was discarded so the request can be retried. */
  | { kind: 'status'; status: number; detail: string };

const CONNECT_CODES = new Set([
  'ECONNREFUSED',
  'EHOSTUNREACH',
  'ENETUNREACH',
  'ENOTFOUND',
  'EAI_AGAIN',
  'UND_ERR_CONNECT_TIMEOUT',
]);

export function classifyNetworkError(err: unknown): AttemptFailure {
  const code = errorCode(err);
  const detail = describeError(err);
  return code && CONNECT_CODES.has(code) ? { kind: 'connect', detail } : { kind: 'socket', detail };
}

export interface ForwardOptions {
  agent: Agent;
  /** The worker's origin (`http://host:port`) and the request path including any base path. */
  origin: string;
  path: string;
  headers: Record<string, string>;
  body: Buffer;
  /** The client's response, written to only if `decide` says so. */
  res: ServerResponse;
  /** Added to the response headers (x-kvroute-rank, x-kvroute-reason). */
  extraHeaders: Record<string, string>;
  /**
   * Called synchronously when the worker's status arrives, before any byte goes to the client:
   * 'pipe' starts the response, 'discard' drains the worker's body (a 5xx to be retried).
   */
  decide(status: number): 'pipe' | 'discard';
  /** The first body byte arrived from the worker (TTFT for streams). */
  onFirstByte(): void;
}

export type ForwardResult =
  /** Nothing reached the client: connect/socket failure, or a 5xx that was discarded. */
  | { kind: 'failed'; failure: AttemptFailure }
  /** Aborted (timeout, client gone) before the worker answered; the caller knows why. */
  | { kind: 'aborted' }
  /** The response was piped to the client until `end`. */
  | { kind: 'piped'; status: number; end: PipeEnd; usage?: ReportedUsage; error?: unknown };

export type PipeEnd =
  /** The worker's body ended and the client got all of it. */
  | 'complete'
  /** The client went away before the end; the upstream request was aborted. */
  | 'client-closed'
  /** The upstream failed mid-way (worker died, timeout); the client's connection was cut. */
  | 'upstream-error';

/**
 * One forwarding attempt as an undici dispatch handler: the worker's chunks are written to the
 * client's socket from onData, and returning false there (client socket full) pauses the
 * worker's connection until 'drain'. No intermediate stream, promise per chunk or AbortSignal:
 * this is the router's hot path.
 */
export class ForwardCall {
  readonly done: Promise<ForwardResult>;
  private settle!: (r: ForwardResult) => void;
  private settled = false;
  private abortUpstream: ((err?: Error) => void) | undefined;
  private pendingAbort: Error | undefined;
  private mode: 'waiting' | 'pipe' | 'discard' = 'waiting';
  private status = 0;
  private first = true;
  private scanner: UsageScanner | undefined;
  private resumeUpstream: (() => void) | undefined;
  /** Listening for 'drain': only once a write found the client's socket full. */
  private awaitingDrain = false;
  private clientClosed = false;
  private abortRequested = false;

  constructor(private readonly o: ForwardOptions) {
    this.done = new Promise((resolve) => {
      this.settle = resolve;
    });
  }

  start(): Promise<ForwardResult> {
    this.o.agent.dispatch(
      {
        origin: this.o.origin,
        path: this.o.path,
        method: 'POST',
        headers: this.o.headers,
        body: this.o.body,
        // The router's own timer (--request-timeout-ms) bounds the whole request.
        headersTimeout: 0,
        bodyTimeout: 0,
      },
      this,
    );
    return this.done;
  }

  /** Aborts the upstream request (timeout, client gone); safe before the connection exists. */
  abort(reason: Error): void {
    this.abortRequested = true;
    if (this.abortUpstream) this.abortUpstream(reason);
    else this.pendingAbort ??= reason;
  }

  private finish(r: ForwardResult): void {
    if (this.settled) return;
    this.settled = true;
    const res = this.o.res;
    res.off('close', this.onClientClose);
    if (this.awaitingDrain) res.off('drain', this.onDrain);
    this.settle(r);
  }

  private readonly onDrain = (): void => {
    this.resumeUpstream?.();
  };

  private readonly onClientClose = (): void => {
    // 'close' before 'finish' means the client's connection went away mid-response.
    if (!this.o.res.writableFinished) {
      this.clientClosed = true;
      // Settle first: undici may report the abort through onError synchronously.
      this.finish({ kind: 'piped', status: this.status, end: 'client-closed' });
      this.abort(new Error('client closed the connection'));
    }
  };

  onConnect(abort: (err?: Error) => void): void {
    if (this.pendingAbort) abort(this.pendingAbort);
    else this.abortUpstream = abort;
  }

  onHeaders(statusCode: number, rawHeaders: Buffer[], resume: () => void): boolean {
    this.status = statusCode;
    this.mode = this.o.decide(statusCode);
    if (this.mode === 'discard') return true;
    // A flat [name, value, ...] list, which writeHead takes as is: no per-response object with
    // dynamic keys. A repeated header stays one line per value, as before; the router's own
    // headers (extraHeaders) replace any the worker sent under the same names.
    const extra = this.o.extraHeaders;
    const headers: string[] = [];
    let contentType = '';
    for (let i = 0; i + 1 < rawHeaders.length; i += 2) {
      const name = rawHeaders[i]!.toString('latin1').toLowerCase();
      if (name !== 'content-length' && HOP_BY_HOP.has(name)) continue;
      if (Object.hasOwn(extra, name)) continue;
      const value = rawHeaders[i + 1]!.toString('latin1');
      if (name === 'content-type') contentType = value;
      headers.push(name, value);
    }
    for (const name in extra) headers.push(name, extra[name]!);
    this.scanner = new UsageScanner(contentType.startsWith('text/event-stream'));
    this.resumeUpstream = resume;
    const res = this.o.res;
    res.on('close', this.onClientClose);
    // Headers leave with the first body chunk (one write instead of two per response).
    res.writeHead(statusCode, headers);
    return true;
  }

  onData(chunk: Buffer): boolean {
    if (this.mode !== 'pipe' || this.settled) return true;
    if (this.first) {
      this.first = false;
      this.o.onFirstByte();
    }
    this.scanner!.push(chunk);
    const res = this.o.res;
    if (res.write(chunk)) return true;
    // Most responses never fill the socket: the 'drain' listener is added on the first
    // full write only (and kept until the call finishes), not on and off for every request.
    if (!this.awaitingDrain) {
      this.awaitingDrain = true;
      res.on('drain', this.onDrain);
    }
    return false;
  }

  onComplete(): void {
    if (this.mode === 'discard') {
      this.finish({
        kind: 'failed',
        failure: { kind: 'status', status: this.status, detail: `worker answered ${this.status}` },
      });
      return;
    }
    if (this.settled) return;
    this.o.res.end();
    this.finish({
      kind: 'piped',
      status: this.status,
      end: 'complete',
      usage: this.scanner!.result(),
    });
  }

  onError(err: Error): void {
    if (this.settled) return;
    if (this.mode === 'pipe') {
      // Status and part of the body are out: all we can do is cut the connection, so the
      // client sees an incomplete response rather than a clean end.
      if (!this.clientClosed) this.o.res.destroy();
      this.finish({ kind: 'piped', status: this.status, end: 'upstream-error', error: err });
      return;
    }
    if (this.abortRequested) {
      this.finish({ kind: 'aborted' });
      return;
    }
    this.finish({ kind: 'failed', failure: classifyNetworkError(err) });
  }
}
