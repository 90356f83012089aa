#!/usr/bin/env node
// kvroute-router: runs the TypeScript source through tsx, as every package here does. Where
// tsx is not installed (a machine that got only the single-file bundle from
// `pnpm --filter @kvroute/router bundle`), it runs that bundle instead. Source first, so a
// stale bundle left in dist/ never shadows the code being edited.
import { existsSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const bundle = join(root, 'dist', 'kvroute-router.mjs');
let tsx;
try {
  tsx = await import('tsx/esm/api');
} catch (err) {
  if (!existsSync(bundle)) throw err;
}
if (tsx) {
  tsx.register();
  await import(pathToFileURL(join(root, 'src', 'server.ts')).href);
} else {
  await import(pathToFileURL(bundle).href);
}
