import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import {
  blockToken,
  instantiateTokenFill,
  JsTokenWriter,
  type TokenWriter,
  tokenWriter,
  WasmTokenWriter,
} from '../src/workloads/token-fill.ts';

// A replay's tokens come from the WebAssembly module where it runs and from the JavaScript
// reference elsewhere; every replay result depends on the two agreeing exactly.

/** A request of blocks [n, seed][] through one writer. */
function write(writer: TokenWriter, blocks: readonly (readonly [number, number])[]): Uint32Array {
  const length = blocks.reduce((sum, [n]) => sum + n, 0);
  writer.begin(length);
  let offset = 0;
  for (const [n, seed] of blocks) {
    writer.block(offset, n, seed);
    offset += n;
  }
  return writer.take(length);
}

const wasmExports = instantiateTokenFill();

/** Equal contents, compared natively (toEqual walks a typed array element by element). */
function same(a: Uint32Array, b: Uint32Array): boolean {
  return Buffer.from(a.buffer, a.byteOffset, a.byteLength).equals(
    Buffer.from(b.buffer, b.byteOffset, b.byteLength),
  );
}

describe('token fill', () => {
  it('WebAssembly SIMD runs here, so replays take the fast path', () => {
    expect(wasmExports).not.toBeNull();
    expect(tokenWriter()).toBeInstanceOf(WasmTokenWriter);
  });

  it('the WebAssembly module writes the reference tokens, block after block', () => {
    const wasm = new WasmTokenWriter(instantiateTokenFill()!);
    const js = new JsTokenWriter();
    // Blocks of every tail length (n mod 4) and seeds over all 32 bits, several requests in
    // a row through one writer (its memory reused, then grown past its first page).
    const block = fc.tuple(fc.integer({ min: 0, max: 600 }), fc.integer());
    fc.assert(
      fc.property(
        fc.array(fc.array(block, { maxLength: 12 }), { minLength: 1, maxLength: 4 }),
        (requests) => {
          for (const blocks of requests) {
            expect(same(write(wasm, blocks), write(js, blocks))).toBe(true);
          }
        },
      ),
      { numRuns: 300 },
    );
    const long = Array.from({ length: 300 }, (_, i) => [512, i * 7919] as const);
    expect(same(write(wasm, long), write(js, long))).toBe(true);
  });

  it('each block is blockToken() of its seed and position', () => {
    const wasm = new WasmTokenWriter(instantiateTokenFill()!);
    fc.assert(
      fc.property(fc.integer({ min: 1, max: 70 }), fc.integer(), (n, seed) => {
        const ids = write(wasm, [[n, seed]]);
        for (let p = 0; p < n; p++) expect(ids[p]).toBe(blockToken(seed, p));
      }),
    );
  });

  it('hands out arrays that own their buffers and do not share them', () => {
    for (const writer of [new WasmTokenWriter(instantiateTokenFill()!), new JsTokenWriter()]) {
      const a = write(writer, [[100, 1]]);
      const b = write(writer, [[100, 2]]);
      expect(a.byteOffset).toBe(0);
      expect(a.byteLength).toBe(a.buffer.byteLength);
      expect(a.buffer).not.toBe(b.buffer);
      expect(same(a, write(new JsTokenWriter(), [[100, 1]]))).toBe(true);
    }
  });
});
