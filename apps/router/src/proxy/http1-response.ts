// An incremental HTTP/1.1 response parser for the worker hop (upstream.ts): bytes go in as the
// socket delivers them, split anywhere; the final response's status and headers, its body bytes
// (content-length, chunked or until close) and its end come out. Interim 1xx responses are
// skipped, chunk extensions and trailers are read and dropped. It is strict where a mistake
// would mis-frame the next response on a reused connection (conflicting lengths, a bad chunk
// size, bytes past the end) and throws a ResponseParseError naming what is wrong.

export class ResponseParseError extends Error {
  readonly code = 'ERR_KVROUTE_BAD_RESPONSE';
}

export interface ResponseSink {
  /** The final response's status and headers as a flat [name, value, ...] list (latin1). */
  onHead(status: number, rawHeaders: string[]): void;
  /** A piece of the (de-chunked) body; a view into the socket's buffer, valid during the call. */
  onBody(chunk: Buffer): void;
  /** The response is complete. */
  onEnd(): void;
}

/** Status line and headers together: more is not a response a worker sends. */
export const MAX_HEAD_BYTES = 64 * 1024;
/** A chunk-size line (with extensions) or the trailer section. */
const MAX_LINE_BYTES = 16 * 1024;

enum State {
  Head,
  Fixed,
  UntilClose,
  ChunkSize,
  ChunkData,
  ChunkDataEnd,
  Trailers,
  Done,
}

const TOKEN = /^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/;
const CRLFCRLF = Buffer.from('\r\n\r\n');

export class ResponseParser {
  private state = State.Head;
  /** Head bytes seen so far (a head split across reads). */
  private head: Buffer | undefined;
  private remaining = 0;
  /** A chunk-size or trailer line in progress. */
  private line = '';
  private trailerBytes = 0;
  private sawCr = false;
  /** Whether the connection may carry another request once this response is done. */
  keepAlive = true;
  /** The worker's Keep-Alive: timeout=N hint in ms, if it sent one. */
  keepAliveHintMs: number | undefined;
  status = 0;

  constructor(private readonly sink: ResponseSink) {}

  get done(): boolean {
    return this.state === State.Done;
  }

  /** Whether any byte of a response arrived. */
  get started(): boolean {
    return this.state !== State.Head || this.head !== undefined;
  }

  /** Feeds bytes; throws ResponseParseError on a malformed response. */
  execute(data: Buffer): void {
    let at = 0;
    while (at < data.length) {
      switch (this.state) {
        case State.Head:
          at = this.readHead(data, at);
          break;
        case State.Fixed: {
          const n = Math.min(this.remaining, data.length - at);
          this.remaining -= n;
          const piece = data.subarray(at, at + n);
          at += n;
          if (this.remaining === 0) this.state = State.Done;
          this.sink.onBody(piece);
          if (this.state === State.Done) this.sink.onEnd();
          break;
        }
        case State.UntilClose:
          this.sink.onBody(at === 0 ? data : data.subarray(at));
          at = data.length;
          break;
        case State.ChunkSize:
          at = this.readChunkSize(data, at);
          break;
        case State.ChunkData: {
          const n = Math.min(this.remaining, data.length - at);
          this.remaining -= n;
          const piece = data.subarray(at, at + n);
          at += n;
          if (this.remaining === 0) this.state = State.ChunkDataEnd;
          this.sink.onBody(piece);
          break;
        }
        case State.ChunkDataEnd:
          at = this.readChunkEnd(data, at);
          break;
        case State.Trailers:
          at = this.readTrailers(data, at);
          break;
        case State.Done:
          // One request at a time per connection: anything more is not a response to it.
          this.keepAlive = false;
          throw new ResponseParseError('the worker sent bytes after the end of its response');
      }
    }
  }

  /**
   * The connection closed: true when that completes the response (a body read until close),
   * false when the response was cut short.
   */
  finishAtClose(): boolean {
    if (this.state === State.UntilClose) {
      this.state = State.Done;
      this.sink.onEnd();
      return true;
    }
    return this.state === State.Done;
  }

  private readHead(data: Buffer, at: number): number {
    let buf: Buffer;
    let searchFrom: number;
    if (this.head === undefined) {
      buf = at === 0 ? data : data.subarray(at);
      searchFrom = 0;
    } else {
      searchFrom = Math.max(0, this.head.length - 3);
      buf = Buffer.concat([this.head, data.subarray(at)]);
    }
    const end = buf.indexOf(CRLFCRLF, searchFrom);
    if (end === -1) {
      if (buf.length > MAX_HEAD_BYTES) {
        throw new ResponseParseError(`response headers longer than ${MAX_HEAD_BYTES} bytes`);
      }
      // Copied: the socket may reuse its buffer.
      this.head = this.head === undefined ? Buffer.from(buf) : buf;
      return data.length;
    }
    if (end > MAX_HEAD_BYTES) {
      throw new ResponseParseError(`response headers longer than ${MAX_HEAD_BYTES} bytes`);
    }
    const consumedOfData = end + 4 - (buf.length - (data.length - at));
    this.head = undefined;
    this.parseHead(buf.toString('latin1', 0, end));
    return at + consumedOfData;
  }

