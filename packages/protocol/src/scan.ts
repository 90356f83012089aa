// The router's request reader: what routing needs, read straight from the body's bytes,
// without JSON.parse of the whole body and without materialising the whole prompt.
//
// Why: a proxy forwards the bytes it received, so the only thing it must understand is the
// routing input (the prompt's leading tokens, the hints, the output-token limit). Parsing a
// 136 KB body costs ~14 us/KB once a string passes V8's 128 KiB large-object threshold, and
// tokenizing the whole prompt is wasted when the method reads only its first few thousand
// tokens. So the body is walked once at the byte level (strings skipped with memchr, so the
// walk costs little more than the structure), the small fields routing reads are parsed from
// their slices, and the prompt is decoded only up to `maxPromptTokens` routing tokens
// (with the approximate tokenizer, 4 bytes of canonical chat text per token). Escaped
// strings are decoded to UTF-8, and the rest of a long prompt counted, by a WebAssembly
// module (json-string.ts); JSON.parse is its reference and the path wherever it declines.
//
// Equivalence: the ids returned are exactly the first min(n, maxPromptTokens) ids the full
// path (parseJsonBody + parseRequest + approximate tokenizer) yields, and every field read is
// validated by that path's own checks (the small fields go through parseRequest on a body of
// just those fields and a one-prompt stand-in; whatever that check rejects goes to the full
// path, since the real prompt may be a batch). A body this reader refuses is handed to the
// full path, whose error (400 naming the field, invalid JSON, nesting depth) is the answer;
// what the full path accepts and this reader cannot read is served by the full path too, so
// no body is refused that the full parser would take. The structure of fields routing does
// not read is checked, their string contents are not: the worker parses every byte anyway.
import { isUtf8 } from 'node:buffer';
import { badRequest } from './errors.ts';
import { countJsonString, decodeJsonString } from './json-string.ts';
import { DEFAULT_LIMITS, type RequestLimits } from './limits.ts';
import { parseJsonBody, parseRequest } from './parse.ts';
import type { ParsedRequest, RequestKind, ScannedRequest } from './request.ts';
import { buildRouteRequest } from './route-request.ts';
import { approximateTokenIds, idsOfUtf8, LITTLE_ENDIAN } from './routing-text.ts';
import { approximateTokenizer } from './tokenizer.ts';

export type { ScannedRequest } from './request.ts';

export interface ScanOptions {
  /**
   * Routing tokens the policy can use (its declared prefix); the prompt is decoded no further.
   * Default: all.
   */
  maxPromptTokens?: number;
  /** Output-token and nesting bounds (limits.ts), enforced as the full parser enforces them. */
  limits?: RequestLimits;
}

/** Thrown inside the walk; the full parser then produces the client-facing error. */
class Refused extends Error {}
const REFUSED = new Refused('scan refused');
/** The body is valid but uses a form this reader does not read: the full path serves it. */
class Unsupported extends Error {}
const UNSUPPORTED = new Unsupported('scan unsupported');

const QUOTE = 0x22;
const BACKSLASH = 0x5c;

/** What a string literal's span is: [start, end) excluding quotes, and whether it has escapes. */
interface StrSpan {
  s: number;
  e: number;
  esc: boolean;
}

interface MessageSpans {
  role: string;
  /** String content, or the text parts' spans (joined with "\n"); none: "". */
  content: StrSpan[];
  toolCalls?: [number, number];
}

/** Numbers this reader takes as is: plain non-negative integers. */
function isDigit(c: number): boolean {
  return c >= 0x30 && c <= 0x39;
}

class Walker {
  pos = 0;
  /** The next backslash at or after some earlier position; shared across strings (O(n) total). */
  private nextBs = -1;
  constructor(
    readonly b: Buffer,
    readonly maxDepth: number,
  ) {}

  ws(): void {
    const b = this.b;
    let p = this.pos;
    for (;;) {
      const c = b[p];
      if (c === 0x20 || c === 0x0a || c === 0x0d || c === 0x09) p++;
      else break;
    }
    this.pos = p;
  }

  peek(): number {
    this.ws();
    const c = this.b[this.pos];
    if (c === undefined) throw REFUSED;
    return c;
  }

  expect(c: number): void {
    if (this.peek() !== c) throw REFUSED;
    this.pos++;
  }

  /**
   * At an opening quote: skips the string, returns its content span. Two memchr-speed
   * searches per string (its closing quote; whether a backslash comes before it), not one per
   * escape: long prompts are full of \n.
   */
  str(): StrSpan {
    const b = this.b;
    const s = this.pos + 1;
    let q = b.indexOf(QUOTE, s);
    for (;;) {
      if (q === -1) throw REFUSED;
      // A quote preceded by an odd run of backslashes is escaped.
      let k = q - 1;
      while (k >= s && b[k] === BACKSLASH) k--;
      if (((q - 1 - k) & 1) === 0) break;
      q = b.indexOf(QUOTE, q + 1);
    }
    if (this.nextBs !== -2 && this.nextBs < s) {
      const n = b.indexOf(BACKSLASH, s);
      this.nextBs = n === -1 ? -2 : n;
    }
    this.pos = q + 1;
    return { s, e: q, esc: this.nextBs !== -2 && this.nextBs < q };
  }

  /** A short string's value (keys, roles, small fields). */
  strValue(): string {
    const sp = this.str();
    if (!sp.esc && sp.e - sp.s <= INTERN_MAX_BYTES) return internedAscii(this.b, sp.s, sp.e);
    return decodeSpan(this.b, sp);
  }

