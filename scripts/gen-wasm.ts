// Compiles the project's WebAssembly text modules with wabt and writes each one's bytes into a
// TypeScript module beside it, which the package loads (no build step or wasm file to ship).
// Each package's test/wasm-modules.test.ts fails while committed bytes differ from their text's.
//   pnpm gen:wasm   (or pnpm --filter @kvroute/sim gen:wasm, @kvroute/protocol gen:wasm)
import { readFileSync, writeFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import wabt from 'wabt';

/**
 * Each module: its folder (from the repository root), its text, the TypeScript module holding
 * its bytes, and that constant's name.
 */
export const WASM_MODULES = [
  {
    dir: 'packages/sim/src/workloads',
    wat: 'token-fill.wat',
    ts: 'token-fill-wasm.ts',
    name: 'TOKEN_FILL_WASM',
    what: 'token-fill',
  },
  {
    dir: 'packages/protocol/src',
    wat: 'json-string.wat',
    ts: 'json-string-wasm.ts',
    name: 'JSON_STRING_WASM',
    what: 'JSON string decoder',
  },
] as const;

export type WasmModule = (typeof WASM_MODULES)[number];

/** A module's file, by its name in the module's folder. */
export const wasmFile = (m: WasmModule, file: string) =>
  fileURLToPath(new URL(`../${m.dir}/${file}`, import.meta.url));

/** The module's bytes, compiled from its text. */
export async function compileWasm(m: WasmModule): Promise<Uint8Array> {
  const tools = await wabt();
  const mod = tools.parseWat(m.wat, readFileSync(wasmFile(m, m.wat), 'utf8'), { simd: true });
  try {
    mod.validate();
    return Uint8Array.from(mod.toBinary({}).buffer);
  } finally {
    mod.destroy();
  }
}

/** The TypeScript module holding `bytes`. */
export function wasmModuleText(m: WasmModule, bytes: Uint8Array): string {
  const b64 = Buffer.from(bytes).toString('base64');
  const lines = b64.match(/.{1,96}/g) ?? [];
  return [
    `// Generated from ${m.wat} by scripts/gen-wasm.ts (pnpm gen:wasm); do not edit.`,
    `/** The ${m.what} WebAssembly module, base64. */`,
    `export const ${m.name} =`,
    `${lines.map((l) => `  '${l}'`).join(' +\n')};`,
    '',
  ].join('\n');
}

if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) {
  for (const m of WASM_MODULES) {
    const bytes = await compileWasm(m);
    writeFileSync(wasmFile(m, m.ts), wasmModuleText(m, bytes));
    console.log(`wrote ${m.dir}/${m.ts} (${bytes.length} bytes of WebAssembly)`);
  }
}
