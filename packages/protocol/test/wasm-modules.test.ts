import { describe, expect, it } from 'vitest';
import { compileWasm, WASM_MODULES, wasmModuleText } from '../../../scripts/gen-wasm.ts';
import { JSON_STRING_WASM } from '../src/json-string-wasm.ts';

const committed: Record<string, string> = { JSON_STRING_WASM };

// The protocol package loads its WebAssembly from base64 constants generated from .wat files;
// a module edited without regenerating them (pnpm gen:wasm) fails here.
describe('generated WebAssembly modules', () => {
  const mine = WASM_MODULES.filter((m) => m.dir.startsWith('packages/protocol/'));
  it('lists the protocol modules', () => {
    expect(mine.map((m) => m.wat)).toEqual(['json-string.wat']);
  });
  for (const m of mine) {
    it(`src/${m.ts} is what ${m.wat} compiles to`, async () => {
      const bytes = await compileWasm(m);
      expect(Buffer.from(committed[m.name]!, 'base64').equals(Buffer.from(bytes))).toBe(true);
      expect(wasmModuleText(m, bytes)).toContain(committed[m.name]!.slice(0, 64));
    });
  }
});
