// The package is split by audience: the model (`@kvroute/sim/model`) must load alone, so a
// host such as the mock worker pays for no renderer, CLI or HTTP code. This follows every
// relative import from src/model.ts and fails on any file outside the model's folders (host/ is
// the simulation's host side: arrivals, cluster events, request bookkeeping; pd/ the
// prefill/decode-disaggregated layout's entities and host) or any
// import of another package other than the policy core and seedrandom.
import { readdirSync, readFileSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

const pkg = fileURLToPath(new URL('../', import.meta.url));
const src = join(pkg, 'src');
const MODEL_DIRS = ['engine', 'entities', 'cache', 'cost', 'workloads', 'metrics', 'host', 'pd'];
const MODEL_FILES = ['model.ts', 'simulate.ts', 'compare.ts'];
const MODEL_PACKAGES = ['@kvroute/policy', 'seedrandom'];

function specifiers(file: string): string[] {
  const code = readFileSync(file, 'utf8');
  const out: string[] = [];
  for (const m of code.matchAll(/(?:^|\n)\s*(?:import|export)[^'"]*?from\s+'([^']+)'/g))
    out.push(m[1]!);
  for (const m of code.matchAll(/import\(\s*'([^']+)'\s*\)/g)) out.push(m[1]!);
  return out;
}

/** What a module loads with itself: value imports and re-exports, not types nor import(). */
function loadedWith(file: string): string[] {
  const code = readFileSync(file, 'utf8');
  const out: string[] = [];
  for (const m of code.matchAll(/(?:^|\n)\s*(import|export)(?!\s+type\b)[^'"]*?from\s+'([^']+)'/g))
    out.push(m[2]!);
  return out;
}

function closure(
  entry: string,
  imports: (file: string) => string[] = specifiers,
): { files: Set<string>; packages: Set<string> } {
  const files = new Set<string>();
  const packages = new Set<string>();
  const todo = [entry];
  while (todo.length > 0) {
    const file = todo.pop()!;
    if (files.has(file)) continue;
    files.add(file);
    for (const s of imports(file)) {
      if (s.startsWith('.')) todo.push(resolve(dirname(file), s));
      else if (!s.startsWith('node:')) packages.add(s);
    }
  }
  return { files, packages };
}

describe('layers', () => {
  it('the model reaches only engine, entities, cache, cost, workloads, metrics and its drivers', () => {
    const { files, packages } = closure(join(src, 'model.ts'));
    expect(files.size).toBeGreaterThan(20);
    for (const file of files) {
      const rel = relative(src, file);
      const top = rel.split('/')[0]!;
      expect(MODEL_DIRS.includes(top) || MODEL_FILES.includes(rel), rel).toBe(true);
    }
    expect([...packages].sort()).toEqual(MODEL_PACKAGES);
  });

  it('the sub-path exports name the model, the reports and the CLI', () => {
    const manifest = JSON.parse(readFileSync(join(pkg, 'package.json'), 'utf8')) as {
      exports: Record<string, Record<string, string>>;
    };
    expect(Object.keys(manifest.exports).sort()).toEqual(['.', './cli', './model', './report']);
    expect(manifest.exports['./model']!['@kvroute/source']).toBe('./src/model.ts');
    expect(manifest.exports['./model']!.default).toBe('./dist/model.js');
  });

  it('reports import nothing from the CLI, and nothing outside cli/ imports cli/', () => {
    const all = (dir: string): string[] =>
      readdirSync(dir, { withFileTypes: true }).flatMap((e) =>
        e.isDirectory()
          ? all(join(dir, e.name))
          : e.name.endsWith('.ts')
            ? [join(dir, e.name)]
            : [],
      );
    for (const file of all(src)) {
      const rel = relative(src, file);
      if (rel.startsWith('cli/') || rel === 'cli.ts' || rel === 'index.ts') continue;
      for (const s of specifiers(file)) {
        const target = s.startsWith('.') ? relative(src, resolve(dirname(file), s)) : s;
        expect(target.startsWith('cli/') || target === 'cli.ts', `${rel} imports ${s}`).toBe(false);
      }
    }
  });

  it('a command that writes no HTML loads no chart renderer', () => {
    // vega and vega-lite took about 250 ms to load, before a sweep started its threads.
    for (const command of ['run', 'sweep', 'replay', 'compare']) {
      const { files, packages } = closure(
        join(src, 'cli', 'commands', `${command}.ts`),
        loadedWith,
      );
      // The HTML module itself is on every one of these paths (it must not pull the renderers).
      expect(files.has(join(src, 'report', 'html.ts')), command).toBe(true);
      expect(packages.has('@kvroute/policy'), command).toBe(true);
      expect(
        [...packages].filter((p) => p.startsWith('vega')),
        command,
      ).toEqual([]);
    }
  });

  it('the mock worker imports the simulator only through the model sub-path', () => {
    const dir = join(pkg, '../../apps/mock-worker/src');
    const seen: string[] = [];
    for (const name of readdirSync(dir).filter((f) => f.endsWith('.ts'))) {
      for (const s of specifiers(join(dir, name))) if (s.startsWith('@kvroute/sim')) seen.push(s);
    }
    expect(seen.length).toBeGreaterThan(0);
    expect([...new Set(seen)]).toEqual(['@kvroute/sim/model']);
  });
});
