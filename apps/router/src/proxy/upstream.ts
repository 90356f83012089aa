// The proxy's client on the worker hop: keep-alive HTTP/1.1 over node:net, one request at a
// time per connection, driving the same dispatch-handler calls as undici's Agent.dispatch
// (onConnect with an abort function, onHeaders with a resume function, onData returning false
// to pause, onComplete, onError), so ForwardCall serves both. Profiled at 1 KB, undici was
// about a quarter of the router's CPU per request (its request/queue objects, header
// validation, the llhttp WebAssembly calls and a writev of head and body); this client writes
// one buffer (head and body) and parses the response head with one search and one split.
// Workers on https:// go to the fallback dispatcher (undici).
import { connect, type Socket } from 'node:net';
import { ResponseParseError, ResponseParser, type ResponseSink } from './http1-response.ts';

/** One proxied request on the worker hop. */
export interface UpstreamRequest {
  /** `http://host:port` (no path). */
  origin: string;
  path: string;
  method: string;
  headers: Record<string, string>;
  body: Buffer;
  /** For an undici fallback (0: off); this client has no timers of its own (ForwardCall's govern). */
  headersTimeout?: number;
  bodyTimeout?: number;
}

/** What a dispatch drives: the subset of undici's DispatchHandler the proxy implements. */
export interface UpstreamHandler {
  onConnect(abort: (err?: Error) => void): void;
  onHeaders(statusCode: number, rawHeaders: (Buffer | string)[], resume: () => void): boolean;
  onData(chunk: Buffer): boolean;
  onComplete(trailers: unknown): void;
  onError(err: Error): void;
}

export interface UpstreamDispatcher {
  dispatch(opts: UpstreamRequest, handler: UpstreamHandler): unknown;
}

export interface UpstreamPoolOptions {
  /** Idle connections close after this long, or the worker's Keep-Alive hint less 2 s (default 30 s). */
  keepAliveTimeoutMs?: number;
  /** A connection not established within this long fails as a connect error (default 10 s). */
  connectTimeoutMs?: number;
  /** Serves origins this client does not speak (https://). */
  fallback?: UpstreamDispatcher;
}

/** Like undici's: a worker's keep-alive hint is trusted up to this much before it expires. */
const KEEP_ALIVE_THRESHOLD_MS = 2_000;
/** Bodies up to this size go out in one buffer with the head (one write, one syscall). */
const COALESCE_BYTES = 64 * 1024;
const BAD_HEADER_VALUE = /[\r\n\0]/;

interface Target {
  host: string;
  port: number;
  hostHeader: string;
}

function codedError(message: string, code: string): Error {
  return Object.assign(new Error(message), { code });
}

class Connection implements ResponseSink {
  readonly socket: Socket;
  private handler: UpstreamHandler | undefined;
  private parser: ResponseParser | undefined;
  /** The response ended during the current read; completed once the read is processed. */
  private ended = false;
  private connectTimer: NodeJS.Timeout | undefined;
  private resumeFn: (() => void) | undefined;
  dead = false;
  idleSince = 0;
  keepAliveMs: number;

  constructor(
    private readonly pool: UpstreamPool,
    readonly origin: string,
    target: Target,
  ) {
    this.keepAliveMs = pool.keepAliveTimeoutMs;
    const socket = connect({ host: target.host, port: target.port });
    this.socket = socket;
    socket.setNoDelay(true);
    this.connectTimer = setTimeout(() => {
      socket.destroy(
        codedError(
          `could not connect within ${pool.connectTimeoutMs} ms`,
          'ERR_KVROUTE_CONNECT_TIMEOUT',
        ),
      );
    }, pool.connectTimeoutMs);
    socket.once('connect', () => {
      clearTimeout(this.connectTimer);
      this.connectTimer = undefined;
    });
    socket.on('data', (chunk: Buffer) => this.onSocketData(chunk));
    socket.on('error', (err: Error) => this.onSocketError(err));
    socket.on('close', () => this.onSocketClose());
  }

