#!/usr/bin/env node
// kvroute-router: runs the single-file bundle when it has been built
// (`pnpm --filter @kvroute/router bundle`, the form carried to machines without
// node_modules), else the TypeScript source through tsx.
import { existsSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const bundle = join(root, 'dist', 'kvroute-router.mjs');
if (existsSync(bundle)) {
  await import(pathToFileURL(bundle).href);
} else {
  const { register } = await import('tsx/esm/api');
  register();
  await import(pathToFileURL(join(root, 'src', 'server.ts')).href);
}
