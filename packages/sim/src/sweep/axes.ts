// What a sweep tries: the axes (method options and their values) and the settings grid each
// method gets, all derived from the methods' options schemas, so a method added to the policy
// registry is sweepable with its options as axes and nothing here changes.
//
// Rules (documented in the package README, "Sweeping"):
// - An axis is one option with a list of values, given as `--<option-flag> LIST` or
//   `--option NAME=LIST`. LIST is comma-separated values or a range (see parseAxisValues).
// - An axis applies to every method in the sweep whose schema has the option; each value is
//   checked against each of those methods' specs (type and range), and an option that no
//   method in the sweep reads is an error naming the methods that do.
// - A method gets the cartesian product of the axes that apply to it. A method no axis
//   applies to gets its schema's own sweep values (options with a `sweep` list), or runs once
//   at its defaults when it has none.
// - Settings a method refuses as a whole (e.g. prefix_match with prefixLength < window) are
//   left out and listed as rejected, with the method's own error.
import {
  methodOptionCatalog,
  methodOptionSchema,
  methodRegistry,
  type OptionSpec,
  PolicyConfigError,
  parseNumber,
  readOption,
} from '@kvroute/policy';
import { settingLabel } from '../report/sweep-choice.ts';

export type OptionValue = number | string;

/** One option swept over a list of values. */
export interface SweepAxis {
  /** Option name (camelCase, as configs spell it). */
  option: string;
  /** Flag spelling (`max-prefix-tokens`). */
  flag: string;
  /** Methods of the sweep that read it, in sweep order. */
  methods: string[];
  values: OptionValue[];
  /** `given` on the command line, or the method schema's own sweep values. */
  source: 'given' | 'schema';
}

/** One setting a sweep tries: a method and the options it sets (the rest are its defaults). */
export interface SweepSetting {
  method: string;
  options: Record<string, OptionValue>;
}

export interface RejectedSetting extends SweepSetting {
  /** The method's own error for this combination. */
  error: string;
}

export interface SweepGrid {
  axes: SweepAxis[];
  /** In report order: methods as listed, then the first axis varying fastest. */
  settings: SweepSetting[];
  rejected: RejectedSetting[];
}

/** Most values one axis may have (a typo like `1..1e9` must not plan a billion cells). */
export const MAX_AXIS_VALUES = 1000;

const round = (x: number) => Number(x.toPrecision(12));

/**
 * An axis's values: `64,128,256` (a list), `LO..HI` (integers, step 1), `LO..HI:STEP` or
 * `LO..HI:+STEP` (arithmetic), `LO..HI:xF` (geometric, e.g. `64..1024:x2`). Numbers are strict
 * decimals (no hex, no Infinity). `kind` is the option's type; enums take a list of words.
 */
export function parseAxisValues(
  what: string,
  raw: string,
  kind: OptionSpec['type'],
): OptionValue[] {
  const text = raw.trim();
  if (text === '') throw new PolicyConfigError(`${what}: empty list`);
  const range = /^([^,]+?)\.\.([^,:]+?)(?::([x+]?)([^,]+))?$/.exec(text);
  let values: OptionValue[];
  if (range !== null && kind !== 'enum') {
    const num = (s: string, role: string) => {
      const n = parseNumber(s);
      if (n === undefined)
        throw new PolicyConfigError(`${what}: range ${role} must be a number, got '${s}'`);
      return n;
    };
    const lo = num(range[1]!, 'start');
    const hi = num(range[2]!, 'end');
    if (hi < lo) throw new PolicyConfigError(`${what}: range ${text} ends below its start`);
    const geometric = range[3] === 'x';
    let step: number;
    if (range[4] === undefined) {
      if (kind !== 'int') {
        throw new PolicyConfigError(
          `${what}: a range of real numbers needs a step, e.g. ${lo}..${hi}:0.25 or ${lo}..${hi}:x2`,
        );
      }
      step = 1;
    } else {
      step = num(range[4], 'step');
    }
    if (geometric ? !(step > 1 && lo > 0) : !(step > 0)) {
      throw new PolicyConfigError(
        geometric
          ? `${what}: a geometric range needs a start > 0 and a factor > 1, got '${text}'`
          : `${what}: a range step must be > 0, got '${text}'`,
      );
    }
    values = [];
    for (let i = 0; ; i++) {
      const v = round(geometric ? lo * step ** i : lo + i * step);
      if (v > hi * (1 + 1e-12) + 1e-12) break;
      values.push(kind === 'int' ? Math.round(v) : v);
      if (values.length > MAX_AXIS_VALUES) {
        throw new PolicyConfigError(
          `${what}: range ${text} has more than ${MAX_AXIS_VALUES} values`,
        );
      }
    }
    values = [...new Set(values)];
  } else {
    const items = text.split(',').map((s) => s.trim());
    if (items.some((s) => s === '')) {
      throw new PolicyConfigError(`${what}: empty item in '${raw}' (use a,b,c)`);
    }
    values = items.map((s) => {
      if (kind === 'enum') return s;
      const n = parseNumber(s);
      if (n === undefined) throw new PolicyConfigError(`${what}: '${s}' is not a number`);
      return n;
    });
    const dup = values.find((v, i) => values.indexOf(v) !== i);
    if (dup !== undefined) throw new PolicyConfigError(`${what}: lists ${dup} twice`);
    if (values.length > MAX_AXIS_VALUES) {
      throw new PolicyConfigError(`${what}: more than ${MAX_AXIS_VALUES} values`);
    }
  }
  return values;
}

