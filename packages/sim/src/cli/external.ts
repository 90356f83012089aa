// A subcommand carried out by another package's program, the way `git foo` runs `git-foo`:
// `kvroute-sim validate` runs the `kvroute-validate` bin of @kvroute/validate. The other
// package depends on the simulator, so the simulator must not import it; it finds the program
// at run time instead and passes the arguments, the working directory and the exit code through.
import { spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { constants } from 'node:os';
import { delimiter, dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { CliIo, Subcommand } from './command.ts';
import { UsageError } from './errors.ts';

export interface ExternalCommandSpec {
  name: string;
  summary: string;
  /** The program's bin name, e.g. 'kvroute-validate'. */
  bin: string;
  /** The npm package that ships it, named in the error when it is not installed. */
  packageName: string;
}

/** Where `bin` is: PATH, then node_modules/.bin above the cwd and above this file, then a
 * bundled `<bin>.mjs` beside the running script. Undefined when none exists. */
export function findProgram(bin: string, cwd: string, env = process.env): string | undefined {
  for (const dir of (env.PATH ?? '').split(delimiter)) {
    if (dir && existsSync(join(dir, bin))) return join(dir, bin);
  }
  const here = dirname(fileURLToPath(import.meta.url));
  for (const start of [cwd, here]) {
    for (let dir = resolve(start); ; dir = dirname(dir)) {
      const candidate = join(dir, 'node_modules', '.bin', bin);
      if (existsSync(candidate)) return candidate;
      if (dirname(dir) === dir) break;
    }
  }
  const script = process.argv[1];
  if (script) {
    const bundled = join(dirname(script), `${bin}.mjs`);
    if (existsSync(bundled)) return bundled;
  }
  return undefined;
}

export function externalCommand(spec: ExternalCommandSpec): Subcommand {
  return {
    name: spec.name,
    summary: spec.summary,
    usage: `usage: kvroute-sim ${spec.name} [flags]   (runs ${spec.bin} from ${spec.packageName}; '${spec.bin} --help' for its flags)\n`,
    ownsHelp: true,
    run: (argv, io) => runProgram(spec, argv, io),
  };
}

function runProgram(
  spec: ExternalCommandSpec,
  argv: readonly string[],
  io: CliIo,
): Promise<number> {
  const program = findProgram(spec.bin, io.cwd);
  if (program === undefined) {
    throw new UsageError(
      `'${spec.name}' is carried out by ${spec.bin}, which is not installed: add ${spec.packageName} next to @kvroute/sim (it ships the ${spec.bin} bin)`,
    );
  }
  // A bundled .mjs runs under this same node; an installed bin is its own launcher.
  const [cmd, args] = program.endsWith('.mjs')
    ? [process.execPath, [program, ...argv]]
    : [program, [...argv]];
  // On the real terminal the program writes there itself (its progress bar needs the TTY);
  // in-process callers (tests) get the output through their own streams.
  const direct = io.stdout === process.stdout && io.stderr === process.stderr;
  return new Promise((resolveCode, reject) => {
    const child = spawn(cmd, args, {
      cwd: io.cwd,
      // Messages then name the command as the user typed it.
      env: { ...process.env, KVROUTE_PROG: `kvroute-sim ${spec.name}` },
      stdio: direct ? 'inherit' : ['inherit', 'pipe', 'pipe'],
    });
    child.stdout?.setEncoding('utf8').on('data', (chunk: string) => io.stdout.write(chunk));
    child.stderr?.setEncoding('utf8').on('data', (chunk: string) => io.stderr.write(chunk));
    child.on('error', reject);
    child.on('close', (code, signal) =>
      resolveCode(code ?? 128 + (signal ? (constants.signals[signal] ?? 0) : 0)),
    );
  });
}
