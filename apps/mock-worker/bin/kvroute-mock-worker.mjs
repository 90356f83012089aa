#!/usr/bin/env node
// `kvroute-mock-worker`: runs the compiled server in dist/ with plain node (no TypeScript
// loader at runtime). A workspace checkout has no dist/ until `pnpm build`.
import { existsSync } from 'node:fs';

const entry = new URL('../dist/server.js', import.meta.url);
if (!existsSync(entry)) {
  console.error('kvroute-mock-worker: dist/server.js is missing; run `pnpm build` first');
  process.exit(1);
}
await import(entry.href);