  request(req: UpstreamRequest, target: Target, handler: UpstreamHandler): void {
    this.handler = handler;
    this.parser = new ResponseParser(this);
    this.ended = false;
    this.resumeFn = () => {
      if (this.handler === handler) this.socket.resume();
    };
    handler.onConnect((err) => this.abort(handler, err));
    if (this.handler !== handler) return;
    let head = `${req.method} ${req.path} HTTP/1.1\r\nhost: ${target.hostHeader}\r\n`;
    const headers = req.headers;
    for (const name in headers) {
      const value = headers[name]!;
      if (BAD_HEADER_VALUE.test(value)) {
        this.fail(codedError(`header ${name} has a value with CR, LF or NUL`, 'ERR_INVALID_CHAR'));
        return;
      }
      head += `${name}: ${value}\r\n`;
    }
    head += '\r\n';
    const body = req.body;
    const headLen = Buffer.byteLength(head, 'latin1');
    if (body.length <= COALESCE_BYTES) {
      const out = Buffer.allocUnsafe(headLen + body.length);
      out.write(head, 0, headLen, 'latin1');
      body.copy(out, headLen);
      this.socket.write(out);
    } else {
      this.socket.cork();
      this.socket.write(head, 'latin1');
      this.socket.write(body);
      this.socket.uncork();
    }
  }

  // ResponseSink: the parser's events go to the current handler, if it is still listening.
  onHead(status: number, rawHeaders: string[]): void {
    this.handler?.onHeaders(status, rawHeaders, this.resumeFn!);
  }

  onBody(chunk: Buffer): void {
    const h = this.handler;
    if (h !== undefined && h.onData(chunk) === false && this.handler === h) this.socket.pause();
  }

  onEnd(): void {
    // A handler that gave up mid-read (abort, bad stream) is not completed as well.
    if (this.handler !== undefined) this.ended = true;
  }

  private onSocketData(chunk: Buffer): void {
    const parser = this.parser;
    if (this.handler === undefined || parser === undefined) {
      // Bytes on an idle connection answer nothing that was asked.
      this.destroy();
      return;
    }
    try {
      parser.execute(chunk);
    } catch (err) {
      // After the answer was complete, trailing bytes only spoil the connection. A throw from
      // the handler ends its request as undici's does, rather than the process.
      if (this.ended && err instanceof ResponseParseError) this.destroy();
      else this.fail(err instanceof Error ? err : new Error(String(err)));
    }
    if (this.ended && this.handler !== undefined) this.complete();
  }

  private complete(): void {
    const h = this.handler!;
    const parser = this.parser!;
    this.handler = undefined;
    this.parser = undefined;
    this.ended = false;
    // A response that came before the request was all written leaves the connection unusable.
    if (parser.keepAlive && !this.dead && this.socket.writableLength === 0) {
      if (parser.keepAliveHintMs !== undefined) {
        this.keepAliveMs = Math.min(
          this.pool.keepAliveTimeoutMs,
          Math.max(0, parser.keepAliveHintMs - KEEP_ALIVE_THRESHOLD_MS),
        );
      }
      if (this.socket.isPaused()) this.socket.resume();
      this.pool.release(this);
    } else {
      this.destroy();
    }
    h.onComplete([]);
  }

  /** Ends the current request with `err` and closes the connection. */
  private fail(err: Error): void {
    const h = this.handler;
    this.handler = undefined;
    this.parser = undefined;
    this.ended = false;
    this.destroy();
    h?.onError(err);
  }

  private abort(handler: UpstreamHandler, err: Error | undefined): void {
    if (this.handler !== handler) return;
    this.fail(err ?? new Error('the request was aborted'));
  }

  private onSocketError(err: Error): void {
    this.dead = true;
    if (this.handler) this.fail(err);
  }

  private onSocketClose(): void {
    this.dead = true;
    if (this.connectTimer) clearTimeout(this.connectTimer);
    this.pool.forget(this);
    if (this.handler === undefined) return;
    const parser = this.parser!;
    if (parser.finishAtClose()) {
      this.complete();
      return;
    }
    this.fail(
      codedError(
        parser.started
          ? 'the worker closed the connection before its response was complete'
          : 'the worker closed the connection without answering',
        'ERR_KVROUTE_UPSTREAM_CLOSED',
      ),
    );
  }

  destroy(reason?: Error): void {
    this.dead = true;
    this.pool.forget(this);
    if (reason && this.handler) {
      this.fail(reason);
      return;
    }
    this.socket.destroy();
  }
}

