// `kvroute-sim <command> [flags]`: finds the subcommand, runs it, and turns errors into
// exit codes: 0 ok, 2 bad input (message on stderr, no stack), 1 anything else (a bug).
import type { CliIo } from './command.ts';
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

export async function runCli(argv: readonly string[], io: CliIo): Promise<number> {
  const [name, ...rest] = argv;
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
    io.stdout.write((await entry.load()).usage);
    return 0;
  }
  const entry = findCommand(name);
  if (!entry) return unknownCommand(name, io);
  const cmd = await entry.load();
  if (rest.includes('--help') || rest.includes('-h')) {
    io.stdout.write(cmd.usage);
    return 0;
  }
  try {
    return await cmd.run(rest, io);
  } catch (err) {
    if (isInputError(err)) {
      const hint = err instanceof UsageError ? `\nRun '${PROG} ${name} --help' for usage.` : '';
      io.stderr.write(`${PROG} ${name}: error: ${err.message}${hint}\n`);
      return 2;
    }
    const detail = err instanceof Error ? (err.stack ?? err.message) : String(err);
    io.stderr.write(`${PROG} ${name}: internal error (please report): ${detail}\n`);
    return 1;
  }
}

function unknownCommand(name: string, io: CliIo): number {
  io.stderr.write(
    `${PROG}: unknown command '${name}'; valid commands: ${commands.map((c) => c.name).join(', ')}\n`,
  );
  return 2;
}