  /** Skips any value; `depth` is the depth of the container holding it. */
  skip(depth: number): void {
    const c = this.peek();
    if (c === QUOTE) {
      this.str();
      return;
    }
    if (c === 0x7b /* { */) {
      this.enter(depth);
      this.pos++;
      if (this.peek() === 0x7d) {
        this.pos++;
        return;
      }
      for (;;) {
        if (this.peek() !== QUOTE) throw REFUSED;
        this.str();
        this.expect(0x3a);
        this.skip(depth + 1);
        const n = this.peek();
        this.pos++;
        if (n === 0x7d) return;
        if (n !== 0x2c) throw REFUSED;
      }
    }
    if (c === 0x5b /* [ */) {
      this.enter(depth);
      this.pos++;
      if (this.peek() === 0x5d) {
        this.pos++;
        return;
      }
      for (;;) {
        this.skip(depth + 1);
        const n = this.peek();
        this.pos++;
        if (n === 0x5d) return;
        if (n !== 0x2c) throw REFUSED;
      }
    }
    this.scalar();
  }

  /** A container opened inside one of depth `depth`: refused past the limit. */
  enter(depth: number): void {
    if (depth + 1 > this.maxDepth) throw REFUSED;
  }

  /** true / false / null / a number: skipped with a light check (the worker parses it). */
  scalar(): void {
    const b = this.b;
    let p = this.pos;
    const c = b[p];
    if (c === 0x74 /* t */ || c === 0x6e /* n */) p += 4;
    else if (c === 0x66 /* f */) p += 5;
    else if (c === 0x2d || isDigit(c!)) {
      p++;
      for (;;) {
        const d = b[p];
        if (
          d !== undefined &&
          (isDigit(d) || d === 0x2e || d === 0x65 || d === 0x45 || d === 0x2b || d === 0x2d)
        )
          p++;
        else break;
      }
    } else throw REFUSED;
    if (p > b.length) throw REFUSED;
    this.pos = p;
  }

  /** Skips a value and returns its byte span. */
  span(depth: number): [number, number] {
    this.ws();
    const start = this.pos;
    this.skip(depth);
    return [start, this.pos];
  }
}

/**
 * Short plain strings (keys, roles, model names) are looked up by their bytes instead of
 * decoded: a body's keys repeat from request to request, and each decode is a call into C++
 * and a new string (about a quarter of the scan of a 1 KB chat body). Only ASCII spans, whose
 * bytes are their UTF-16 units; anything else is decoded as before.
 */
const INTERN_MAX_BYTES = 32;
const INTERN_MAX_ENTRIES = 1024;
const interned = new Map<number, string>();

/** The string of the plain span [s, e) (no escapes), from the cache when it was seen before. */
function internedAscii(b: Buffer, s: number, e: number): string {
  let h = 0x811c9dc5 ^ (e - s);
  let high = 0;
  for (let i = s; i < e; i++) {
    const c = b[i]!;
    high |= c;
    h = Math.imul(h ^ c, 0x01000193);
  }
  if (high >= 0x80) return b.toString('utf8', s, e);
  const hit = interned.get(h);
  if (hit !== undefined && hit.length === e - s) {
    let i = 0;
    while (i < hit.length && hit.charCodeAt(i) === b[s + i]) i++;
    if (i === hit.length) return hit;
  }
  const value = b.toString('latin1', s, e);
  if (interned.size >= INTERN_MAX_ENTRIES) interned.clear();
  interned.set(h, value);
  return value;
}

/**
 * A small field's value, as JSON.parse reads its bytes [s, e): true, false, null, plain
 * integers and short plain strings read directly, anything else (and anything malformed, so
 * that the same SyntaxError sends the body to the full parser) through JSON.parse.
 */
function smallValue(b: Buffer, s: number, e: number): unknown {
  const n = e - s;
  const c = b[s]!;
  if (c === QUOTE) {
    if (n - 2 <= INTERN_MAX_BYTES && n >= 2 && b[e - 1] === QUOTE) {
      let plain = true;
      for (let i = s + 1; i < e - 1; i++) {
        const d = b[i]!;
        if (d === BACKSLASH || d < 0x20 || d >= 0x80 || d === QUOTE) {
          plain = false;
          break;
        }
      }
      if (plain) return internedAscii(b, s + 1, e - 1);
    }
  } else if (n === 4 && c === 0x74 && b[s + 1] === 0x72 && b[s + 2] === 0x75 && b[s + 3] === 0x65) {
    return true;
  } else if (
    n === 5 &&
    c === 0x66 &&
    b[s + 1] === 0x61 &&
    b[s + 2] === 0x6c &&
    b[s + 3] === 0x73 &&
    b[s + 4] === 0x65
  ) {
    return false;
  } else if (n === 4 && c === 0x6e && b[s + 1] === 0x75 && b[s + 2] === 0x6c && b[s + 3] === 0x6c) {
    return null;
  } else {
    // -?(0|[1-9][0-9]*) of at most 15 digits: exact as a double, the value JSON.parse gives.
    const neg = c === 0x2d;
    const d0 = neg ? s + 1 : s;
    const digits = e - d0;
    if (digits >= 1 && digits <= 15 && (b[d0] !== 0x30 || digits === 1)) {
      let v = 0;
      let i = d0;
      for (; i < e; i++) {
        const d = b[i]!;
        if (d < 0x30 || d > 0x39) break;
        v = v * 10 + (d - 0x30);
      }
      if (i === e) return neg ? -v : v;
    }
  }
  return JSON.parse(b.toString('utf8', s, e));
}

