// The WebAssembly JSON string decoder (json-string.ts) against its reference: JSON.parse of the
// string, then its UTF-8 bytes (a lone surrogate encodes as U+FFFD). Strings are built from the
// characters and escapes that make decoding hard, written as JSON.stringify writes them or
// with every non-ASCII unit escaped (as Python's json.dumps does), short ones and ones longer
// than the module's window with an escape placed across the window's edge.
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import {
  type ByteSink,
  countJsonString,
  decodeJsonString,
  jsonStringWasmActive,
  WINDOW,
} from '../src/json-string.ts';

const PIECES = [
  'a',
  'word ',
  'é',
  '€',
  '😀',
  '\n',
  '\t',
  '"',
  '\\',
  '/',
  '\b',
  '\f',
  '\r',
  '\u0000',
  '\u001f',
  '\u007f',
  '\ud83d',
  '\ude00',
  '\\u',
  'x'.repeat(40),
];

function asciiJson(s: string, upper: boolean): string {
  return JSON.stringify(s).replace(/[\u0080-\uffff]/g, (c) => {
    const h = c.charCodeAt(0).toString(16).padStart(4, '0');
    return `\\u${upper ? h.toUpperCase() : h}`;
  });
}

type Style = 'plain' | 'ascii-lower' | 'ascii-upper';
const STYLES = fc.constantFrom<Style>('plain', 'ascii-lower', 'ascii-upper');

function quoted(content: string, style: Style): Buffer {
  return Buffer.from(
    style === 'plain' ? JSON.stringify(content) : asciiJson(content, style === 'ascii-upper'),
  );
}

/** A growable sink, as the scanner's output buffer is. */
class Sink implements ByteSink {
  buf = Buffer.alloc(0);
  length = 0;
  copy(b: Buffer, s: number, e: number): void {
    const next = Buffer.alloc(this.length + (e - s));
    this.buf.copy(next, 0, 0, this.length);
    b.copy(next, this.length, s, e);
    this.buf = next;
    this.length += e - s;
  }
  bytes(): Buffer {
    return this.buf.subarray(0, this.length);
  }
}

/** Decodes b's contents with a budget and checks everything the scanner relies on. */
function check(b: Buffer, want: number): void {
  const e = b.length - 1;
  const expected = Buffer.from(JSON.parse(b.toString('utf8')) as string);
  expect(countJsonString(b, 1, e)).toBe(expected.length);
  const whole = new Sink();
  expect(decodeJsonString(b, 1, e, whole)).toBe(e);
  expect(whole.bytes().equals(expected)).toBe(true);
  // With a budget: a prefix of the bytes, at least the budget (or all), at most 16 past it,
  // and the rest's count makes up the whole.
  const part = new Sink();
  const stop = decodeJsonString(b, 1, e, part, want);
  expect(stop).toBeGreaterThan(0);
  const got = part.bytes();
  expect(expected.subarray(0, got.length).equals(got)).toBe(true);
  expect(got.length).toBeGreaterThanOrEqual(Math.min(want, expected.length));
  expect(got.length).toBeLessThanOrEqual(want + 16);
  expect(got.length + countJsonString(b, stop, e)).toBe(expected.length);
}

const content = fc
  .array(fc.constantFrom(...PIECES), { minLength: 0, maxLength: 120 })
  .map((p) => p.join(''));

describe('the WebAssembly JSON string decoder', () => {
  it('runs here (Node 20 has WebAssembly SIMD)', () => {
    expect(jsonStringWasmActive()).toBe(true);
  });

  it("gives JSON.parse's bytes and length, whole and up to any budget", () => {
    fc.assert(
      fc.property(content, STYLES, fc.integer({ min: 0, max: 600 }), (c, style, want) => {
        check(quoted(c, style), want);
      }),
      { numRuns: 1500 },
    );
  });

  it("is exact across the window's edge, wherever an escape falls on it", () => {
    // A filler that puts position `edge` of the contents (1 + its offset in the body) just
    // before, on, or after the window's edge, then the hard pieces.
    fc.assert(
      fc.property(
        fc.integer({ min: -14, max: 14 }),
        content,
        STYLES,
        fc.integer({ min: 0, max: 3 * WINDOW }),
        (shift, tail, style, want) => {
          const b = quoted('y'.repeat(WINDOW + shift) + tail + 'z'.repeat(WINDOW), style);
          check(b, want);
        },
      ),
      { numRuns: 150 },
    );
  });

  it('declines what JSON.parse refuses and leaves the sink as it was', () => {
    const sink = new Sink();
    sink.copy(Buffer.from('kept'), 0, 4);
    for (const raw of ['"a\u0001b"', '"a\\xb"', '"\\u12g4"', '"tail\\u12"', '"end\\"']) {
      const b = Buffer.from(raw);
      expect(() => JSON.parse(raw)).toThrow();
      expect(decodeJsonString(b, 1, b.length - 1, sink)).toBe(-1);
      expect(sink.bytes().toString()).toBe('kept');
    }
    // A count reads escapes only: an unknown escape or bad hex is left to the JavaScript count.
    for (const raw of ['"a\\xb"', '"\\u12g4"', '"tail\\u12"']) {
      const b = Buffer.from(raw);
      expect(countJsonString(b, 1, b.length - 1)).toBe(-1);
    }
  });

  it('declines plain bytes that are not UTF-8 (decoding would replace them)', () => {
    const b = Buffer.concat([Buffer.from('"ab\\n'), Buffer.from([0xc3, 0x28]), Buffer.from('"')]);
    const sink = new Sink();
    expect(decodeJsonString(b, 1, b.length - 1, sink)).toBe(-1);
    expect(sink.length).toBe(0);
    // Counted as raw bytes, as the JavaScript count does.
    expect(countJsonString(b, 1, b.length - 1)).toBe(5);
  });
});