  private parseHead(text: string): void {
    const lines = text.split('\r\n');
    const statusLine = lines[0]!;
    const m = /^HTTP\/1\.([01]) ([1-9]\d\d)(?: .*)?$/.exec(statusLine);
    if (!m) {
      throw new ResponseParseError(
        `not an HTTP/1.x status line: ${JSON.stringify(statusLine.slice(0, 60))}`,
      );
    }
    const http10 = m[1] === '0';
    const status = Number(m[2]);
    const raw: string[] = [];
    let contentLength: number | undefined;
    let chunked = false;
    let transferEncoding = false;
    let connClose = http10;
    let hintMs: number | undefined;
    for (let i = 1; i < lines.length; i++) {
      const line = lines[i]!;
      const colon = line.indexOf(':');
      if (colon <= 0) {
        throw new ResponseParseError(
          `a response header line without a name: ${JSON.stringify(line.slice(0, 60))}`,
        );
      }
      const name = line.slice(0, colon);
      if (!TOKEN.test(name)) {
        throw new ResponseParseError(
          `a response header name that is not a token: ${JSON.stringify(name.slice(0, 60))}`,
        );
      }
      const value = line.slice(colon + 1).trim();
      raw.push(name, value);
      const lower = name.length >= 10 && name.length <= 17 ? name.toLowerCase() : '';
      if (lower === 'content-length') {
        if (!/^\d{1,15}$/.test(value)) {
          throw new ResponseParseError(`a content-length that is not a number: "${value}"`);
        }
        const n = Number(value);
        if (contentLength !== undefined && contentLength !== n) {
          throw new ResponseParseError('two different content-length headers');
        }
        contentLength = n;
      } else if (lower === 'transfer-encoding') {
        transferEncoding = true;
        // Chunked must be the last coding; any other framing is read until close.
        chunked = /(?:^|,)\s*chunked\s*$/i.test(value);
      } else if (lower === 'connection') {
        const v = value.toLowerCase();
        if (/(?:^|,)\s*close\s*(?:,|$)/.test(v)) connClose = true;
        else if (http10 && /(?:^|,)\s*keep-alive\s*(?:,|$)/.test(v)) connClose = false;
      } else if (lower === 'keep-alive') {
        const t = /timeout\s*=\s*(\d+)/i.exec(value);
        if (t) hintMs = Number(t[1]) * 1000;
      }
    }
    if (status < 200) {
      // 100 Continue, 103 Early Hints: an interim answer; the final one follows.
      if (status === 101) throw new ResponseParseError('the worker switched protocols (101)');
      return;
    }
    this.status = status;
    this.keepAliveHintMs = hintMs;
    if (connClose) this.keepAlive = false;
    if (status === 204 || status === 304) {
      this.state = State.Done;
    } else if (transferEncoding) {
      // A message with both is a smuggling vector: framed by chunked, never reused.
      if (contentLength !== undefined) this.keepAlive = false;
      if (chunked) this.state = State.ChunkSize;
      else {
        this.state = State.UntilClose;
        this.keepAlive = false;
      }
    } else if (contentLength !== undefined) {
      this.remaining = contentLength;
      this.state = contentLength === 0 ? State.Done : State.Fixed;
    } else {
      this.state = State.UntilClose;
      this.keepAlive = false;
    }
    this.sink.onHead(status, raw);
    if (this.state === State.Done) this.sink.onEnd();
  }

  /** Reads up to the end of a line into this.line: where it stopped, and whether the line ended. */
  private takeLine(data: Buffer, at: number, what: string): { next: number; complete: boolean } {
    const nl = data.indexOf(10, at);
    const end = nl === -1 ? data.length : nl;
    if (this.line.length + (end - at) > MAX_LINE_BYTES) {
      throw new ResponseParseError(`${what} longer than ${MAX_LINE_BYTES} bytes`);
    }
    this.line += data.toString('latin1', at, end);
    return nl === -1 ? { next: data.length, complete: false } : { next: nl + 1, complete: true };
  }

  private readChunkSize(data: Buffer, at: number): number {
    const { next, complete } = this.takeLine(data, at, 'a chunk-size line');
    if (!complete) return next;
    let line = this.line;
    this.line = '';
    if (line.endsWith('\r')) line = line.slice(0, -1);
    const semi = line.indexOf(';');
    const sizeText = (semi === -1 ? line : line.slice(0, semi)).trimEnd();
    if (!/^[0-9a-fA-F]{1,12}$/.test(sizeText)) {
      throw new ResponseParseError(`a bad chunk size: ${JSON.stringify(line.slice(0, 60))}`);
    }
    const size = Number.parseInt(sizeText, 16);
    if (size === 0) {
      this.state = State.Trailers;
      this.trailerBytes = 0;
    } else {
      this.remaining = size;
      this.state = State.ChunkData;
    }
    return next;
  }

  private readChunkEnd(data: Buffer, at: number): number {
    let i = at;
    if (!this.sawCr && data[i] === 13) {
      this.sawCr = true;
      i++;
      if (i >= data.length) return i;
    }
    if (data[i] !== 10) throw new ResponseParseError('a chunk not followed by CRLF');
    this.sawCr = false;
    this.state = State.ChunkSize;
    return i + 1;
  }

  private readTrailers(data: Buffer, at: number): number {
    const before = this.line.length;
    const { next, complete } = this.takeLine(data, at, 'a trailer line');
    this.trailerBytes += this.line.length - before;
    if (this.trailerBytes > MAX_HEAD_BYTES) {
      throw new ResponseParseError(`response trailers longer than ${MAX_HEAD_BYTES} bytes`);
    }
    if (!complete) return next;
    const line = this.line;
    this.line = '';
    if (line === '' || line === '\r') {
      this.state = State.Done;
      this.sink.onEnd();
    }
    return next;
  }
}
