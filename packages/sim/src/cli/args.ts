// Flag parsing on node:util parseArgs, plus the value checks every subcommand shares.
// Every failure is a UsageError naming the flag and the bad value.
import { type ParseArgsConfig, parseArgs } from 'node:util';
import { parseNumber, parseScalar, parseAssignments as policyAssignments } from '@kvroute/policy';
import { UsageError } from './errors.ts';

export type OptionSpec = NonNullable<ParseArgsConfig['options']>;

export interface Parsed {
  values: Record<string, string | boolean | (string | boolean)[] | undefined>;
  positionals: string[];
}

export function parseCommandArgs(
  command: string,
  argv: readonly string[],
  options: OptionSpec,
  allowPositionals = false,
): Parsed {
  try {
    const { values, positionals } = parseArgs({
      args: [...argv],
      options: { ...options, help: { type: 'boolean', short: 'h' } },
      strict: true,
      allowPositionals,
    });
    return { values: values as Parsed['values'], positionals };
  } catch (err) {
    // parseArgs messages are clear ("Unknown option '--foo'") but mention JS APIs in places.
    const msg =
      err instanceof Error
        ? err.message.replace(/\. To specify a positional argument.*$/s, '')
        : String(err);
    throw new UsageError(msg, command);
  }
}

export function str(p: Parsed, flag: string): string | undefined {
  const v = p.values[flag];
  if (Array.isArray(v)) return v.length > 0 ? String(v[v.length - 1]) : undefined;
  return typeof v === 'string' ? v : undefined;
}

export function strs(p: Parsed, flag: string): string[] {
  const v = p.values[flag];
  if (v === undefined) return [];
  return (Array.isArray(v) ? v : [v]).map(String);
}

export function bool(p: Parsed, flag: string): boolean {
  return p.values[flag] === true;
}

function toNumber(flag: string, raw: string): number {
  const n = parseNumber(raw);
  if (n === undefined) throw new UsageError(`--${flag} must be a number, got '${raw}'`);
  return n;
}

export function positiveInt(flag: string, raw: string): number {
  const n = toNumber(flag, raw);
  if (!Number.isInteger(n) || n < 1)
    throw new UsageError(`--${flag} must be a positive integer, got '${raw}'`);
  return n;
}

export function positiveNumber(flag: string, raw: string): number {
  const n = toNumber(flag, raw);
  if (n <= 0) throw new UsageError(`--${flag} must be a positive number, got '${raw}'`);
  return n;
}

export function nonNegativeNumber(flag: string, raw: string): number {
  const n = parseNumber(raw);
  if (n === undefined || n < 0) {
    throw new UsageError(`--${flag} must be a number >= 0, got '${raw}'`);
  }
  return n;
}

/** A comma-separated list of positive integers, e.g. `--window 64,128,256`. */
export function positiveIntList(flag: string, raw: string): number[] {
  const parts = raw.split(',').map((s) => s.trim());
  if (parts.some((s) => s === ''))
    throw new UsageError(
      `--${flag} must be a comma-separated list of positive integers, got '${raw}'`,
    );
  const out = parts.map((s) => positiveInt(flag, s));
  return [...new Set(out)];
}

/** A comma-separated list of names; empty entries are an error. */
export function nameList(flag: string, raw: string): string[] {
  const parts = raw.split(',').map((s) => s.trim());
  if (parts.length === 0 || parts.some((s) => s === '')) {
    throw new UsageError(`--${flag} must be a comma-separated list of names, got '${raw}'`);
  }
  return parts;
}

/** Checks `name` against the valid names, listing them on failure. */
export function checkName(kind: string, name: string, valid: readonly string[]): string {
  if (!valid.includes(name)) {
    const plural = kind.endsWith('y') ? `${kind.slice(0, -1)}ies` : `${kind}s`;
    throw new UsageError(`unknown ${kind} '${name}'; valid ${plural}: ${valid.join(', ')}`);
  }
  return name;
}

/**
 * Plain values from `key=value` strings: `true`/`false` become booleans, decimal numerals
 * numbers, anything else stays a string (the policy's one strict scalar parser: no hex, no
 * Infinity). The scenario validates what it receives.
 */
export function parseValue(raw: string): string | number | boolean {
  return parseScalar(raw);
}

/** `key=value` items as an object; keys are plain names (never `__proto__`). */
export function parseAssignments(
  flag: string,
  items: readonly string[],
): Record<string, string | number | boolean> {
  try {
    return { ...policyAssignments(`--${flag}`, items) };
  } catch (err) {
    throw new UsageError((err as Error).message);
  }
}

/** Seeds that look like integers are numbers (so `--seed 7` and the API's seed 7 agree). */
export function parseSeed(raw: string | undefined, fallback: number): string | number {
  if (raw === undefined) return fallback;
  if (raw.trim() === '') throw new UsageError(`--seed must not be empty`);
  return /^-?\d+$/.test(raw) && Number.isSafeInteger(Number(raw)) ? Number(raw) : raw;
}
