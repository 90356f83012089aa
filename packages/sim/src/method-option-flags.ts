// Method option flags for every command that runs policies (run, replay, compare): one flag
// per option of any registered method, its value parsed by the policy's strict parser, and the
// help lines, all derived from the methods' option schemas. Outside cli/ because compare uses
// it too; bad values are PolicyConfigErrors, which every command reports as bad input (exit 2).
import type { ParseArgsConfig } from 'node:util';
import {
  describeRange,
  isNumericOption,
  type MethodOptionEntry,
  methodOptionCatalog,
  PolicyConfigError,
  parseNumber,
} from '@kvroute/policy';

/** Method options by name, as the shared policy flags carry them. */
export type MethodOptionFlags = Record<string, number | string>;

/** One flag per option of any registered method (`--window`, `--max-prefix-tokens`, ...). */
export function methodOptionFlags(): NonNullable<ParseArgsConfig['options']> {
  const out: NonNullable<ParseArgsConfig['options']> = {};
  for (const e of methodOptionCatalog()) out[e.flag] = { type: 'string' };
  return out;
}

/** Help lines for methodOptionFlags, from the methods' schemas: one line per reading method. */
export function methodOptionsHelp(): string {
  const lines: string[] = [];
  for (const e of methodOptionCatalog()) {
    const head = `  --${e.flag} ${isNumericOption(e) ? 'N' : 'WORD'}`;
    Object.entries(e.specs).forEach(([method, spec], i) => {
      const text = `${method}: ${spec.doc} (default ${spec.default}, ${describeRange(spec)})`;
      const lead = i === 0 ? head : '';
      lines.push(
        lead.length < 24 ? `${lead.padEnd(24)}${text}` : `${lead}\n${' '.repeat(24)}${text}`,
      );
    });
  }
  return lines.join('\n');
}

/**
 * A method option flag's value, checked against the loosest spec of the methods that read it
 * (each method checks its own range when its dispatcher is built).
 */
export function methodOptionValue(entry: MethodOptionEntry, raw: string): number | string {
  const specs = Object.values(entry.specs);
  if (!isNumericOption(entry)) {
    const choices = [...new Set(specs.flatMap((s) => (s.type === 'enum' ? s.choices : [])))];
    if (!choices.includes(raw)) {
      throw new PolicyConfigError(
        `--${entry.flag} must be one of ${choices.join(', ')}, got '${raw}'`,
      );
    }
    return raw;
  }
  const n = parseNumber(raw);
  if (n === undefined)
    throw new PolicyConfigError(`--${entry.flag} must be a number, got '${raw}'`);
  const min = Math.min(...specs.map((s) => (s.type === 'enum' ? 0 : s.min)));
  const integral = specs.every((s) => s.type === 'int');
  if (integral && min >= 1 && (!Number.isInteger(n) || n < 1)) {
    throw new PolicyConfigError(`--${entry.flag} must be a positive integer, got '${raw}'`);
  }
  if ((integral && !Number.isInteger(n)) || n < min) {
    const spec = specs[0] as (typeof specs)[number];
    throw new PolicyConfigError(
      `--${entry.flag} must be ${describeRange({ ...spec, min } as never)}, got '${raw}'`,
    );
  }
  return n;
}

/** The method option flags given on the command line, as PolicyFlags entries. */
export function readMethodOptionFlags(
  get: (flag: string) => string | undefined,
): MethodOptionFlags {
  const out: MethodOptionFlags = {};
  for (const e of methodOptionCatalog()) {
    const raw = get(e.flag);
    if (raw !== undefined) out[e.name] = methodOptionValue(e, raw);
  }
  return out;
}
