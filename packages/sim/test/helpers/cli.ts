// Runs a CLI in-process with streams that collect what it writes. The sim's own tests and the
// cross-package ones at the repository root (by relative path) share it.
import { expect } from 'vitest';
import type { CliIo } from '../../src/cli/command.ts';
import { runCli } from '../../src/cli/main.ts';

export interface Captured {
  stdout: string;
  stderr: string;
}

export interface CaptureOptions {
  /** What stderr says it is: the progress bar is drawn only on a terminal. Default false. */
  tty?: boolean;
  now?: () => number;
}

/** Streams for runCli (or validate's runValidate, which takes the same) that write to `out`. */
export function captureIo(cwd: string, opts: CaptureOptions = {}): { out: Captured; io: CliIo } {
  const out: Captured = { stdout: '', stderr: '' };
  return {
    out,
    io: {
      stdout: { write: (s: string) => (out.stdout += s) },
      stderr: { write: (s: string) => (out.stderr += s), isTTY: opts.tty ?? false },
      cwd,
      ...(opts.now ? { now: opts.now } : {}),
    },
  };
}

/** `kvroute-sim ARGS` run in `cwd`: its exit code and everything it wrote. */
export async function runSimCli(
  args: readonly string[],
  cwd: string = process.cwd(),
  opts: CaptureOptions = {},
): Promise<Captured & { code: number }> {
  const { out, io } = captureIo(cwd, opts);
  const code = await runCli(args, io);
  return { code, stdout: out.stdout, stderr: out.stderr };
}

/**
 * `kvroute-sim ARGS` as one step of a longer test: its stdout printed (the test's log shows
 * every step's report), and an exit other than 0 a failure that shows its stderr.
 */
export async function simStep(args: readonly string[], cwd: string): Promise<void> {
  const r = await runSimCli(args, cwd);
  console.log(r.stdout);
  expect(r.code, r.stderr).toBe(0);
}
