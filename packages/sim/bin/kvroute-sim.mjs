#!/usr/bin/env node
// `kvroute-sim`: as installed from npm, runs the compiled cli.js in dist/ with plain node. In a
// checkout of the repository (src/ present) it runs the TypeScript source through tsx, with
// the other workspace packages resolved to their source too (the `@kvroute/source` export
// condition), so the bin never runs a stale build.
import { existsSync } from 'node:fs';
import { register } from 'node:module';

const source = new URL('../src/cli.ts', import.meta.url);
if (existsSync(source)) {
  const tsx = await import('tsx/esm/api');
  tsx.register();
  const hook =
    'export async function resolve(s, c, next) {' +
    " return next(s, { ...c, conditions: ['@kvroute/source', ...c.conditions] }); }";
  register(`data:text/javascript,${encodeURIComponent(hook)}`);
  await import(source.href);
} else {
  await import(new URL('../dist/cli.js', import.meta.url).href);
}
