// Entry point of the `kvroute-validate` command; `kvroute-sim validate` runs this program and
// names itself in KVROUTE_PROG so messages quote what the user typed.
import { runSubcommand } from '@kvroute/sim/cli';
import { command } from './command.ts';

process.stdout.on('error', (err: NodeJS.ErrnoException) => {
  if (err.code === 'EPIPE') process.exit(0);
  throw err;
});

const argv = process.argv.slice(2);
process.exitCode = await runSubcommand(
  process.env.KVROUTE_PROG || 'kvroute-validate',
  command,
  argv,
  {
    stdout: process.stdout,
    stderr: process.stderr,
    // `pnpm validate ...` at the repo root: resolve relative paths from where the user typed it.
    cwd: (process.env.npm_lifecycle_event === 'validate' && process.env.INIT_CWD) || process.cwd(),
  },
);
