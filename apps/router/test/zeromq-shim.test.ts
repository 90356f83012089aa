// The single-file bundles replace zeromq with a shim that loads it on first use (zeromq is a
// native addon esbuild cannot bundle). The router and the mock worker construct its sockets
// with `new`: the shim's exports must be constructible and give the real sockets. Each case
// runs in plain node, as a bundle does, from a folder laid out as deployed.
import { execFileSync } from 'node:child_process';
import { copyFileSync, mkdirSync, mkdtempSync, rmSync, symlinkSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterEach, describe, expect, it } from 'vitest';

const SHIM = fileURLToPath(
  new URL('../../../packages/protocol/scripts/zeromq-lazy.mjs', import.meta.url),
);
const dirs: string[] = [];
afterEach(() => {
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});

/** A folder holding the shim as `bundle.mjs`, with zeromq installed beside it or not. */
function deployed(withZeromq: boolean): string {
  const dir = mkdtempSync(join(tmpdir(), 'kvroute-zmq-shim-'));
  dirs.push(dir);
  copyFileSync(SHIM, join(dir, 'bundle.mjs'));
  if (withZeromq) {
    const pkg = dirname(createRequire(import.meta.url).resolve('zeromq/package.json'));
    mkdirSync(join(dir, 'node_modules'));
    symlinkSync(pkg, join(dir, 'node_modules', 'zeromq'), 'dir');
  }
  return dir;
}

const PROGRAM = `
const shim = await import('./bundle.mjs');
const out = [];
for (const name of ['Subscriber', 'Dealer']) {
  try {
    const s = new shim[name]({ linger: 0 });
    out.push(name + ': ' + s.constructor.name);
    s.close();
  } catch (err) {
    out.push(name + ': threw ' + err.message.split('\\n')[0]);
  }
}
console.log(out.join('\\n'));
`;

// Without pnpm's NODE_PATH (its store's node_modules), which would find zeromq from anywhere.
const { NODE_PATH: _, ...ENV } = process.env;
const run = (dir: string) =>
  execFileSync(process.execPath, ['--input-type=module', '-e', PROGRAM], {
    cwd: dir,
    encoding: 'utf8',
    timeout: 20_000,
    env: ENV,
  });

describe("the bundles' zeromq shim", () => {
  it('constructs the real sockets with new where zeromq is installed beside the bundle', () => {
    expect(run(deployed(true)).trim().split('\n')).toEqual([
      'Subscriber: Subscriber',
      'Dealer: Dealer',
    ]);
  });

  it('says what is missing where zeromq is not installed', () => {
    const out = run(deployed(false));
    expect(out).toContain(
      'Subscriber: threw KV events need the zeromq package installed beside this bundle (npm i zeromq@6)',
    );
  });
});
