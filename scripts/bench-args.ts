// The shared front door of the benchmarks' command lines: --help prints the usage, and any
// argument the benchmark does not know is an error naming it (exit 2), instead of being
// ignored or read as something else. Each benchmark still reads its own values.
import { type ParseArgsConfig, parseArgs } from 'node:util';

export function checkBenchArgs(
  usage: string,
  known: { values?: readonly string[]; flags?: readonly string[] },
  argv: readonly string[] = process.argv.slice(2),
): void {
  // pnpm passes its own `--` through.
  const args = argv.filter((a) => a !== '--');
  if (args.includes('--help') || args.includes('-h')) {
    console.log(usage);
    process.exit(0);
  }
  const values = new Set(known.values ?? []);
  const flags = new Set(known.flags ?? []);
  for (let i = 0; i < args.length; i++) {
    const a = args[i]!;
    if (flags.has(a)) continue;
    if (values.has(a)) {
      if (args[i + 1] === undefined) {
        console.error(`${a} needs a value\n\n${usage}`);
        process.exit(2);
      }
      i++;
      continue;
    }
    console.error(`unknown argument '${a}'\n\n${usage}`);
    process.exit(2);
  }
}

/** A flag's value as a positive number, or an error naming the flag (exit 2). */
export function positiveArg(flag: string, value: string, usage: string): number {
  const n = Number(value);
  if (!Number.isFinite(n) || n <= 0) {
    console.error(`--${flag} must be a positive number, got '${value}'\n\n${usage}`);
    process.exit(2);
  }
  return n;
}

/**
 * node:util parseArgs over the benchmark's arguments (pnpm's `--` dropped), with the
 * front-door rules: `options` must declare `help` (-h), which prints `usage` and exits 0; a
 * flag parseArgs refuses is an error naming it, followed by the usage (exit 2).
 */
export function parseBenchOptions<T extends ParseArgsConfig>(
  usage: string,
  config: T,
): ReturnType<typeof parseArgs<T>>['values'] {
  let values: ReturnType<typeof parseArgs<T>>['values'];
  try {
    values = parseArgs({ ...config, args: process.argv.slice(2).filter((a) => a !== '--') }).values;
  } catch (err) {
    console.error(`${(err as Error).message}\n\n${usage}`);
    process.exit(2);
  }
  if ((values as { help?: boolean }).help === true) {
    console.log(usage);
    process.exit(0);
  }
  return values;
}
