import { describe, expect, it } from 'vitest';
import { compileWasm, WASM_MODULES, wasmModuleText } from '../../../scripts/gen-wasm.ts';

// The simulator loads its WebAssembly from base64 constants generated from .wat files; a
// module edited without regenerating them (pnpm gen:wasm) fails here.
describe('generated WebAssembly modules', () => {
  const mine = WASM_MODULES.filter((m) => m.dir.startsWith('packages/sim/'));
  it('lists the simulator modules', () => {
    expect(mine.map((m) => m.wat)).toEqual(['token-fill.wat']);
  });
  for (const m of mine) {
    it(`src/workloads/${m.ts} is what ${m.wat} compiles to`, async () => {
      const committed = (await import(`../src/workloads/${m.ts}`)) as Record<string, string>;
      const bytes = await compileWasm(m);
      expect(Buffer.from(committed[m.name]!, 'base64').equals(Buffer.from(bytes))).toBe(true);
      expect(wasmModuleText(m, bytes)).toContain(committed[m.name]!.slice(0, 64));
    });
  }
});