/**
 * Escaped strings longer than this are decoded in pieces: JSON.parse of one string past V8's
 * 128 KiB large-object threshold costs several times what the same bytes cost in pieces
 * (a whole prompt decoded for the recorder or the live cache model, not a capped routing one).
 */
const DECODE_PIECE_BYTES = 64 * 1024;

/** A string span's value: a plain slice when it has no escapes, else JSON's own decoding. */
function decodeSpan(b: Buffer, sp: StrSpan): string {
  if (!sp.esc) return b.toString('utf8', sp.s, sp.e);
  if (sp.e - sp.s <= DECODE_PIECE_BYTES) {
    return JSON.parse(b.toString('utf8', sp.s - 1, sp.e + 1)) as string;
  }
  return decodePieces(b, sp).join('');
}

/** An escaped span's value in pieces of at most DECODE_PIECE_BYTES raw bytes each. */
function decodePieces(b: Buffer, sp: StrSpan): string[] {
  const parts: string[] = [];
  for (let i = sp.s; i < sp.e; ) {
    // Cut at an escape boundary (escapedLength stops at one or inside plain text), then move
    // past UTF-8 continuation bytes so no character is split between pieces.
    let cut = escapedLength(b, i, sp.e, DECODE_PIECE_BYTES).cut;
    while (cut < sp.e && (b[cut]! & 0xc0) === 0x80) cut++;
    parts.push(JSON.parse(`"${b.toString('utf8', i, cut)}"`) as string);
    i = cut;
  }
  return parts;
}

/**
 * Walks an escaped string's raw bytes [s, e) and returns the decoded UTF-8 length, or, with
 * `stopAt`, the raw position (at an escape boundary) where that many decoded bytes are reached.
 */
function escapedLength(b: Buffer, s: number, e: number, stopAt = Number.POSITIVE_INFINITY) {
  let decoded = 0;
  let i = s;
  while (i < e) {
    const bs = b.indexOf(BACKSLASH, i);
    const plainEnd = bs === -1 || bs >= e ? e : bs;
    if (decoded + (plainEnd - i) >= stopAt) return { decoded: stopAt, cut: i + (stopAt - decoded) };
    decoded += plainEnd - i;
    if (plainEnd === e) break;
    const k = b[bs + 1];
    if (k === 0x75 /* u */) {
      const cu = Number.parseInt(b.toString('latin1', bs + 2, bs + 6), 16);
      if (cu >= 0xd800 && cu < 0xdc00 && b[bs + 6] === BACKSLASH && b[bs + 7] === 0x75) {
        const lo = Number.parseInt(b.toString('latin1', bs + 8, bs + 12), 16);
        if (lo >= 0xdc00 && lo < 0xe000) {
          decoded += 4;
          i = bs + 12;
          if (decoded >= stopAt) return { decoded, cut: i };
          continue;
        }
      }
      decoded += cu < 0x80 ? 1 : cu < 0x800 ? 2 : 3;
      i = bs + 6;
    } else {
      decoded += 1;
      i = bs + 2;
    }
    if (decoded >= stopAt) return { decoded, cut: i };
  }
  return { decoded, cut: e };
}

/** The decoded UTF-8 length of the escaped string bytes [s, e): the module's count, else JS's. */
function escapedBytes(b: Buffer, s: number, e: number): number {
  const n = countJsonString(b, s, e);
  return n >= 0 ? n : escapedLength(b, s, e).decoded;
}

/** The decoded UTF-8 length of a string span. */
function spanBytes(b: Buffer, sp: StrSpan): number {
  return sp.esc ? escapedBytes(b, sp.s, sp.e) : sp.e - sp.s;
}

/** b[p] is a backslash that starts an escape (an even offset into its run; runs start at s). */
function escapeStartsAt(b: Buffer, s: number, p: number): boolean {
  if (p < s || b[p] !== BACKSLASH) return false;
  let k = p;
  while (k > s && b[k - 1] === BACKSLASH) k--;
  return ((p - k) & 1) === 0;
}

/** The code unit of the four hex digits at b[p..p+4), or -1. */
function hex4(b: Buffer, p: number): number {
  let v = 0;
  for (let i = p; i < p + 4; i++) {
    const c = b[i]! | 0x20;
    const d = c >= 0x30 && c <= 0x39 ? c - 0x30 : c >= 0x61 && c <= 0x66 ? c - 0x57 : -1;
    if (d < 0) return -1;
    v = v * 16 + d;
  }
  return v;
}

/**
 * Where a piece of the escaped span [s, e) meant to end at `cut` can end: there or just after,
 * never inside an escape, between the two escapes of a surrogate pair or inside a UTF-8
 * character, so that the pieces decoded one by one are the span decoded whole. `s` is such
 * a boundary. Exported for its tests (the package index does not re-export it).
 */
export function pieceEnd(b: Buffer, s: number, cut: number, e: number): number {
  if (cut >= e) return e;
  let c = cut;
  if (escapeStartsAt(b, s, c - 1)) {
    // Right after an escape's backslash: past \uXXXX or the one escaped character.
    c = b[c] === 0x75 ? c + 5 : c + 1;
  } else {
    // Within the four hex digits of a \uXXXX.
    for (let p = c - 1; p >= c - 4 && p > s; p--) {
      if (b[p] === 0x75 && escapeStartsAt(b, s, p - 1)) {
        c = p + 5;
        break;
      }
    }
  }
  // Between a high surrogate's escape and its low surrogate's.
  if (
    c - 6 >= s &&
    c + 6 <= e &&
    b[c - 5] === 0x75 &&
    escapeStartsAt(b, s, c - 6) &&
    b[c] === BACKSLASH &&
    b[c + 1] === 0x75
  ) {
    const hi = hex4(b, c - 4);
    const lo = hex4(b, c + 2);
    if (hi >= 0xd800 && hi < 0xdc00 && lo >= 0xdc00 && lo < 0xe000) c += 6;
  }
  while (c < e && (b[c]! & 0xc0) === 0x80) c++;
  return Math.min(c, e);
}

