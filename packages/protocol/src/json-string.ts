// A JSON string's contents, decoded straight from the body's bytes to UTF-8 bytes, and the
// decoded length of a string counted without decoding it.
//
// Why: the routing prefix of a long prompt is text with an escape every line (\n), and the
// string path (bytes to a JS string, JSON.parse, the string back to UTF-8) cost about 3 us per
// KB of prompt, most of the router's cost per KB; counting the rest of a long prompt escape by
// escape (one indexOf call each) cost about 0.8 us per KB more. A small WebAssembly SIMD
// module (json-string.wat) does both sixteen bytes at a time, in windows of at most WINDOW
// bytes copied into its fixed memory (it never grows, whatever the body's size).
//
// The JavaScript path stays the reference, and the path taken wherever this declines: where
// WebAssembly SIMD does not run (node --jitless), and for any string the module leaves to
// JSON.parse (a control byte, an unknown escape, bad hex: JSON.parse's error is then the
// answer) or whose plain bytes are not valid UTF-8 (decoding replaces those with U+FFFD).
import { isUtf8 } from 'node:buffer';
import { JSON_STRING_WASM } from './json-string-wasm.ts';

/** Where decoded bytes go: appended at `length`, which a caller may set back. */
export interface ByteSink {
  length: number;
  copy(b: Buffer, s: number, e: number): void;
}

interface JsonStringExports {
  memory: { buffer: ArrayBuffer };
  at: { value: number };
  high: { value: number };
  count(s: number, e: number, final: number): number;
  decode(s: number, e: number, d: number, stop: number, final: number): number;
}

// The little of the WebAssembly API used here (the project's TypeScript libs leave it out).
declare const WebAssembly:
  | {
      validate(bytes: Uint8Array): boolean;
      Module: new (bytes: Uint8Array) => object;
      Instance: new (module: object) => { exports: unknown };
    }
  | undefined;

/** Raw bytes handed to the module at a time: its input at 0, its output at OUT. */
export const WINDOW = 64 * 1024;
/** Output offset: past a window and its 16 bytes of slack (the module reads whole blocks). */
const OUT = WINDOW + 64;
/**
 * Memory the module needs: a window decodes to at most its own size, and the last block it
 * stores may run 16 bytes past the output's end.
 */
const MEMORY_BYTES = OUT + WINDOW + 16;

interface Loaded {
  x: JsonStringExports;
  /** The module's memory as a Buffer (the memory never grows, so this view stays valid). */
  mem: Buffer;
}

let loaded: Loaded | null | undefined;
let enabled = true;

function instance(): Loaded | null {
  if (!enabled) return null;
  if (loaded === undefined) {
    loaded = null;
    if (typeof WebAssembly === 'object') {
      const bytes = Buffer.from(JSON_STRING_WASM, 'base64');
      if (WebAssembly.validate(bytes)) {
        const x = new WebAssembly.Instance(new WebAssembly.Module(bytes))
          .exports as JsonStringExports;
        if (x.memory.buffer.byteLength >= MEMORY_BYTES) {
          loaded = { x, mem: Buffer.from(x.memory.buffer) };
        }
      }
    }
  }
  return loaded;
}

/**
 * Turns the module off (false) or back on for this thread: tests run the JavaScript path with
 * it, as a runtime without WebAssembly SIMD would.
 */
export function useJsonStringWasm(on: boolean): void {
  enabled = on;
}

/** Whether the module runs here (and is on). */
export function jsonStringWasmActive(): boolean {
  return instance() !== null;
}

/**
 * Decodes the JSON string contents b[s, e) (between the quotes) into `out` as UTF-8, stopping
 * once at least `want` bytes were written (up to 16 more may be) or at e. What it writes is
 * always the start of the string's UTF-8 bytes, possibly ending inside a character; the raw
 * position returned is never inside an escape. -1, with `out` as it was: the module does not
 * run here, or leaves this string to JSON.parse.
 */
export function decodeJsonString(
  b: Buffer,
  s: number,
  e: number,
  out: ByteSink,
  want = Number.POSITIVE_INFINITY,
): number {
  const m = instance();
  if (m === null) return -1;
  const { x, mem } = m;
  const mark = out.length;
  let i = s;
  let got = 0;
  while (i < e && got < want) {
    let we = Math.min(e, i + WINDOW);
    // A window ends between characters, so that its bytes can be checked as UTF-8 alone.
    for (let k = 0; k < 3 && we < e && we > i && (b[we]! & 0xc0) === 0x80; k++) we--;
    const n = b.copy(mem, 0, i, we);
    // A window writes at most n bytes, so a budget past that is no budget for this window.
    const end = x.decode(0, n, OUT, OUT + Math.min(want - got, n), we === e ? 1 : 0);
    const at = x.at.value;
    if (end < 0 || at === 0 || (x.high.value !== 0 && !isUtf8(b.subarray(i, we)))) {
      out.length = mark;
      return -1;
    }
    out.copy(mem, OUT, end);
    got += end - OUT;
    i += at;
  }
  return i;
}

/**
 * The decoded UTF-8 length of the JSON string contents b[s, e), plain bytes counted as they
 * are (what escapedLength in scan.ts counts), or -1 when the module does not run or leaves
 * this string to the JavaScript count.
 */
export function countJsonString(b: Buffer, s: number, e: number): number {
  const m = instance();
  if (m === null) return -1;
  const { x, mem } = m;
  let i = s;
  let n = 0;
  while (i < e) {
    const we = Math.min(e, i + WINDOW);
    const len = b.copy(mem, 0, i, we);
    const c = x.count(0, len, we === e ? 1 : 0);
    const at = x.at.value;
    if (c < 0 || at === 0) return -1;
    n += c;
    i += at;
  }
  return n;
}
