import { EventEmitter } from 'node:events';
import { describe, expect, it } from 'vitest';
import { SseWriter } from '../src/sse.ts';

/** A socket stand-in whose write() reports "full" while `full` is set, as a slow client's would. */
class FakeSink extends EventEmitter {
  destroyed = false;
  full = false;
  ended = false;
  writes: string[] = [];
  write(chunk: string): boolean {
    this.writes.push(chunk);
    return !this.full;
  }
  end(): void {
    this.ended = true;
  }
}

const frame = (delta: string) => `data: ${JSON.stringify(delta)}\n\n`;

describe('SseWriter', () => {
  it('writes one frame per token while the client keeps up', () => {
    const sink = new FakeSink();
    const sse = new SseWriter(sink, frame);
    sse.send('data: start\n\n');
    for (const t of ['a ', 'b ', 'c ']) sse.token(t);
    sse.end('data: [DONE]\n\n');
    expect(sink.writes).toEqual([
      'data: start\n\n',
      frame('a '),
      frame('b '),
      frame('c '),
      'data: [DONE]\n\n',
    ]);
    expect(sink.ended).toBe(true);
  });

  it('holds tokens while the socket is full and sends them as one frame on drain', () => {
    const sink = new FakeSink();
    const sse = new SseWriter(sink, frame);
    sse.token('a ');
    sink.full = true;
    sse.token('b '); // this write reports a full socket
    sse.token('c ');
    sse.token('d ');
    expect(sink.writes).toEqual([frame('a '), frame('b ')]);
    sink.full = false;
    sink.emit('drain');
    expect(sink.writes).toEqual([frame('a '), frame('b '), frame('c d ')]);
    sse.token('e ');
    expect(sink.writes.at(-1)).toBe(frame('e '));
    expect(sink.listenerCount('drain')).toBe(0);
  });

  it('at the end, held tokens go out ahead of the closing frames', () => {
    const sink = new FakeSink();
    const sse = new SseWriter(sink, frame);
    sink.full = true;
    sse.token('a ');
    sse.token('b ');
    sse.token('c ');
    sse.end('data: [DONE]\n\n');
    expect(sink.writes).toEqual([frame('a '), `${frame('b c ')}data: [DONE]\n\n`]);
    expect(sink.ended).toBe(true);
    // A late drain after the end sends nothing more.
    sink.emit('drain');
    expect(sink.writes).toHaveLength(2);
  });

  it('writes nothing to a client that is gone', () => {
    const sink = new FakeSink();
    sink.destroyed = true;
    const sse = new SseWriter(sink, frame);
    sse.token('a ');
    sse.send('data: x\n\n');
    expect(sink.writes).toEqual([]);
  });
});
