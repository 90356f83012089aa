// `kvroute-sim validate` is carried out by this package's `kvroute-validate` program: the
// simulator's CLI finds the program and passes arguments, output and exit code through.
import { fileURLToPath } from 'node:url';
import { type CliIo, runCli } from '@kvroute/sim/cli';
import { describe, expect, it } from 'vitest';

function captureIo(): CliIo & { out: () => string; err: () => string } {
  let out = '';
  let err = '';
  return {
    stdout: { write: (s: string) => (out += s) },
    stderr: { write: (s: string) => (err += s) },
    cwd: fileURLToPath(new URL('../', import.meta.url)),
    out: () => out,
    err: () => err,
  };
}

describe('kvroute-sim validate', () => {
  it('prints the validate flags for --help', async () => {
    const io = captureIo();
    expect(await runCli(['validate', '--help'], io)).toBe(0);
    expect(io.out()).toMatch(/^kvroute-sim validate --target URL/);
    expect(io.out()).toContain('--target');
    // A child process through tsx: seconds on a loaded machine.
  }, 60_000);

  it('reports bad input as exit 2 under the name the user typed', async () => {
    const io = captureIo();
    expect(await runCli(['validate', '--scenario', 'seed-sequential'], io)).toBe(2);
    expect(io.err()).toMatch(/^kvroute-sim validate: error: .*--target/);
  }, 60_000);
});
