// Every package declares Node ^20.19.0 || >=22.12.0 (engines, README "Install"): the lines
// whose require() loads ES modules, which yargs (vega's CLI) and others declare too. A production dependency
// that declares a narrower range makes `npm install` of the tarballs print EBADENGINE and
// `npm install --engine-strict` fail, so each one's engines must admit the repo's own range.
import { existsSync, readFileSync, realpathSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { describe, expect, it } from 'vitest';

const root = join(import.meta.dirname, '..');
const WORKSPACES = [
  'packages/policy',
  'packages/protocol',
  'packages/sim',
  'packages/validate',
  'apps/mock-worker',
  'apps/router',
];
// Known exceptions, each with its exact range, so a new one (or a change) fails.
const KNOWN: Record<string, string> = {
  // fastify's light-my-request (its inject(), for tests) takes cookie ^2, which declares
  // Node >= 22; fastify's own range picks it for every consumer, so no pin of ours would reach
  // an npm install. It runs on Node 20 (this repo's tests inject on 20.20): npm prints
  // EBADENGINE for it, and the README says so.
  cookie: '>=22',
};

interface Pkg {
  name: string;
  version: string;
  engines?: { node?: string };
  dependencies?: Record<string, string>;
  optionalDependencies?: Record<string, string>;
}
const readPkg = (dir: string) => JSON.parse(readFileSync(join(dir, 'package.json'), 'utf8')) as Pkg;

/** Whether a version satisfies an npm range of the forms engines use (>=, >, <, <=, ^, ~, x, ||). */
export function satisfies(version: string, range: string): boolean {
  const v = version.split('.').map(Number);
  const cmp = (a: number[], b: number[]) => {
    for (let i = 0; i < 3; i++) if ((a[i] ?? 0) !== (b[i] ?? 0)) return (a[i] ?? 0) - (b[i] ?? 0);
    return 0;
  };
  const parts = (s: string) =>
    s
      .replace(/^v/, '')
      .split('.')
      .filter((p) => p !== 'x' && p !== '*');
  const one = (c: string): boolean => {
    const m = /^(>=|<=|>|<|\^|~|=)?\s*(.*)$/.exec(c.trim())!;
    const op = m[1] ?? '';
    const given = parts(m[2]!);
    const b = given.map(Number);
    if (m[2] === '*' || m[2] === '') return true;
    if (op === '>=') return cmp(v, b) >= 0;
    if (op === '>') return cmp(v, b) > 0;
    if (op === '<=') return cmp(v, b) <= 0;
    if (op === '<') return cmp(v, b) < 0;
    if (op === '^') return cmp(v, b) >= 0 && v[0] === b[0];
    if (op === '~') return cmp(v, b) >= 0 && v[0] === b[0] && v[1] === b[1];
    return given.every((p, i) => Number(p) === v[i]); // 20, 20.x, =20.18.0
  };
  return range.split('||').some((alt) =>
    alt
      .trim()
      .replace(/(>=|<=|>|<|\^|~|=)\s+/g, '$1')
      .split(/\s+/)
      .every(one),
  );
}

/** The production dependency closure, by name@version -> its engines.node. */
function productionEngines(): Map<string, { name: string; engines?: string }> {
  const seen = new Map<string, { name: string; engines?: string }>();
  const walk = (dir: string) => {
    const pkg = readPkg(dir);
    const deps = { ...pkg.dependencies, ...pkg.optionalDependencies };
    for (const dep of Object.keys(deps)) {
      // pnpm's layout: a package's dependencies are links beside it (or in its own node_modules).
      const candidates = [join(dir, 'node_modules', dep), join(dirname(dir), dep)];
      if (dep.startsWith('@')) candidates.push(join(dirname(dirname(dir)), dep));
      const found = candidates.find((c) => existsSync(join(c, 'package.json')));
      if (!found) continue; // an optional dependency for another platform
      const real = realpathSync(found);
      const p = readPkg(real);
      const key = `${p.name}@${p.version}`;
      if (seen.has(key)) continue;
      seen.set(key, { name: p.name, ...(p.engines?.node ? { engines: p.engines.node } : {}) });
      walk(real);
    }
  };
  for (const w of WORKSPACES) walk(join(root, w));
  return seen;
}

describe('Node engines', () => {
  it('reads engine ranges as npm does', () => {
    expect(satisfies('20.18.0', '>=18.0.0')).toBe(true);
    expect(satisfies('20.18.0', '>=22.12')).toBe(false);
    expect(satisfies('20.18.0', '^18.17.0 || >=20.5.0')).toBe(true);
    expect(satisfies('20.18.0', '>= 14')).toBe(true);
    expect(satisfies('20.18.0', '20 || >=22')).toBe(true);
    expect(satisfies('20.18.0', '^22')).toBe(false);
  });

  it('every production dependency admits the Node versions the packages declare', () => {
    const own = readPkg(root).engines?.node;
    expect(own).toBe('^20.19.0 || >=22.12.0');
    for (const w of WORKSPACES) expect(readPkg(join(root, w)).engines?.node, w).toBe(own);
    // The declared range's ends: its minimum, the rest of 20.x and the later LTS lines.
    const versions = ['20.19.0', '20.99.0', '22.12.0', '24.0.0'];
    const narrower: string[] = [];
    const deps = productionEngines();
    expect(deps.size).toBeGreaterThan(20);
    for (const [key, { name, engines }] of deps) {
      if (engines === undefined || KNOWN[name] === engines) continue;
      if (!versions.every((v) => satisfies(v, engines))) narrower.push(`${key} (${engines})`);
    }
    expect(narrower).toEqual([]);
  });
});
