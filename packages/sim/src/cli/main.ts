// `kvroute-sim <command> [flags]`: finds the subcommand, runs it, and turns errors into
// exit codes: 0 ok, 2 bad input (message on stderr, no stack), 1 anything else (a bug).
import type { CliIo, Subcommand } from './command.ts';
import { isInputError, UsageError } from './errors.ts';
import { commands, findCommand } from './registry.ts';

const PROG = 'kvroute-sim';

export function globalUsage(): string {
  const width = Math.max(...commands.map((c) => c.name.length));
  return [
    `usage: ${PROG} <command> [flags]`,
    '',
    'commands:',
    ...commands.map((c) => `  ${c.name.padEnd(width)}  ${c.summary}`),
    '',
    `Run '${PROG} <command> --help' for a command's flags.`,
    '',
  ].join('\n');
}

/**
 * pnpm passes the `--` of `pnpm sim -- scenarios` (or `pnpm start -- --ranks 8`) through to
 * the program; a leading one is the separator the user meant for pnpm, not an argument.
 */
export function dropLeadingDashDash(argv: readonly string[]): readonly string[] {
  return argv[0] === '--' ? argv.slice(1) : argv;
}

export async function runCli(args: readonly string[], io: CliIo): Promise<number> {
  const [name, ...rest] = dropLeadingDashDash(args);
  if (name === undefined) {
    io.stderr.write(globalUsage());
    return 2;
  }
  if (name === '--help' || name === '-h' || name === 'help') {
    const target = name === 'help' ? rest[0] : undefined;
    if (target === undefined) {
      io.stdout.write(globalUsage());
      return 0;
    }
    const entry = findCommand(target);
    if (!entry) return unknownCommand(target, io);
    const cmd = await entry.load();
    if (cmd.ownsHelp) return runSubcommand(`${PROG} ${target}`, cmd, ['--help'], io);
    io.stdout.write(cmd.usage);
    return 0;
  }
  const entry = findCommand(name);
  if (!entry) return unknownCommand(name, io);
  return runSubcommand(`${PROG} ${name}`, await entry.load(), rest, io);
}

/**
 * Runs one subcommand as a whole program named `prog`: `--help` prints its usage, bad input
 * exits 2 with the message (no stack), anything else exits 1 as a bug. Other bins built on
 * the simulator (kvroute-validate) run their command through this too.
 */
export async function runSubcommand(
  prog: string,
  cmd: Subcommand,
  argv: readonly string[],
  io: CliIo,
): Promise<number> {
  argv = dropLeadingDashDash(argv);
  if (!cmd.ownsHelp && (argv.includes('--help') || argv.includes('-h'))) {
    io.stdout.write(cmd.usage);
    return 0;
  }
  try {
    return await cmd.run(argv, io);
  } catch (err) {
    if (isInputError(err)) {
      const hint = err instanceof UsageError ? `\nRun '${prog} --help' for usage.` : '';
      io.stderr.write(`${prog}: error: ${err.message}${hint}\n`);
      return 2;
    }
    const detail = err instanceof Error ? (err.stack ?? err.message) : String(err);
    io.stderr.write(`${prog}: internal error (please report): ${detail}\n`);
    return 1;
  }
}

function unknownCommand(name: string, io: CliIo): number {
  io.stderr.write(
    `${PROG}: unknown command '${name}'; valid commands: ${commands.map((c) => c.name).join(', ')}\n`,
  );
  return 2;
}
