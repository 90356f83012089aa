// What a user gets from npm: build every package, `pnpm pack` it, install the tarballs into an
// empty folder outside the workspace (third-party packages from the registry or pnpm's store,
// so it runs offline once the workspace is installed), then run the bins with plain node.
// Nothing here may resolve TypeScript source or tsx.
//
// KVROUTE_TEST_NODE_BINARIES=/path/to/node22:/path/to/node24 also runs the installed CLIs
// under those Node binaries (the package's engines range is ^20.19.0 || >=22.12.0).
import { type ChildProcess, execFileSync, spawn, spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { delimiter, dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import YAML from 'yaml';

const root = fileURLToPath(new URL('..', import.meta.url));
const PACKAGES = [
  'packages/policy',
  'packages/protocol',
  'packages/sim',
  'packages/validate',
  'apps/router',
  'apps/mock-worker',
] as const;

interface Manifest {
  name: string;
  version: string;
  private?: boolean;
  license?: string;
  repository?: { url?: string; directory?: string };
  engines?: { node?: string };
  exports?: Record<string, Record<string, string>>;
  bin?: Record<string, string>;
  dependencies?: Record<string, string>;
}

let work = '';
let tarballs: { dir: string; file: string; manifest: Manifest; files: string[] }[] = [];
const app = () => join(work, 'app');
// Children must not inherit a source condition from the workspace's own runners.
const cleanEnv = (): NodeJS.ProcessEnv => {
  const env = { ...process.env };
  delete env.NODE_OPTIONS;
  return env;
};

function tarballFiles(file: string): string[] {
  return execFileSync('tar', ['tzf', file], { encoding: 'utf8' })
    .split('\n')
    .filter(Boolean)
    .map((f) => f.replace(/^package\//, ''));
}

beforeAll(() => {
  // turbo caches dist/ by input hash, so this is a no-op when `pnpm test` already built.
  execFileSync('pnpm', ['--silent', 'build'], { cwd: root, stdio: 'pipe', env: cleanEnv() });
  work = mkdtempSync(join(tmpdir(), 'kvroute-install-'));
  const packDir = join(work, 'tarballs');
  tarballs = PACKAGES.map((dir) => {
    const out = execFileSync('pnpm', ['pack', '--pack-destination', packDir], {
      cwd: join(root, dir),
      encoding: 'utf8',
      env: cleanEnv(),
    });
    const file = out.trim().split('\n').at(-1)?.trim() ?? '';
    const manifest = JSON.parse(
      execFileSync('tar', ['xzf', file, '-O', 'package/package.json'], { encoding: 'utf8' }),
    ) as Manifest;
    return { dir, file, manifest, files: tarballFiles(file) };
  });
  const spec = Object.fromEntries(tarballs.map((t) => [t.manifest.name, `file:${t.file}`]));
  execFileSync('mkdir', ['-p', app()]);
  writeFileSync(
    join(app(), 'package.json'),
    JSON.stringify({ name: 'kvroute-install-check', private: true, dependencies: spec }),
  );
  // The tarballs depend on each other by version (0.x, not on the registry): point those at
  // the local files. Install scripts are allowed or refused as the workspace decides (pnpm
  // refuses to install while one is undecided).
  const workspace = YAML.parse(readFileSync(join(root, 'pnpm-workspace.yaml'), 'utf8')) as {
    allowBuilds?: Record<string, boolean>;
  };
  writeFileSync(
    join(app(), 'pnpm-workspace.yaml'),
    YAML.stringify({ overrides: spec, allowBuilds: workspace.allowBuilds ?? {} }),
  );
  execFileSync('pnpm', ['install', '--prefer-offline', '--reporter=silent'], {
    cwd: app(),
    stdio: 'pipe',
    env: cleanEnv(),
  });
}, 600_000);

afterAll(() => {
  if (work) rmSync(work, { recursive: true, force: true });
}, 120_000);

describe('packed packages', () => {
  it('are publishable 0.x packages with license, repository, engines and exports', () => {
    const rootLicense = readFileSync(join(root, 'LICENSE'), 'utf8');
    expect(rootLicense).toContain('Apache License');
    for (const t of tarballs) {
      const m = t.manifest;
      expect(m.private, m.name).toBeUndefined();
      expect(m.version).toMatch(/^0\.\d+\.\d+$/);
      expect(m.license).toBe('Apache-2.0');
      expect(m.repository?.directory).toBe(t.dir);
      expect(m.engines?.node).toBe('^20.19.0 || >=22.12.0');
      expect(t.files).toContain('LICENSE');
      expect(t.files).toContain('README.md');
      expect(readFileSync(join(root, t.dir, 'LICENSE'), 'utf8')).toBe(rootLicense);
      // pnpm pack rewrote every workspace: range to a real version.
      for (const [dep, range] of Object.entries(m.dependencies ?? {})) {
        expect(range, `${m.name} -> ${dep}`).not.toMatch(/^workspace:/);
      }
      // Every published entry point (types and JS) is in the tarball; no source is.
      for (const [sub, conds] of Object.entries(m.exports ?? {})) {
        expect(Object.keys(conds), `${m.name} ${sub}`).toEqual(
          expect.arrayContaining(['types', 'default']),
        );
        expect(t.files, `${m.name} ${sub}`).toContain(conds.types?.replace(/^\.\//, ''));
        expect(t.files, `${m.name} ${sub}`).toContain(conds.default?.replace(/^\.\//, ''));
      }
      for (const bin of Object.values(m.bin ?? {}))
        expect(t.files).toContain(bin.replace(/^\.\//, ''));
      expect(
        t.files.filter((f) => f.startsWith('src/') || (f.endsWith('.ts') && !f.endsWith('.d.ts'))),
      ).toEqual([]);
    }
  });

  it('install without tsx and with type declarations a strict consumer can compile against', () => {
    expect(existsSync(join(app(), 'node_modules', '.pnpm'))).toBe(true);
    const installed = execFileSync('ls', [join(app(), 'node_modules', '.pnpm')], {
      encoding: 'utf8',
    });
    expect(installed).not.toMatch(/^tsx@/m);
    writeFileSync(
      join(app(), 'consumer.ts'),
      [
        "import { createDispatcher, type Decision } from '@kvroute/policy';",
        "import { simulatePlan } from '@kvroute/sim';",
        'export const uses: [typeof createDispatcher, typeof simulatePlan] = [createDispatcher, simulatePlan];',
        'export type D = Decision;',
        '',
      ].join('\n'),
    );
    writeFileSync(
      join(app(), 'tsconfig.json'),
      JSON.stringify({
        compilerOptions: {
          module: 'NodeNext',
          moduleResolution: 'NodeNext',
          target: 'ES2022',
          strict: true,
          noEmit: true,
          skipLibCheck: false,
          typeRoots: [join(root, 'node_modules', '@types')],
          types: ['node'],
        },
        files: ['consumer.ts'],
      }),
    );
    const tsc = spawnSync(join(root, 'node_modules', '.bin', 'tsc'), ['-p', '.'], {
      cwd: app(),
      encoding: 'utf8',
      env: cleanEnv(),
    });
    expect(tsc.stdout + tsc.stderr).toBe('');
    expect(tsc.status).toBe(0);
  }, 240_000);
});

const extraNodes = (process.env.KVROUTE_TEST_NODE_BINARIES ?? '').split(delimiter).filter(Boolean);

describe.each([process.execPath, ...extraNodes])('installed bins under %s', (node) => {
  // Through node_modules/.bin, as `npx kvroute-...` runs them: the shims call `node` from PATH.
  const env = (): NodeJS.ProcessEnv => ({
    ...cleanEnv(),
    PATH: `${join(app(), 'node_modules', '.bin')}${delimiter}${dirname(node)}${delimiter}${process.env.PATH}`,
  });
  const bin = (name: string) => join(app(), 'node_modules', '.bin', name);

  it('kvroute-sim scenarios lists the scenarios; a bad scenario exits 2 naming it', () => {
    const version = execFileSync(node, ['--version'], { encoding: 'utf8' }).trim();
    const ok = spawnSync(bin('kvroute-sim'), ['scenarios'], {
      cwd: app(),
      env: env(),
      encoding: 'utf8',
    });
    expect(ok.stderr).toBe('');
    expect(ok.status, version).toBe(0);
    expect(ok.stdout).toMatch(/^seed-sequential /m);
    const bad = spawnSync(bin('kvroute-sim'), ['run', '--scenario', 'nope'], {
      cwd: app(),
      env: env(),
      encoding: 'utf8',
    });
    expect(bad.status).toBe(2);
    expect(bad.stderr).toContain("unknown scenario 'nope'");
    expect(bad.stdout).toBe('');
    // `kvroute-sim validate` finds the installed kvroute-validate program, git-style.
    const validate = spawnSync(bin('kvroute-sim'), ['validate', '--help'], {
      cwd: app(),
      env: env(),
      encoding: 'utf8',
    });
    expect(validate.status, validate.stderr).toBe(0);
    expect(validate.stdout).toMatch(/^kvroute-sim validate --target URL/);
  });

  it('kvroute-router --mock-workers 2 serves a chat completion', async () => {
    const child = spawn(
      bin('kvroute-router'),
      ['--mock-workers', '2', '--port', '0', '--mock-time-scale', '0'],
      {
        cwd: app(),
        env: env(),
        stdio: ['ignore', 'pipe', 'pipe'],
      },
    );
    try {
      const url = await listeningUrl(
        child,
        /kvroute-router listening on (http:\/\/127\.0\.0\.1:\d+)/,
      );
      const res = await fetch(`${url}/v1/chat/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ messages: [{ role: 'user', content: 'hi' }], max_tokens: 8 }),
      });
      expect(res.status).toBe(200);
      const body = (await res.json()) as {
        choices: { message: { content: string } }[];
        usage: unknown;
      };
      expect(body.choices[0]?.message.content.length).toBeGreaterThan(0);
      expect(body.usage).toMatchObject({ completion_tokens: 8 });
    } finally {
      await stop(child);
    }
  });

  it('kvroute-mock-worker starts, prints its URL and answers /health', async () => {
    const child = spawn(
      bin('kvroute-mock-worker'),
      ['--time-scale', '0', '--dp-size', '2', '--port', '0'],
      {
        cwd: app(),
        env: env(),
        stdio: ['ignore', 'pipe', 'pipe'],
      },
    );
    try {
      const url = await listeningUrl(child, /listening on (http:\/\/127\.0\.0\.1:\d+)/);
      expect((await fetch(`${url}/health`)).status).toBe(200);
    } finally {
      await stop(child);
    }
  });
});

function listeningUrl(child: ChildProcess, pattern: RegExp): Promise<string> {
  return new Promise((resolve, reject) => {
    let out = '';
    const onData = (d: Buffer) => {
      out += d;
      const m = pattern.exec(out);
      if (m?.[1]) resolve(m[1]);
    };
    child.stdout?.on('data', onData);
    child.stderr?.on('data', onData);
    child.once('exit', (code) => reject(new Error(`exited ${code} before listening: ${out}`)));
  });
}

function stop(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null) return Promise.resolve();
  return new Promise((resolve) => {
    child.once('exit', () => resolve());
    child.kill('SIGTERM');
  });
}
