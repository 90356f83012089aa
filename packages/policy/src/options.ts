// Method options: one typed schema per method (name, type, default, range, one-line doc), and
// the one strict parser for the values that CLI flags, environment variables, KEY=VALUE lists
// and YAML hand over. Every host derives its flags, sweep axes, env names, YAML keys and help
// from these schemas, so a method's options are described once.
//
// Strict on purpose: a number is a plain decimal numeral (`256`, `0.25`, `1e6`, `-3`), never
// hex, octal, binary, `Infinity`, `NaN`, an empty string or digits with separators, because
// `Number()` accepts several of those and a typo must not become a silently different
// setting. KEY=VALUE keys must be plain names, never `__proto__`, `constructor` or
// `prototype`, so no user input can reach an object's prototype.
import { PolicyConfigError, PolicyRangeError } from './errors.ts';

/** An integer or real option, with an inclusive range. */
export interface NumericOptionSpec {
  readonly type: 'int' | 'number';
  readonly default: number;
  /** Smallest valid value (inclusive). */
  readonly min: number;
  /** Largest valid value (inclusive); absent = no bound. */
  readonly max?: number;
  /** One line, for help texts and READMEs. */
  readonly doc: string;
  /** Values a sweep tries when it is given no axis for this option; absent: held at the default. */
  readonly sweep?: readonly number[];
}

/** A choice among fixed words. */
export interface EnumOptionSpec {
  readonly type: 'enum';
  readonly choices: readonly string[];
  readonly default: string;
  readonly doc: string;
  /** Values a sweep tries when it is given no axis for this option; absent: held at the default. */
  readonly sweep?: readonly string[];
}

export type OptionSpec = NumericOptionSpec | EnumOptionSpec;

/** A method's options by name (camelCase, as configs and `options` objects spell them). */
export type OptionsSchema = Readonly<Record<string, OptionSpec>>;

/** The parsed values of a schema: numbers for numeric options, the choice for enums. */
export type OptionValues<S extends OptionsSchema> = {
  -readonly [K in keyof S]: S[K] extends EnumOptionSpec ? S[K]['choices'][number] : number;
};

