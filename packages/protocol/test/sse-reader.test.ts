import { describe, expect, it } from 'vitest';
import { SSE_DONE, SseReader, sseEvent } from '../src/sse.ts';

function read(text: string, cuts: number[] = [], byBytes = true): string[] {
  const out: string[] = [];
  const r = new SseReader((data) => out.push(data));
  const buf = Buffer.from(text);
  let prev = 0;
  for (const c of [...cuts, buf.length]) {
    r.push(byBytes ? buf.subarray(prev, c) : buf.subarray(prev, c).toString('utf8'));
    prev = c;
  }
  r.end();
  return out;
}

describe('SseReader', () => {
  const stream = `${sseEvent({ t: 'é' })}: keep-alive comment\n\n${sseEvent({ n: 2 })}${SSE_DONE}`;

  it('yields each event once, whatever the chunk boundaries (a UTF-8 sequence may straddle)', () => {
    const want = ['{"t":"é"}', '{"n":2}', '[DONE]'];
    const len = Buffer.byteLength(stream);
    for (const cuts of [
      [],
      [1],
      [12, 13],
      [14],
      Array.from({ length: len - 1 }, (_, i) => i + 1),
    ]) {
      expect(read(stream, cuts)).toEqual(want);
    }
  });

  it('accepts CRLF and CR line ends, joins multi-line data, reports the event name', () => {
    const events: [string, string | undefined][] = [];
    const r = new SseReader((data, event) => events.push([data, event]));
    r.push('event: error\r\ndata: a\r\ndata: b\r\n\r\ndata:c\r\r');
    r.end();
    expect(events).toEqual([
      ['a\nb', 'error'],
      ['c', undefined],
    ]);
  });

  it('dispatches a last event the server ended without its blank line', () => {
    expect(read('data: {"a":1}\n\ndata: {"usage":1}')).toEqual(['{"a":1}', '{"usage":1}']);
    expect(read('data: {"a":1}\n\ndata: {"usage":1}\n')).toEqual(['{"a":1}', '{"usage":1}']);
    expect(read('data: {"a":1}\n\n')).toEqual(['{"a":1}']);
  });

  it('skips events without data, and stops at an oversized event instead of buffering it', () => {
    expect(read('event: ping\n\nid: 3\n\n')).toEqual([]);
    const out: string[] = [];
    let overflowed = 0;
    const r = new SseReader((d) => out.push(d), {
      maxEventChars: 64,
      onOverflow: () => overflowed++,
    });
    r.push('data: ok\n\n');
    r.push(`data: ${'x'.repeat(100)}`);
    r.push('\n\ndata: later\n\n');
    r.end();
    expect(out).toEqual(['ok']);
    expect(overflowed).toBe(1);
    expect(r.reading).toBe(false);
  });
});
