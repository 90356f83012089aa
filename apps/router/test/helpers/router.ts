// A router built from command-line flags, listening on loopback for a test: its URL, and
// the cleanups that close it (its listener and any kept-alive client connection).
import { type ChildProcessByStdio, spawn } from 'node:child_process';
import type { Readable } from 'node:stream';
import { fileURLToPath } from 'node:url';
import type { FastifyInstance } from 'fastify';
import { resolveConfig } from '../../src/config.ts';
import { buildRouter } from '../../src/router.ts';

export async function listenRouter(
  flags: string[],
  cleanups: (() => Promise<void> | void)[],
): Promise<{ app: FastifyInstance; url: string }> {
  const app = buildRouter(resolveConfig(flags));
  cleanups.push(() => app.close());
  await app.listen({ host: '127.0.0.1', port: 0 });
  cleanups.push(async () => app.server.closeAllConnections());
  return { app, url: `http://127.0.0.1:${(app.server.address() as { port: number }).port}` };
}

/** Flags that turn the router's active health and generation checks off (tests drive faults). */
export const NO_ACTIVE_CHECKS = [
  '--health-check-interval-ms',
  '0',
  '--generation-check-interval-ms',
  '0',
] as const;

/**
 * The router's entry point from source in a child process, as `pnpm router` runs it (cwd
 * apps/router): what it wrote so far (stdout and stderr together, and stderr alone) and its
 * exit code. Killed by the cleanups when given.
 */
export function spawnRouterSource(
  args: string[],
  opts: { env?: NodeJS.ProcessEnv; cleanups?: (() => Promise<void> | void)[] } = {},
): {
  child: ChildProcessByStdio<null, Readable, Readable>;
  output: () => string;
  stderr: () => string;
  exited: Promise<number | null>;
} {
  const child = spawn(
    process.execPath,
    ['--conditions=@kvroute/source', '--import', 'tsx', 'src/server.ts', ...args],
    {
      cwd: fileURLToPath(new URL('../..', import.meta.url)),
      env: opts.env ?? process.env,
      stdio: ['ignore', 'pipe', 'pipe'],
    },
  );
  opts.cleanups?.push(async () => {
    child.kill('SIGKILL');
  });
  let out = '';
  let err = '';
  child.stdout.on('data', (d) => {
    out += d;
  });
  child.stderr.on('data', (d) => {
    out += d;
    err += d;
  });
  const exited = new Promise<number | null>((r) => child.once('exit', (code) => r(code)));
  return { child, output: () => out, stderr: () => err, exited };
}