const DECIMAL = /^[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?$/;
const KEY = /^[A-Za-z_][A-Za-z0-9_.-]*$/;
const FORBIDDEN_KEYS: ReadonlySet<string> = new Set(['__proto__', 'constructor', 'prototype']);

/**
 * A finite number from a decimal numeral (surrounding spaces allowed), or undefined when the
 * text is anything else: hex/octal/binary, Infinity, NaN, empty, `1_000`, `12px`.
 */
export function parseNumber(text: string): number | undefined {
  const t = text.trim();
  if (!DECIMAL.test(t)) return undefined;
  const n = Number(t);
  return Number.isFinite(n) ? n : undefined;
}

/**
 * A KEY=VALUE value typed as YAML would type a plain scalar: `true`/`false` booleans, decimal
 * numerals numbers (strictly, see parseNumber), anything else the string as given.
 */
export function parseScalar(text: string): string | number | boolean {
  if (text === 'true') return true;
  if (text === 'false') return false;
  return parseNumber(text) ?? text;
}

/** Whether `key` may name an option: a plain name, never a prototype key. */
export function isOptionKey(key: string): boolean {
  return KEY.test(key) && !FORBIDDEN_KEYS.has(key);
}

/**
 * `KEY=VALUE` items (from repeated flags, env lists, `name:k=v:k=v` entries) as an object
 * without a prototype chain. `what` names the source in errors (e.g. `--set`). A key given
 * twice keeps the last value, as repeated flags do.
 */
export function parseAssignments(
  what: string,
  items: readonly string[],
): Record<string, string | number | boolean> {
  const out: Record<string, string | number | boolean> = Object.create(null);
  for (const item of items) {
    const eq = item.indexOf('=');
    if (eq <= 0) throw new PolicyConfigError(`${what} expects KEY=VALUE, got '${item}'`);
    const key = item.slice(0, eq).trim();
    if (!isOptionKey(key)) {
      throw new PolicyConfigError(
        `${what}: invalid key '${key}' in '${item}' (a name of letters, digits, _ . -; not __proto__, constructor or prototype)`,
      );
    }
    out[key] = parseScalar(item.slice(eq + 1));
  }
  return out;
}

function describe(value: unknown): string {
  return typeof value === 'string' ? `'${value}'` : String(value);
}

/** The valid range of a numeric spec, in words: `an integer >= 1`, `a number in [0, 1]`. */
export function describeRange(spec: OptionSpec): string {
  if (spec.type === 'enum') return `one of ${spec.choices.join(', ')}`;
  const kind = spec.type === 'int' ? 'an integer' : 'a number';
  return spec.max === undefined
    ? `${kind} >= ${spec.min}`
    : `${kind} in [${spec.min}, ${spec.max}]`;
}

/**
 * One option's value checked against its spec: numbers or strict numeric strings for
 * numeric options (range and integrality checked), one of the choices for enums.
 * Throws PolicyRangeError (numbers) or PolicyConfigError (choices) naming `owner: field`.
 */
export function readOption(
  owner: string,
  field: string,
  spec: OptionSpec,
  raw: unknown,
): number | string {
  if (spec.type === 'enum') {
    if (typeof raw !== 'string' || !spec.choices.includes(raw)) {
      throw new PolicyConfigError(
        `${owner}: ${field} must be ${describeRange(spec)}, got ${describe(raw)}`,
      );
    }
    return raw;
  }
  const value = typeof raw === 'string' ? parseNumber(raw) : raw;
  const ok =
    typeof value === 'number' &&
    Number.isFinite(value) &&
    (spec.type === 'number' || Number.isInteger(value)) &&
    value >= spec.min &&
    (spec.max === undefined || value <= spec.max);
  if (!ok) {
    throw new PolicyRangeError(
      field,
      `${owner}: ${field} must be ${describeRange(spec)}, got ${describe(raw)}`,
    );
  }
  return value as number;
}

/**
 * Every option of `schema` from `raw` (absent or null: the default), checked. Unknown names
 * are the dispatcher's business (it knows which belong to other methods).
 */
export function readOptions<S extends OptionsSchema>(
  owner: string,
  schema: S,
  raw: Record<string, unknown>,
): OptionValues<S> {
  const out: Record<string, number | string> = {};
  for (const [field, spec] of Object.entries(schema)) {
    const value = Object.hasOwn(raw, field) ? raw[field] : undefined;
    out[field] =
      value === undefined || value === null ? spec.default : readOption(owner, field, spec, value);
  }
  return out as OptionValues<S>;
}

/** An integer option >= `min` (and <= `max`), or `fallback` when absent. */
export function readInt(
  owner: string,
  options: Record<string, unknown>,
  field: string,
  fallback: number,
  min: number,
  max?: number,
): number {
  const raw = Object.hasOwn(options, field) ? options[field] : undefined;
  if (raw === undefined || raw === null) return fallback;
  const spec: NumericOptionSpec = { type: 'int', default: fallback, min, doc: '' };
  return readOption(owner, field, max === undefined ? spec : { ...spec, max }, raw) as number;
}

/**
 * `window` (>= 1) and a prefix cap `capField` (a token count of whole windows' worth) that must
 * be at least `window`; an absent cap defaults to max(`defaults.cap`, window), so a large
 * window raises the default cap with it instead of being refused.
 */
export function readWindowAndCap(
  owner: string,
  options: Record<string, unknown>,
  capField: string,
  defaults: { window: number; cap: number },
): { window: number; cap: number } {
  const window = readInt(owner, options, 'window', defaults.window, 1);
  const cap = readInt(owner, options, capField, Math.max(defaults.cap, window), window);
  return { window, cap };
}

/** A finite number option >= `min`, or `fallback` when absent. */
export function readNumber(
  owner: string,
  options: Record<string, unknown>,
  field: string,
  fallback: number,
  min: number,
): number {
  const raw = Object.hasOwn(options, field) ? options[field] : undefined;
  if (raw === undefined || raw === null) return fallback;
  return readOption(
    owner,
    field,
    { type: 'number', default: fallback, min, doc: '' },
    raw,
  ) as number;
}

/** `maxPrefixTokens` -> `max-prefix-tokens`: the flag spelling of an option name. */
export function optionFlag(name: string): string {
  return name.replace(/[A-Z]/g, (c) => `-${c.toLowerCase()}`);
}
