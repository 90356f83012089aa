// The WebAssembly JSON string decoder (json-string.ts) against its reference: JSON.parse of the
// string, then its UTF-8 bytes (a lone surrogate encodes as U+FFFD). Strings are built from the
// characters and escapes that make decoding hard, written as JSON.stringify writes them or
// with every non-ASCII unit escaped (as Python's json.dumps does), short ones and ones longer
// than the module's window with an escape placed across the window's edge.
import { isUtf8 } from 'node:buffer';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import {
  type ByteSink,
  countJsonString,
  decodeJsonString,
  jsonStringWasmActive,
  WINDOW,
} from '../src/json-string.ts';
import { HARD_PIECES, jsonString, STYLES, type Style } from './helpers/json-text.ts';

function quoted(content: string, style: Style): Buffer {
  return Buffer.from(jsonString(content, style));
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
  .array(fc.constantFrom(...HARD_PIECES), { minLength: 0, maxLength: 120 })
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

  it('never answers where JSON.parse would refuse or differ, on arbitrary bytes', () => {
    // Bytes drawn mostly from the ones that matter (backslash, u, hex digits, escape letters,
    // controls, UTF-8 lead and continuation bytes), as a string's contents: whatever the
    // module decodes must be what JSON.parse gives, and whatever it counts, that length.
    const byte = fc.oneof(
      fc.constantFrom(0x5c, 0x75, 0x30, 0x39, 0x61, 0x66, 0x41, 0x46, 0x64, 0x38, 0x63),
      fc.constantFrom(0x6e, 0x74, 0x72, 0x62, 0x2f, 0x22, 0x00, 0x1f, 0x7f, 0x20),
      fc.constantFrom(0xc3, 0xa9, 0xe2, 0x82, 0xac, 0xf0, 0x9f, 0x98, 0x80, 0xed, 0xa0, 0xff),
      fc.integer({ min: 0, max: 255 }),
    );
    fc.assert(
      fc.property(
        fc.array(byte, { maxLength: 64 }),
        fc.integer({ min: 0, max: 80 }),
        (bytes, want) => {
          const b = Buffer.from([0x22, ...bytes, 0x22]);
          const e = b.length - 1;
          let expected: Buffer | undefined;
          try {
            expected = Buffer.from(JSON.parse(b.toString('utf8')) as string);
          } catch {
            expected = undefined;
          }
          const sink = new Sink();
          const stop = decodeJsonString(b, 1, e, sink);
          if (stop >= 0) {
            expect(expected).toBeDefined();
            expect(stop).toBe(e);
            expect(sink.bytes().equals(expected!)).toBe(true);
          } else {
            expect(sink.length).toBe(0);
          }
          const part = new Sink();
          const cut = decodeJsonString(b, 1, e, part, want);
          if (cut >= 0) {
            // A budgeted decode vouches for what it decoded (the rest is only counted, as the
            // JavaScript path leaves it): the raw bytes up to where it stopped parse to them.
            const raw = b.subarray(1, cut);
            if (isUtf8(raw)) {
              const prefix = Buffer.from(JSON.parse(`"${raw.toString('utf8')}"`) as string);
              expect(part.bytes().equals(prefix)).toBe(true);
            }
            if (expected !== undefined) {
              expect(expected.subarray(0, part.length).equals(part.bytes())).toBe(true);
            }
          }
          const n = countJsonString(b, 1, e);
          if (n >= 0 && expected !== undefined && isUtf8(b)) expect(n).toBe(expected.length);
        },
      ),
      { numRuns: 5000 },
    );
  });

  it('declines what JSON.parse refuses and leaves the sink as it was', () => {
    const sink = new Sink();
    sink.copy(Buffer.from('kept'), 0, 4);
    for (const raw of ['"a\u0001b"', '"a\\xb"', '"\\u12g4"', '"tail\\u12"', '"end\\"', '"a"b"']) {
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
