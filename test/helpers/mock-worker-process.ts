// A mock worker in a process of its own, from its TypeScript source with the workspace
// packages resolved to theirs too: the harness's work (streams, JSON) then does not delay the
// worker's step timers, and the other way round.
import { type ChildProcess, spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';

const SERVER = fileURLToPath(new URL('../../apps/mock-worker/src/server.ts', import.meta.url));

/**
 * Starts `kvroute-mock-worker FLAGS` and resolves with its URL once it listens; the child is
 * pushed on `children` for the caller to end.
 */
export async function spawnMockWorker(
  flags: readonly string[],
  children: ChildProcess[],
): Promise<string> {
  const args = ['--conditions=@kvroute/source', '--import', 'tsx', SERVER, ...flags];
  const child = spawn(process.execPath, args, { stdio: ['ignore', 'pipe', 'inherit'] });
  children.push(child);
  return await new Promise<string>((ok, fail) => {
    let out = '';
    child.stdout!.on('data', (d: Buffer) => {
      out += d.toString();
      const m = /listening on (http:\/\/[\d.]+:\d+)/.exec(out);
      if (m) ok(m[1]!);
    });
    child.on('exit', (code) => fail(new Error(`mock worker exited (${code}): ${out}`)));
  });
}
