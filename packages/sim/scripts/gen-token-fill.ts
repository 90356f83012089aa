// Compiles src/workloads/token-fill.wat (WebAssembly text) with wabt and writes its bytes into
// src/workloads/token-fill-wasm.ts, the module the simulator loads (no build step or wasm file
// to ship). test/token-fill.test.ts fails while the committed bytes differ from the text's.
//   pnpm --filter @kvroute/sim gen:token-fill
import { readFileSync, writeFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import wabt from 'wabt';

const watPath = fileURLToPath(new URL('../src/workloads/token-fill.wat', import.meta.url));
const outPath = fileURLToPath(new URL('../src/workloads/token-fill-wasm.ts', import.meta.url));

/** The module's bytes, compiled from the text. */
export async function compileTokenFill(): Promise<Uint8Array> {
  const tools = await wabt();
  const mod = tools.parseWat('token-fill.wat', readFileSync(watPath, 'utf8'), { simd: true });
  try {
    mod.validate();
    return Uint8Array.from(mod.toBinary({}).buffer);
  } finally {
    mod.destroy();
  }
}

/** The TypeScript module holding `bytes`. */
export function tokenFillModuleText(bytes: Uint8Array): string {
  const b64 = Buffer.from(bytes).toString('base64');
  const lines = b64.match(/.{1,96}/g) ?? [];
  return [
    '// Generated from token-fill.wat by scripts/gen-token-fill.ts; do not edit.',
    '/** The token-fill WebAssembly module (SIMD), base64. */',
    'export const TOKEN_FILL_WASM =',
    `${lines.map((l) => `  '${l}'`).join(' +\n')};`,
    '',
  ].join('\n');
}

if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) {
  const bytes = await compileTokenFill();
  writeFileSync(outPath, tokenFillModuleText(bytes));
  console.log(`wrote ${outPath} (${bytes.length} bytes of WebAssembly)`);
}
