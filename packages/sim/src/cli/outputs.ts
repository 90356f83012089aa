// Where a command's results go: the table on stdout, and --json/--csv/--html files, any one
// of which may be `-` for stdout. With a `-`, stdout carries that format only (no table, no
// notes), so `kvroute-sim run ... --json - | jq` always parses.
import { mkdirSync, writeFileSync } from 'node:fs';
import { dirname, resolve } from 'node:path';
import type { CliIo } from './command.ts';
import { UsageError } from './errors.ts';

export interface OutputTargets {
  json?: string;
  csv?: string;
  html?: string;
}

export function checkTargets(t: OutputTargets): void {
  const toStdout = (['json', 'csv', 'html'] as const).filter((k) => t[k] === '-');
  if (toStdout.length > 1) {
    throw new UsageError(
      `only one of --json, --csv, --html can be '-' (stdout); got ${toStdout.map((k) => `--${k} -`).join(' and ')}`,
    );
  }
  for (const k of ['json', 'csv', 'html'] as const) {
    if (t[k] !== undefined && t[k]!.trim() === '')
      throw new UsageError(`--${k} needs a file name or '-'`);
  }
}

export function stdoutIsData(t: OutputTargets): boolean {
  return t.json === '-' || t.csv === '-' || t.html === '-';
}

export interface Renderers {
  table(): string;
  json(): string;
  csv(): string;
  html(): Promise<string>;
}

/**
 * Writes one output of flag `--kind`: '-' to stdout, else the file (its directory made), then
 * a note on stderr (default `wrote KIND to PATH`).
 */
export function writeOutput(
  io: CliIo,
  kind: string,
  target: string,
  text: string,
  note: (path: string) => string = (path) => `wrote ${kind.toUpperCase()} to ${path}`,
): void {
  if (target === '-') {
    io.stdout.write(text);
    return;
  }
  const path = resolve(io.cwd, target);
  try {
    mkdirSync(dirname(path), { recursive: true });
    writeFileSync(path, text);
  } catch (err) {
    throw new UsageError(`cannot write --${kind} file ${path}: ${(err as Error).message}`);
  }
  io.stderr.write(`${note(path)}\n`);
}

export async function emit(io: CliIo, t: OutputTargets, r: Renderers): Promise<void> {
  if (!stdoutIsData(t)) io.stdout.write(r.table());
  for (const kind of ['json', 'csv', 'html'] as const) {
    const target = t[kind];
    if (target === undefined) continue;
    const text = kind === 'html' ? await r.html() : kind === 'json' ? r.json() : r.csv();
    writeOutput(io, kind, target, text);
  }
}