/**
 * Text written as UTF-8 straight into the buffer the ids view: the same bytes the joined
 * string would encode to, without building it (for a routing prefix of 64 KB, the join and
 * the second pass over it were a tenth of the scan and its largest allocation).
 */
class Utf8Out {
  private buf: Buffer;
  length = 0;
  constructor(capacity: number) {
    this.buf = Buffer.allocUnsafeSlow(capacity);
  }
  private room(n: number): void {
    if (this.length + n <= this.buf.length) return;
    const next = Buffer.allocUnsafeSlow(Math.max(this.buf.length * 2, this.length + n + 256));
    this.buf.copy(next, 0, 0, this.length);
    this.buf = next;
  }
  /** Appends `s`; `bytes`, when the caller knows it, is its UTF-8 length. Returns that length. */
  write(s: string, bytes?: number): number {
    // A UTF-16 unit is at most 3 UTF-8 bytes; near the end, count exactly before growing.
    if (this.length + (bytes ?? s.length * 3) > this.buf.length) {
      this.room(bytes ?? Buffer.byteLength(s, 'utf8'));
    }
    const n = this.buf.write(s, this.length, 'utf8');
    this.length += n;
    return n;
  }
  /** Appends raw bytes [s, e) of `b` (valid UTF-8). */
  copy(b: Buffer, s: number, e: number): void {
    this.room(e - s);
    this.length += b.copy(this.buf, this.length, s, e);
  }
  /** The approximate tokenizer's ids of the text: its bytes, zero-padded to whole uint32s. */
  ids(): Uint32Array {
    if (!LITTLE_ENDIAN) return approximateTokenIds(this.buf.toString('utf8', 0, this.length));
    this.room(((this.length + 3) & ~3) - this.length);
    return idsOfUtf8(this.buf, this.length);
  }
}

/** Builds the canonical routing text up to a byte budget and counts the rest's bytes. */
class TextBudget {
  /** The kept text. */
  private readonly out: Utf8Out;
  /** Decoded UTF-8 bytes of the whole text so far (kept or not). */
  total = 0;
  constructor(
    readonly b: Buffer,
    private left: number,
  ) {
    // What is kept is about the budget (or the body, when smaller); Utf8Out grows past it.
    this.out = new Utf8Out(Math.min(b.length, left) + 64);
  }
  lit(s: string): void {
    const n = Buffer.byteLength(s);
    this.total += n;
    if (this.left > 0) {
      this.out.write(s, n);
      this.left -= n;
    }
  }
  span(sp: StrSpan): void {
    if (this.left <= 0) {
      this.total += spanBytes(this.b, sp);
      return;
    }
    const b = this.b;
    if (!sp.esc) {
      // Plain: valid UTF-8 is its own text, copied as is; anything else goes through the
      // string (U+FFFD as there).
      if (sp.e - sp.s <= this.left) {
        if (!isUtf8(b.subarray(sp.s, sp.e))) {
          this.lit(b.toString('utf8', sp.s, sp.e));
          return;
        }
        const n = sp.e - sp.s;
        this.out.copy(b, sp.s, sp.e);
        this.total += n;
        this.left -= n;
        return;
      }
      // Longer than the budget: its first `left` bytes are the prefix (more is fine).
      const end = sp.s + this.left;
      this.total += sp.e - sp.s;
      if (isUtf8(b.subarray(sp.s, end))) this.out.copy(b, sp.s, end);
      else this.out.write(b.toString('utf8', sp.s, end));
      this.left = 0;
      return;
    }
    // Escaped: the module decodes up to the budget straight into the kept bytes and counts
    // the rest (json-string.ts).
    const mark = this.out.length;
    const stop = decodeJsonString(b, sp.s, sp.e, this.out, this.left);
    if (stop >= 0) {
      const n = this.out.length - mark;
      this.total += n + (stop < sp.e ? escapedBytes(b, stop, sp.e) : 0);
      this.left -= n;
      return;
    }
    if (sp.e - sp.s <= this.left) {
      // Decoded length <= raw length, so the whole string fits.
      this.lit(decodeSpan(b, sp));
      return;
    }
    // The JavaScript path. Escapes make the raw span longer than its text: it may still fit
    // in the budget, and what follows it is then kept too. Decoded in pieces of at most the
    // bytes still missing (raw is never shorter than decoded), each written as it is decoded,
    // until the budget is filled (usually two or three pieces); the rest is only counted. No
    // walk over the kept part's escapes to find where to cut.
    let i = sp.s;
    while (this.left > 0 && i < sp.e) {
      const cut = pieceEnd(b, i, Math.min(sp.e, i + this.left), sp.e);
      const n = this.out.write(JSON.parse(`"${b.toString('utf8', i, cut)}"`) as string);
      this.total += n;
      this.left -= n;
      i = cut;
    }
    if (i < sp.e) this.total += escapedBytes(b, i, sp.e);
  }
  /** A JSON value re-serialised as the full path does (JSON.stringify of its parse). */
  json(start: number, end: number): void {
    if (this.left <= 0) {
      this.total += end - start;
      return;
    }
    this.lit(JSON.stringify(JSON.parse(this.b.toString('utf8', start, end))));
  }
  ids(): Uint32Array {
    return this.out.ids();
  }
}

