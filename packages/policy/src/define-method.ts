import type { OptionsSchema, OptionValues } from './options.ts';
import { readOptions } from './options.ts';
import type { Method, MethodFactory } from './types.ts';

/**
 * Declares a method: its options schema (every host derives its flags, sweep axes, env names,
 * YAML keys and help from it) and a function that builds the method from the parsed, checked
 * values. `raw` is the merged config as given, for the rare default that depends on another
 * option (e.g. "at least `window`"). `name` prefixes option errors.
 */
export function defineMethod<S extends OptionsSchema>(
  name: string,
  schema: S,
  create: (options: OptionValues<S>, raw: Readonly<Record<string, unknown>>) => Method,
): MethodFactory {
  const factory = (raw: Record<string, unknown>): Method =>
    create(readOptions(name, schema, raw), raw);
  return Object.assign(factory, {
    methodName: name,
    options: schema,
    optionNames: Object.keys(schema),
  });
}
