// A replay's synthetic tokens: each hash id maps to a fixed block of token ids computed from
// (salt, id, position). Building every request's tokens was a third of a replay cell's time,
// so whole blocks are written by a small WebAssembly SIMD module (token-fill.wat), four
// tokens at a time, about three times as fast as the JavaScript loop below. The JavaScript is
// the reference: it computes single tokens (radix caches compare through tokenAt), runs
// where WebAssembly SIMD is unavailable (e.g. node --jitless), and the tests check the two
// give the same tokens.
import { VOCAB } from './random.ts';
import { TOKEN_FILL_WASM } from './token-fill-wasm.ts';
import { ensureMemory, instantiateWasm, type WasmMemory } from './wasm.ts';

/** The per-block part of a token's mix: (salt, id) -> seed. */
export function blockSeed(salt: number, id: number): number {
  const h0 = Math.imul(salt ^ id, 0x9e3779b1) ^ (id >>> 16);
  return Math.imul(h0 ^ (h0 >>> 15), 0x85ebca6b);
}

const SPAN = VOCAB - 1;
const STEP = 0x9e3779b9 | 0;

/** The last part of a token's mix: h (position already mixed in) -> [1, VOCAB). */
function finish(h: number): number {
  h = Math.imul(h ^ (h >>> 16), 0x7feb352d);
  h ^= h >>> 15;
  // floor((h >>> 0) * SPAN / 2^32), in two 16-bit halves so it stays in integers (about 20%
  // faster than the double product it equals): with hi, lo the halves, the floor of
  // (hi * SPAN + lo * SPAN / 2^16) / 2^16 is that of (hi * SPAN + floor(lo * SPAN / 2^16)) / 2^16,
  // and every sum is below 2^16 * SPAN < 2^31.
  return 1 + (((h >>> 16) * SPAN + (((h & 0xffff) * SPAN) >>> 16)) >>> 16);
}

/** Token `pos` of a block with seed `seed`: a 32-bit mix scaled into [1, VOCAB). */
export function blockToken(seed: number, pos: number): number {
  return finish((seed + Math.imul(pos + 1, STEP)) | 0);
}

/**
 * Writes a request's tokens block by block and hands out the finished array: `begin(n)`,
 * then `block()` for each block, then `take(n)`, a fresh array that owns its buffer (what
 * describeTokens needs). One per thread; not reentrant.
 */
export interface TokenWriter {
  begin(length: number): void;
  /** Tokens [0, n) of the block with seed `seed` at positions [offset, offset + n). */
  block(offset: number, n: number, seed: number): void;
  take(length: number): Uint32Array;
}

/**
 * The reference: blockToken() for each position, with seed + (pos + 1) * STEP stepped instead
 * of multiplied (the same 32-bit values).
 */
export class JsTokenWriter implements TokenWriter {
  private out = new Uint32Array(0);

  begin(length: number): void {
    this.out = new Uint32Array(length);
  }

  block(offset: number, n: number, seed: number): void {
    const out = this.out;
    let h = (seed + STEP) | 0;
    for (let p = offset, end = offset + n; p < end; p++) {
      out[p] = finish(h);
      h = (h + STEP) | 0;
    }
  }

  take(length: number): Uint32Array {
    if (length !== this.out.length) throw new RangeError('take: not the length begun');
    const out = this.out;
    this.out = new Uint32Array(0);
    return out;
  }
}

interface FillExports {
  memory: WasmMemory;
  fill(byteOffset: number, n: number, h: number): void;
}

/** The same tokens from the WebAssembly module, written into its memory and copied out. */
export class WasmTokenWriter implements TokenWriter {
  private readonly fill: FillExports['fill'];
  private readonly memory: WasmMemory;
  private view: Uint32Array;

  constructor(exports: FillExports) {
    this.fill = exports.fill;
    this.memory = exports.memory;
    this.view = new Uint32Array(this.memory.buffer);
  }

  begin(length: number): void {
    // Grows to the longest prompt seen and stays there (a 128k-token prompt: 512 KiB).
    if (ensureMemory(this.memory, length * 4)) this.view = new Uint32Array(this.memory.buffer);
  }

  block(offset: number, n: number, seed: number): void {
    this.fill(offset * 4, n, (seed + STEP) | 0);
  }

  take(length: number): Uint32Array {
    // slice copies into a new buffer without zero-filling it first.
    return this.view.slice(0, length);
  }
}

/** The module's exports, or null where WebAssembly SIMD cannot run. */
export function instantiateTokenFill(): FillExports | null {
  return instantiateWasm(TOKEN_FILL_WASM) as FillExports | null;
}

let shared: TokenWriter | undefined;

/** This thread's writer: WebAssembly where it runs, else the reference. */
export function tokenWriter(): TokenWriter {
  if (shared === undefined) {
    const wasm = instantiateTokenFill();
    shared = wasm === null ? new JsTokenWriter() : new WasmTokenWriter(wasm);
  }
  return shared;
}