/**
 * The whole canonical text of a large body (no budget), written as UTF-8 straight into the
 * buffer the ids view, as TextBudget does. A string past V8's 128 KiB large-object threshold
 * costs several times what its bytes cost in small pieces (allocation, flattening, encoding),
 * which is what decoding a whole long prompt (for the recorder, the live cache model) would
 * otherwise pay, so no span is decoded whole: plain UTF-8 is copied as is, and escaped spans
 * are decoded by JSON.parse piece by piece, so every escape and character is read exactly as
 * the full path reads it and an invalid one throws the same way.
 */
class WholeText {
  private readonly out: Utf8Out;
  constructor(readonly b: Buffer) {
    this.out = new Utf8Out(b.length + 256);
  }
  /** Decoded UTF-8 bytes of the text so far. */
  get total(): number {
    return this.out.length;
  }
  lit(s: string): void {
    this.out.write(s);
  }
  span(sp: StrSpan): void {
    const b = this.b;
    if (!sp.esc) {
      // Valid UTF-8 is copied as is; anything else goes through the string (U+FFFD as there).
      if (isUtf8(b.subarray(sp.s, sp.e))) this.out.copy(b, sp.s, sp.e);
      else this.lit(b.toString('utf8', sp.s, sp.e));
      return;
    }
    if (decodeJsonString(b, sp.s, sp.e, this.out) >= 0) return;
    if (sp.e - sp.s <= DECODE_PIECE_BYTES) {
      this.lit(JSON.parse(b.toString('utf8', sp.s - 1, sp.e + 1)) as string);
      return;
    }
    const pieces = decodePieces(b, sp);
    // Two pieces split a surrogate pair (\ud83d|\ude00) only where the pair is one escape unit,
    // which escapedLength never cuts; a lone surrogate encodes as U+FFFD either way.
    for (const piece of pieces) this.lit(piece);
  }
  json(start: number, end: number): void {
    this.lit(JSON.stringify(JSON.parse(this.b.toString('utf8', start, end))));
  }
  ids(): Uint32Array {
    return this.out.ids();
  }
}

/** Bodies from this size on decode a whole prompt with WholeText (below, strings are cheap). */
const WHOLE_TEXT_MIN_BYTES = 64 * 1024;

/** Bytes past the needed prefix decoded as slack: a cut through a UTF-8 sequence stays past it. */
const SLACK_BYTES = 8;

/**
 * Reads a request body for routing (see the file comment). Throws the full parser's 400 for
 * anything invalid. `maxPromptTokens` bounds how much of the prompt is decoded.
 */
export function scanRequest(
  kind: RequestKind,
  raw: Buffer,
  opts: ScanOptions = {},
): ScannedRequest {
  // The other kinds (embeddings, rerank, responses) have prompts of their own shapes: the
  // full path reads them.
  if (kind !== 'chat' && kind !== 'completion' && kind !== 'generate') {
    return fullPath(kind, raw, opts);
  }
  try {
    return scan(kind, raw, opts);
  } catch (err) {
    if (!(err instanceof Refused) && !(err instanceof Unsupported) && !(err instanceof SyntaxError))
      throw err;
    return fullPath(kind, raw, opts);
  }
}

/** The full parser: its error for a body the scan refused, or its reading of an unusual one. */
function fullPath(kind: RequestKind, raw: Buffer, opts: ScanOptions): ScannedRequest {
  if (raw.length === 0) {
    throw badRequest('Request body is empty: expected a JSON object', { code: 'invalid_json' });
  }
  const limits = opts.limits ?? DEFAULT_LIMITS;
  const parsed = parseRequest(kind, parseJsonBody(raw, limits), limits);
  return fromParsed(parsed, raw, opts);
}

function fromParsed(parsed: ParsedRequest, raw: Buffer, opts: ScanOptions): ScannedRequest {
  // The full path's own reading (batches of several prompts included), then the cap.
  const route = buildRouteRequest(parsed, approximateTokenizer);
  const ids = route.inputIds;
  const cap = opts.maxPromptTokens ?? Number.POSITIVE_INFINITY;
  const out: ScannedRequest = {
    kind: parsed.kind,
    stream: parsed.stream,
    inputIds: ids.length > cap ? ids.subarray(0, cap) : ids,
    promptTokens: ids.length,
    routedRankSpans: topLevelSpans(raw, 'routed_dp_rank'),
  };
  // Unset when the client set no limit, as the scan leaves it, so that the host knows the
  // default applies (a chat or Responses answer is then bounded by the context, not by 128);
  // several prompts keep their total, which the default does not give.
  if (parsed.maxTokens !== undefined || parsed.items !== undefined) out.maxTokens = route.maxTokens;
  if (parsed.routingKey !== undefined) out.routingKey = parsed.routingKey;
  if (parsed.routedRank !== undefined) out.routedRank = parsed.routedRank;
  if (parsed.bootstrapRoom !== undefined) out.bootstrapRoom = parsed.bootstrapRoom;
  if (parsed.model !== undefined) out.model = parsed.model;
  return out;
}

/**
 * The byte ranges to cut for withRoutedRank: every top-level member called `name`, found by a
 * structural walk of a body already known to be valid JSON; [] when there is none.
 */
export function topLevelSpans(raw: Buffer, name: string): [number, number][] {
  return spansWhere(raw, (key) => key === name);
}

/**
 * topLevelSpans for several names in one walk (a host that sets several members walks the
 * body once, not once per member).
 */
