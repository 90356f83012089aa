#!/usr/bin/env node
// `kvroute-router`: runs the compiled server in dist/ with plain node (no TypeScript loader
// at runtime). A workspace checkout has no dist/ until `pnpm build`; `pnpm router` runs the
// source, and `pnpm --filter @kvroute/router bundle` writes a single file for hosts without
// node_modules.
import { existsSync } from 'node:fs';

const entry = new URL('../dist/server.js', import.meta.url);
if (!existsSync(entry)) {
  console.error(
    'kvroute-router: dist/server.js is missing; run `pnpm build` first (or `pnpm router` in the workspace)',
  );
  process.exit(1);
}
await import(entry.href);
