// Writes a stream's SSE frames without ignoring backpressure. Output tokens come on the
// engine's clock whatever the client reads, so a full socket cannot pause generation; instead,
// while the socket is full, new tokens are held and go out as one frame on 'drain' (as
// SGLang's tokenizer manager merges the outputs a slow reader has not taken yet). A slow
// reader then costs one pending string, not one buffered frame per token.

/** The part of http.ServerResponse the writer uses. */
export interface SseSink {
  readonly destroyed: boolean;
  write(chunk: string): boolean;
  once(event: 'drain', listener: () => void): unknown;
  end(): unknown;
}

export class SseWriter {
  private held = '';
  private blocked = false;

  /** `frame(delta)` renders the SSE text for new output `delta` (see streamDelta). */
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