export function topLevelSpansOf(raw: Buffer, names: ReadonlySet<string>): [number, number][] {
  return spansWhere(raw, (key) => names.has(key));
}

function spansWhere(raw: Buffer, wanted: (key: string) => boolean): [number, number][] {
  const w = new Walker(raw, Number.POSITIVE_INFINITY);
  const members: Member[] = [];
  try {
    topLevel(
      w,
      (key, m) => {
        w.skip(1);
        m.end = w.pos;
        return wanted(key);
      },
      members,
    );
  } catch {
    return [];
  }
  return memberRemovals(members);
}

interface Member {
  start: number;
  end: number;
  hit: boolean;
}

/** Walks the top-level object; `onMember` reads or skips the value at w.pos. */
function topLevel(
  w: Walker,
  onMember: (key: string, m: Member) => boolean,
  members: Member[],
): void {
  w.expect(0x7b);
  if (w.peek() === 0x7d) {
    w.pos++;
  } else {
    for (;;) {
      if (w.peek() !== QUOTE) throw REFUSED;
      const start = w.pos;
      const key = w.strValue();
      w.expect(0x3a);
      const m: Member = { start, end: start, hit: false };
      m.hit = onMember(key, m);
      members.push(m);
      const n = w.peek();
      w.pos++;
      if (n === 0x7d) break;
      if (n !== 0x2c) throw REFUSED;
    }
  }
  w.ws();
  if (w.pos !== w.b.length) throw REFUSED;
}

/** Byte ranges to cut so that the hit members go and the object stays valid JSON. */
function memberRemovals(members: Member[]): [number, number][] {
  const out: [number, number][] = [];
  for (let i = 0; i < members.length; i++) {
    const m = members[i]!;
    if (!m.hit) continue;
    const next = members[i + 1];
    if (next) out.push([m.start, next.start]);
    else {
      // The last member: cut from the end of the previous kept one (its comma goes too).
      let j = i - 1;
      while (j >= 0 && members[j]!.hit) j--;
      out.push([j >= 0 ? members[j]!.end : m.start, m.end]);
    }
  }
  return mergeSpans(out);
}

function mergeSpans(spans: [number, number][]): [number, number][] {
  spans.sort((a, b) => a[0] - b[0]);
  const out: [number, number][] = [];
  for (const s of spans) {
    const last = out[out.length - 1];
    if (last && s[0] <= last[1]) last[1] = Math.max(last[1], s[1]);
    else out.push([s[0], s[1]]);
  }
  return out;
}

/**
 * The body to send: `raw` itself when nothing changes; else the top-level routed_dp_rank
 * members cut out and, for a DP rank, `"routed_dp_rank":N` spliced in after the `{`. No other
 * byte of the client's body changes.
 */
export function withRoutedRank(
  raw: Buffer,
  spans: readonly [number, number][],
  dpRank: number | undefined,
): Buffer {
  if (dpRank === undefined && spans.length === 0) return raw;
  const parts: Buffer[] = [];
  let at = 0;
  for (const [s, e] of spans) {
    parts.push(raw.subarray(at, s));
    at = e;
  }
  parts.push(raw.subarray(at));
  let body = spans.length === 0 ? raw : Buffer.concat(parts);
  if (dpRank !== undefined) {
    const open = body.indexOf(0x7b);
    let k = open + 1;
    while (
      k < body.length &&
      (body[k] === 0x20 || body[k] === 0x0a || body[k] === 0x0d || body[k] === 0x09)
    )
      k++;
    const empty = body[k] === 0x7d;
    const member = Buffer.from(`"routed_dp_rank":${dpRank}${empty ? '' : ','}`);
    body = Buffer.concat([body.subarray(0, open + 1), member, body.subarray(open + 1)]);
  }
  return body;
}

/** Top-level fields routing reads besides the prompt: parsed from their (small) slices. */
const SMALL_FIELDS: Readonly<Record<string, true>> = {
  stream: true,
  stream_options: true,
  model: true,
  temperature: true,
  routing_key: true,
  routed_dp_rank: true,
  bootstrap_room: true,
  max_tokens: true,
  max_completion_tokens: true,
  sampling_params: true,
  rid: true,
};