/** Keep-alive connections per worker origin, reused most-recently-idle first. */
export class UpstreamPool implements UpstreamDispatcher {
  readonly keepAliveTimeoutMs: number;
  readonly connectTimeoutMs: number;
  private readonly fallback: UpstreamDispatcher | undefined;
  private readonly targets = new Map<string, Target | null>();
  private readonly idle = new Map<string, Connection[]>();
  private readonly all = new Set<Connection>();
  private sweeper: NodeJS.Timeout | undefined;
  private closed = false;

  constructor(opts: UpstreamPoolOptions = {}) {
    this.keepAliveTimeoutMs = opts.keepAliveTimeoutMs ?? 30_000;
    this.connectTimeoutMs = opts.connectTimeoutMs ?? 10_000;
    this.fallback = opts.fallback;
  }

  /** Connections open now, idle or busy (for tests and diagnostics). */
  get size(): number {
    return this.all.size;
  }

  dispatch(req: UpstreamRequest, handler: UpstreamHandler): boolean {
    let target = this.targets.get(req.origin);
    if (target === undefined) {
      target = parseOrigin(req.origin);
      this.targets.set(req.origin, target);
    }
    if (target === null || this.closed) {
      if (target === null && this.fallback) {
        this.fallback.dispatch(req, handler);
        return true;
      }
      handler.onConnect(() => {});
      handler.onError(
        codedError(
          this.closed ? 'the router is shutting down' : `cannot connect to ${req.origin}`,
          this.closed ? 'ERR_KVROUTE_CLOSED' : 'ERR_INVALID_URL',
        ),
      );
      return true;
    }
    const list = this.idle.get(req.origin);
    let conn: Connection | undefined;
    if (list !== undefined && list.length > 0) {
      const now = Date.now();
      while (list.length > 0) {
        const c = list.pop()!;
        if (!c.dead && now - c.idleSince < c.keepAliveMs) {
          conn = c;
          break;
        }
        c.destroy();
      }
    }
    if (conn === undefined) {
      conn = new Connection(this, req.origin, target);
      this.all.add(conn);
    }
    conn.request(req, target, handler);
    return true;
  }

  release(conn: Connection): void {
    if (this.closed || conn.keepAliveMs <= 0) {
      conn.destroy();
      return;
    }
    conn.idleSince = Date.now();
    let list = this.idle.get(conn.origin);
    if (list === undefined) {
      list = [];
      this.idle.set(conn.origin, list);
    }
    list.push(conn);
    // Expired idle connections are closed by a sweep once a second, not a timer each.
    if (this.sweeper === undefined) {
      this.sweeper = setInterval(() => this.sweep(), 1_000);
      this.sweeper.unref();
    }
  }

  forget(conn: Connection): void {
    if (!this.all.delete(conn)) return;
    const list = this.idle.get(conn.origin);
    if (list === undefined) return;
    const i = list.indexOf(conn);
    if (i !== -1) list.splice(i, 1);
  }

  private sweep(): void {
    const now = Date.now();
    let idle = 0;
    for (const list of this.idle.values()) {
      for (const c of [...list]) {
        if (c.dead || now - c.idleSince >= c.keepAliveMs) c.destroy();
      }
      idle += list.length;
    }
    if (idle === 0 && this.sweeper) {
      clearInterval(this.sweeper);
      this.sweeper = undefined;
    }
  }

  /** Closes every connection; requests in progress fail. */
  async destroy(): Promise<void> {
    this.closed = true;
    if (this.sweeper) clearInterval(this.sweeper);
    this.sweeper = undefined;
    for (const c of [...this.all])
      c.destroy(codedError('the router is shutting down', 'ERR_KVROUTE_CLOSED'));
    this.idle.clear();
  }
}

function parseOrigin(origin: string): Target | null {
  let u: URL;
  try {
    u = new URL(origin);
  } catch {
    return null;
  }
  if (u.protocol !== 'http:') return null;
  const host = u.hostname.startsWith('[') ? u.hostname.slice(1, -1) : u.hostname;
  return { host, port: u.port ? Number(u.port) : 80, hostHeader: u.host };
}
