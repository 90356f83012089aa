// Entry point of the `kvroute-sim` command (bin/kvroute-sim.mjs runs this through tsx).
// Everything else lives in ./cli/ so tests can drive runCli in-process.
import { runCli } from './cli/main.ts';

process.exitCode = await runCli(process.argv.slice(2), {
  stdout: process.stdout,
  stderr: process.stderr,
  cwd: process.cwd(),
});