function scan(kind: RequestKind, raw: Buffer, opts: ScanOptions): ScannedRequest {
  const limits = opts.limits ?? DEFAULT_LIMITS;
  const maxDepth = limits.maxJsonDepth;
  const w = new Walker(raw, maxDepth);
  const cap = opts.maxPromptTokens ?? Number.POSITIVE_INFINITY;
  const small: Record<string, unknown> = {};
  const members: Member[] = [];
  let messages: MessageSpans[] | undefined;
  let tools: [number, number] | undefined | null;
  let promptSpan: [number, number] | undefined;
  let promptKey = '';
  let seenPrompt = 0;

  topLevel(
    w,
    (key, m) => {
      if (kind === 'chat' && key === 'messages') {
        messages = readMessages(w, maxDepth);
        seenPrompt++;
      } else if (kind === 'chat' && key === 'tools') {
        if (w.peek() === 0x6e) {
          w.scalar();
          tools = null;
        } else {
          if (w.peek() !== 0x5b) throw REFUSED;
          tools = w.span(1);
          checkArrayOfObjects(raw, tools);
        }
      } else if (
        (kind === 'completion' && key === 'prompt') ||
        (kind === 'generate' && (key === 'text' || key === 'input_ids'))
      ) {
        // Decided once the whole object is read (text and input_ids exclude each other).
        if (w.peek() === 0x6e) {
          w.scalar();
        } else {
          promptSpan = w.span(1);
          promptKey = key;
          seenPrompt++;
        }
      } else if (SMALL_FIELDS[key]) {
        const [s, e] = w.span(1);
        small[key] = smallValue(raw, s, e);
      } else {
        w.skip(1);
      }
      m.end = w.pos;
      return key === 'routed_dp_rank';
    },
    members,
  );
  // Duplicate prompt members, or text and input_ids together: the full path decides.
  if (seenPrompt > 1) throw UNSUPPORTED;

  // The full parser's own checks, on a body of the small fields and a stand-in prompt.
  const lite: Record<string, unknown> = small;
  if (kind === 'chat') {
    if (!messages) throw REFUSED;
    lite.messages = [{ role: 'user' }];
  } else if (!promptSpan) {
    throw REFUSED;
  } else if (kind === 'completion') lite.prompt = 'x';
  else lite.text = 'x';
  let parsed: ParsedRequest;
  try {
    parsed = parseRequest(kind, lite, limits);
  } catch {
    // What the stand-in makes wrong the real prompt may make right (a /generate batch takes a
    // `rid` and a `sampling_params` list, one per prompt): the full path judges the body.
    throw REFUSED;
  }

  const budgetBytes = Number.isFinite(cap) ? cap * 4 + SLACK_BYTES : Number.POSITIVE_INFINITY;
  let ids: Uint32Array;
  let total: number;
  // A whole long prompt is written as bytes; a budgeted one (routing's prefix) as strings.
  const whole =
    !Number.isFinite(budgetBytes) && raw.length >= WHOLE_TEXT_MIN_BYTES && LITTLE_ENDIAN;
  if (kind === 'chat') {
    const t = whole ? new WholeText(raw) : new TextBudget(raw, budgetBytes);
    if (tools && !isEmptyArray(raw, tools)) {
      t.lit('<|tools|>\n');
      t.json(tools[0], tools[1]);
      t.lit('\n');
    }
    for (const msg of messages!) {
      t.lit(`<|${msg.role}|>\n`);
      msg.content.forEach((sp, i) => {
        if (i > 0) t.lit('\n');
        t.span(sp);
      });
      t.lit('\n');
      if (msg.toolCalls) {
        t.lit('<|tool_calls|>');
        t.json(msg.toolCalls[0], msg.toolCalls[1]);
        t.lit('\n');
      }
    }
    t.lit('<|assistant|>\n');
    ids = t.ids();
    total = Math.ceil(t.total / 4);
  } else {
    const [s, e] = promptSpan!;
    const c = raw[s];
    // /generate: text is a string, input_ids an array; anything else is the full path's 400.
    if (c === QUOTE && promptKey !== 'input_ids') {
      const w2 = new Walker(raw, maxDepth);
      w2.pos = s;
      const sp = w2.str();
      const t = whole ? new WholeText(raw) : new TextBudget(raw, budgetBytes);
      t.span(sp);
      ids = t.ids();
      total = Math.ceil(t.total / 4);
    } else if (c === 0x5b && promptKey !== 'text') {
      const r = readIds(raw, s, e, cap);
      ids = r.ids;
      total = r.count;
    } else throw REFUSED;
  }
  const out: ScannedRequest = {
    kind,
    stream: parsed.stream,
    inputIds: ids.length > cap ? ids.subarray(0, cap) : ids,
    promptTokens: total,
    routedRankSpans: memberRemovals(members),
  };
  if (parsed.maxTokens !== undefined) out.maxTokens = parsed.maxTokens;
  if (parsed.routingKey !== undefined) out.routingKey = parsed.routingKey;
  if (parsed.routedRank !== undefined) out.routedRank = parsed.routedRank;
  if (parsed.bootstrapRoom !== undefined) out.bootstrapRoom = parsed.bootstrapRoom;
  if (parsed.model !== undefined) out.model = parsed.model;
  return out;
}

function isEmptyArray(raw: Buffer, [s, e]: [number, number]): boolean {
  for (let i = s + 1; i < e - 1; i++) {
    const c = raw[i];
    if (c !== 0x20 && c !== 0x0a && c !== 0x0d && c !== 0x09) return false;
  }
  return true;
}

/** tools: an array whose elements are all objects (the full parser's rule). */
function checkArrayOfObjects(raw: Buffer, [s, e]: [number, number]): void {
  const w = new Walker(raw, Number.POSITIVE_INFINITY);
  w.pos = s + 1;
  if (w.peek() === 0x5d) return;
  for (;;) {
    if (w.peek() !== 0x7b) throw REFUSED;
    w.skip(1);
    const n = w.peek();
    w.pos++;
    if (n === 0x5d) break;
    if (n !== 0x2c) throw REFUSED;
  }
  if (w.pos !== e) throw REFUSED;
}

/** messages: a non-empty array of message objects, read for role, text and tool_calls. */
function readMessages(w: Walker, maxDepth: number): MessageSpans[] {
  const out: MessageSpans[] = [];
  w.expect(0x5b);
  if (w.peek() === 0x5d) throw REFUSED; // empty: the full parser names it
  if (2 > maxDepth) throw REFUSED;
  for (;;) {
    out.push(readMessage(w, maxDepth));
    const n = w.peek();
    w.pos++;
    if (n === 0x5d) return out;
    if (n !== 0x2c) throw REFUSED;
  }
}

