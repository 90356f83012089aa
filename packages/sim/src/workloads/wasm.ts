// Loading the simulator's small WebAssembly modules (their bytes are base64 constants
// generated from .wat files by scripts/gen-wasm.ts). Each caller keeps a JavaScript reference
// that gives the same values, used where WebAssembly (or its SIMD) does not run, e.g. under
// `node --jitless`.

// The little of the WebAssembly API used here (the project's TypeScript libs leave it out).
export interface WasmMemory {
  readonly buffer: ArrayBuffer;
  grow(pages: number): number;
}
declare const WebAssembly:
  | {
      validate(bytes: Uint8Array): boolean;
      Module: new (bytes: Uint8Array) => object;
      Instance: new (module: object) => { exports: unknown };
    }
  | undefined;

const WASM_PAGE = 65_536;

/** A new instance's exports, or null where this runtime cannot run the module. */
export function instantiateWasm(base64: string): unknown {
  if (typeof WebAssembly !== 'object') return null;
  const bytes = Buffer.from(base64, 'base64');
  if (!WebAssembly.validate(bytes)) return null;
  return new WebAssembly.Instance(new WebAssembly.Module(bytes)).exports;
}

/** Grows `memory` to hold at least `bytes`; true when it grew (views of it must be remade). */
export function ensureMemory(memory: WasmMemory, bytes: number): boolean {
  const have = memory.buffer.byteLength;
  if (bytes <= have) return false;
  memory.grow(Math.ceil((bytes - have) / WASM_PAGE));
  return true;
}
