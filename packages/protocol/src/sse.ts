// Server-sent events, both directions. Reading is eventsource-parser's (a maintained parser
// of the WHATWG event-stream grammar: CR, LF and CRLF line ends, multi-line data, comments,
// a leading BOM); this module adds what every kvroute reader needs around it: bytes in
// (a UTF-8 sequence may straddle two chunks), and a last event that the server ended without
// its blank line still counts, since workers that close right after their final `data:` line
// exist and the usage they report sits in exactly that line. Writing is one frame format and
// one backpressure rule, used by the mock worker and by the router's error events.
import { StringDecoder } from 'node:string_decoder';
import { createParser, type EventSourceParser } from 'eventsource-parser';

/** The terminator OpenAI-compatible streams (and SGLang's /generate) end with. */
export const SSE_DONE_DATA = '[DONE]';
export const SSE_DONE = `data: ${SSE_DONE_DATA}\n\n`;

/** One event whose data is `value` as JSON. JSON text holds no raw newline, so one line suffices. */
export function sseEvent(value: unknown): string {
  return `data: ${JSON.stringify(value)}\n\n`;
}

export interface SseReaderOptions {
  /**
   * An event (or unterminated line) longer than this many characters, from a runaway or
   * hostile stream, stops the reader instead of growing its buffer without bound; later
   * input is ignored and `onOverflow` is told once. Default 16 Mi characters.
   */
  maxEventChars?: number;
  onOverflow?: (maxEventChars: number) => void;
}

const DEFAULT_MAX_EVENT_CHARS = 16 * 1024 * 1024;

/**
 * Incremental SSE reader: push the response body's chunks as they arrive, then `end()`.
 * `onData(data, event)` runs once per event with its data lines joined by "\n" (events
 * without data are skipped, as EventSource does).
 */
export class SseReader {
  private readonly decoder = new StringDecoder('utf8');
  private readonly parser: EventSourceParser;
  private stopped = false;

  constructor(
    private readonly onData: (data: string, event: string | undefined) => void,
    private readonly opts: SseReaderOptions = {},
  ) {
    const max = opts.maxEventChars ?? DEFAULT_MAX_EVENT_CHARS;
    this.parser = createParser({
      maxBufferSize: max,
      onEvent: (msg) => this.onData(msg.data, msg.event),
      onError: () => {
        this.stopped = true;
        this.opts.onOverflow?.(max);
      },
    });
  }

  /** False once the reader stopped (overflow or end): what is pushed then is ignored. */
  get reading(): boolean {
    return !this.stopped;
  }

  push(chunk: Buffer | string): void {
    if (this.stopped) return;
    this.feed(typeof chunk === 'string' ? chunk : this.decoder.write(chunk));
  }

  /** The body ended: an event the server left without its blank line is dispatched now. */
  end(): void {
    if (this.stopped) return;
    const rest = this.decoder.end();
    this.feed(rest);
    // A blank line ends a pending event; with nothing pending it dispatches nothing.
    this.feed('\n\n');
    this.stopped = true;
  }

  private feed(text: string): void {
    if (text !== '' && !this.stopped) this.parser.feed(text);
  }
}

/** The part of http.ServerResponse the writer uses. */
export interface SseSink {
  readonly destroyed: boolean;
  write(chunk: string): boolean;
  once(event: 'drain', listener: () => void): unknown;
  end(): unknown;
}

/**
 * Writes a stream's SSE frames without ignoring backpressure. Output tokens come on the
 * engine's clock whatever the client reads, so a full socket cannot pause generation; instead,
 * while the socket is full, new tokens are held and go out as one frame on 'drain' (as
 * SGLang's tokenizer manager merges the outputs a slow reader has not taken yet). A slow
 * reader then costs one pending string, not one buffered frame per token.
 */
export class SseWriter {
  private held = '';
  private blocked = false;

  /** `frame(delta)` renders the SSE text for new output `delta` (one or more sseEvent()s). */
  constructor(
    private readonly sink: SseSink,
    private readonly frame: (delta: string) => string,
  ) {}

  /** Sends one output token's text now, or holds it while the client's socket is full. */
  token(delta: string): void {
    if (this.blocked) this.held += delta;
    else this.send(this.frame(delta));
  }

  /** Sends the held text and `closing` (finish, usage, [DONE]), then ends the response. */
  end(closing: string): void {
    const held = this.held ? this.frame(this.held) : '';
    this.held = '';
    this.send(held + closing);
    this.sink.end();
  }

  /** Writes raw SSE text (the opening frame); nothing once the client is gone. */
  send(text: string): void {
    if (!text || this.sink.destroyed) return;
    if (!this.sink.write(text) && !this.blocked) {
      this.blocked = true;
      this.sink.once('drain', this.onDrain);
    }
  }

  private readonly onDrain = (): void => {
    this.blocked = false;
    if (!this.held) return;
    const delta = this.held;
    this.held = '';
    this.send(this.frame(delta));
  };
}