function readMessage(w: Walker, maxDepth: number): MessageSpans {
  // messages is depth 2, a message depth 3, its content array depth 4, a part depth 5.
  if (3 > maxDepth) throw REFUSED;
  w.expect(0x7b);
  let role: string | undefined;
  let roleCount = 0;
  let content: StrSpan[] = [];
  let contentCount = 0;
  let toolCalls: [number, number] | undefined;
  let toolCallsCount = 0;
  if (w.peek() === 0x7d) throw REFUSED;
  for (;;) {
    if (w.peek() !== QUOTE) throw REFUSED;
    const key = w.strValue();
    w.expect(0x3a);
    if (key === 'role') {
      if (w.peek() !== QUOTE) throw REFUSED;
      role = w.strValue();
      roleCount++;
    } else if (key === 'content') {
      contentCount++;
      content = readContent(w, maxDepth);
    } else if (key === 'tool_calls') {
      toolCallsCount++;
      const c = w.peek();
      if (c === 0x6e) {
        w.scalar();
        toolCalls = undefined;
      } else {
        if (c !== 0x5b) throw REFUSED;
        toolCalls = w.span(3);
      }
    } else {
      w.skip(3);
    }
    const n = w.peek();
    w.pos++;
    if (n === 0x7d) break;
    if (n !== 0x2c) throw REFUSED;
  }
  // Duplicate keys: JSON.parse keeps the last; rare enough to leave to the full path.
  if (roleCount !== 1 || contentCount > 1 || toolCallsCount > 1) throw UNSUPPORTED;
  if (!role) throw REFUSED;
  const m: MessageSpans = { role, content };
  if (toolCalls) m.toolCalls = toolCalls;
  return m;
}

/** content: a string, null, or an array of parts; the text parts' spans. */
function readContent(w: Walker, maxDepth: number): StrSpan[] {
  const c = w.peek();
  if (c === QUOTE) return [w.str()];
  if (c === 0x6e) {
    w.scalar();
    return [];
  }
  if (c !== 0x5b) throw REFUSED;
  if (4 > maxDepth) throw REFUSED;
  w.pos++;
  const texts: StrSpan[] = [];
  if (w.peek() === 0x5d) {
    w.pos++;
    return texts;
  }
  for (;;) {
    if (w.peek() !== 0x7b) throw REFUSED;
    if (5 > maxDepth) throw REFUSED;
    w.pos++;
    let type: string | undefined;
    let text: StrSpan | undefined;
    let typeCount = 0;
    let textCount = 0;
    let textIsString = false;
    if (w.peek() !== 0x7d) {
      for (;;) {
        if (w.peek() !== QUOTE) throw REFUSED;
        const key = w.strValue();
        w.expect(0x3a);
        if (key === 'type') {
          typeCount++;
          if (w.peek() !== QUOTE) throw REFUSED;
          type = w.strValue();
        } else if (key === 'text') {
          textCount++;
          if (w.peek() === QUOTE) {
            text = w.str();
            textIsString = true;
          } else {
            w.skip(5);
            textIsString = false;
          }
        } else {
          w.skip(5);
        }
        const n = w.peek();
        w.pos++;
        if (n === 0x7d) break;
        if (n !== 0x2c) throw REFUSED;
      }
    } else w.pos++;
    if (typeCount > 1 || textCount > 1) throw UNSUPPORTED;
    if (type === undefined) throw REFUSED;
    if (type === 'text') {
      if (!textIsString) throw REFUSED;
      texts.push(text!);
    }
    const n = w.peek();
    w.pos++;
    if (n === 0x5d) return texts;
    if (n !== 0x2c) throw REFUSED;
  }
}

/**
 * A token-id array: the first `cap` ids and the count, each checked to be an integer in
 * [0, 2^32). Completions also take a batch of one (`[[ids]]`) or `["text"]`: left to the
 * full path.
 */
function readIds(
  raw: Buffer,
  s: number,
  e: number,
  cap: number,
): { ids: Uint32Array; count: number } {
  const w = new Walker(raw, Number.POSITIVE_INFINITY);
  w.pos = s + 1;
  const keep = Number.isFinite(cap) ? cap : 1024;
  let ids = new Uint32Array(Math.min(keep, 1024));
  let count = 0;
  if (w.peek() === 0x5d) throw REFUSED; // empty: the full parser names it
  for (;;) {
    w.ws();
    const p = w.pos;
    const c = raw[p];
    let v: number;
    let q = p;
    let plain = true;
    while (q < e) {
      const d = raw[q]!;
      if (isDigit(d)) q++;
      else if (d === 0x2e || d === 0x65 || d === 0x45 || d === 0x2b || d === 0x2d) {
        plain = false;
        q++;
      } else break;
    }
    if (q === p) throw c === QUOTE || c === 0x5b ? UNSUPPORTED : REFUSED;
    if (plain && q - p <= 10) {
      v = 0;
      for (let k = p; k < q; k++) v = v * 10 + (raw[k]! - 0x30);
      if (q - p > 1 && raw[p] === 0x30) throw REFUSED; // leading zero: not JSON
    } else {
      v = Number(raw.toString('latin1', p, q));
    }
    if (!Number.isInteger(v) || v < 0 || v > 0xffffffff) throw REFUSED;
    if (count < cap) {
      if (count === ids.length) {
        const grown = new Uint32Array(
          Math.min(ids.length * 2, Number.isFinite(cap) ? cap : ids.length * 2),
        );
        grown.set(ids);
        ids = grown;
      }
      ids[count] = v;
    }
    count++;
    w.pos = q;
    const n = w.peek();
    w.pos++;
    if (n === 0x5d) break;
    if (n !== 0x2c) throw REFUSED;
  }
  if (w.pos !== e) throw REFUSED;
  return { ids: ids.subarray(0, Math.min(count, cap)), count };
}