/**
 * Axes given on the command line (option name -> raw LIST) turned into the sweep's grid for
 * `methods`. Every error names the flag (or option) and, for range errors, the method.
 */
export function planSweep(
  methods: readonly string[],
  given: ReadonlyMap<string, string>,
): SweepGrid {
  for (const m of methods) methodOptionSchema(m); // unknown method: the registry's error
  const catalog = methodOptionCatalog();
  const axes: SweepAxis[] = [];
  for (const [option, raw] of given) {
    const entry = catalog.find((e) => e.name === option);
    const flag = entry?.flag ?? option;
    if (entry === undefined) {
      throw new PolicyConfigError(
        `--option ${option}: no registered method has an option of that name; options: ${catalog.map((e) => e.name).join(', ')}`,
      );
    }
    const readers = methods.filter((m) => Object.hasOwn(methodOptionSchema(m), option));
    if (readers.length === 0) {
      throw new PolicyConfigError(
        `--${flag}: no method in this sweep (${methods.join(', ')}) reads ${option}; methods that do: ${Object.keys(entry.specs).join(', ')}`,
      );
    }
    const specs = readers.map((m) => methodOptionSchema(m)[option]!);
    const kinds = new Set(specs.map((s) => s.type));
    // Methods may type one name differently (int for one, number for another): parse as the
    // loosest and let each method's own check below refuse what it cannot take.
    const kind: OptionSpec['type'] = kinds.has('enum')
      ? 'enum'
      : kinds.has('number')
        ? 'number'
        : 'int';
    const values = parseAxisValues(`--${flag}`, raw, kind);
    for (const m of readers) {
      const spec = methodOptionSchema(m)[option]!;
      for (const v of values) {
        try {
          readOption(m, option, spec, v);
        } catch (err) {
          throw new PolicyConfigError(`--${flag} ${raw}: ${(err as Error).message}`);
        }
      }
    }
    axes.push({ option, flag, methods: readers, values, source: 'given' });
  }

  const settings: SweepSetting[] = [];
  const rejected: RejectedSetting[] = [];
  for (const method of methods) {
    const schema = methodOptionSchema(method);
    // Schema order, so the grid's order does not depend on the order flags were typed.
    let own = Object.keys(schema)
      .map((o) => axes.find((a) => a.option === o && a.methods.includes(method)))
      .filter((a): a is SweepAxis => a !== undefined);
    if (own.length === 0) {
      own = Object.entries(schema)
        .filter(([, spec]) => spec.sweep !== undefined && spec.sweep.length > 0)
        .map(([option, spec]) => {
          const entry = catalog.find((e) => e.name === option)!;
          const axis: SweepAxis = {
            option,
            flag: entry.flag,
            methods: [method],
            values: [...(spec.sweep as readonly OptionValue[])],
            source: 'schema',
          };
          axes.push(axis);
          return axis;
        });
    }
    for (const options of product(own)) {
      try {
        methodRegistry[method]!({ ...options });
        settings.push({ method, options });
      } catch (err) {
        const name = (err as Error).name;
        if (name !== 'PolicyConfigError' && name !== 'PolicyRangeError') throw err;
        rejected.push({ method, options, error: (err as Error).message });
      }
    }
  }
  if (settings.length === 0) {
    throw new PolicyConfigError(
      `every setting of this sweep is rejected by its method, e.g. ${settingLabel(rejected[0]!)}: ${rejected[0]!.error}`,
    );
  }
  // Report order: methods as listed, each method's options in schema order.
  const order = methods.flatMap((m) => Object.keys(methodOptionSchema(m)));
  const rank = (a: SweepAxis) => order.indexOf(a.option);
  const sorted = mergeSchemaAxes(axes).sort((a, b) => rank(a) - rank(b));
  return { axes: sorted, settings, rejected };
}

/** Schema-supplied axes of several methods that share an option and values show as one. */
function mergeSchemaAxes(axes: SweepAxis[]): SweepAxis[] {
  const out: SweepAxis[] = [];
  for (const a of axes) {
    const twin = out.find(
      (b) =>
        b.source === a.source &&
        b.option === a.option &&
        JSON.stringify(b.values) === JSON.stringify(a.values),
    );
    if (twin) twin.methods.push(...a.methods.filter((m) => !twin.methods.includes(m)));
    else out.push({ ...a, methods: [...a.methods] });
  }
  return out;
}

/** Cartesian product, the first axis varying fastest. */
function product(axes: readonly SweepAxis[]): Record<string, OptionValue>[] {
  let out: Record<string, OptionValue>[] = [{}];
  for (const axis of axes) {
    const next: Record<string, OptionValue>[] = [];
    for (const v of axis.values) for (const o of out) next.push({ ...o, [axis.option]: v });
    out = next;
  }
  return out;
}

/** Whether two settings are the same method with the same options. */
export function sameSetting(a: SweepSetting, b: SweepSetting): boolean {
  if (a.method !== b.method) return false;
  const ka = Object.keys(a.options);
  const kb = Object.keys(b.options);
  return ka.length === kb.length && ka.every((k) => a.options[k] === b.options[k]);
}
