// Entry point of the `kvroute-sim` command (bin/kvroute-sim.mjs runs it, or its compiled form).
// Everything else lives in ./cli/ so tests can drive runCli in-process.
import { runCli } from './cli/main.ts';

// `pnpm sim ...` runs at the repo root; resolve relative paths from where the user typed it
// (pnpm's INIT_CWD), as if the CLI had been run there directly.
const viaPnpmSim = process.env.npm_lifecycle_event === 'sim' && process.env.INIT_CWD;

// `kvroute-sim ... --json - | head` closes the pipe early: that is the reader's choice, not
// an error worth a stack trace.
process.stdout.on('error', (err: NodeJS.ErrnoException) => {
  if (err.code === 'EPIPE') process.exit(0);
  throw err;
});

process.exitCode = await runCli(process.argv.slice(2), {
  stdout: process.stdout,
  stderr: process.stderr,
  cwd: viaPnpmSim || process.cwd(),
});
