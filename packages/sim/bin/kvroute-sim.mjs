#!/usr/bin/env node
// `kvroute-sim`: runs the compiled CLI in dist/ with plain node (no TypeScript loader at
// runtime). A workspace checkout has no dist/ until `pnpm build`; `pnpm sim` runs the source.
import { existsSync } from 'node:fs';

const entry = new URL('../dist/cli.js', import.meta.url);
if (!existsSync(entry)) {
  console.error('kvroute-sim: dist/cli.js is missing; run `pnpm build` first (or `pnpm sim` in the workspace)');
  process.exit(1);
}
await import(entry.href);
