// SGLang's `--load-balance-method` names mapped to method factories. Keep this a plain object
// literal: adding a method is one import and one line, and everything that iterates the
// registry (methodNames, the option catalog behind every host's flags, sweep axes and help,
// the conformance suite, the benchmark, the comparison report) picks it up.

import { PolicyConfigError } from './errors.ts';
import { createCacheAware } from './methods/cache-aware.ts';
import { createConsistentHash } from './methods/consistent-hash.ts';
import { createFollowBootstrapRoom } from './methods/follow-bootstrap-room.ts';
import { createPrefixMatch } from './methods/prefix-match.ts';
import { createRoundRobin } from './methods/round-robin.ts';
import { createTotalRequests } from './methods/total-requests.ts';
import { createTotalTokens } from './methods/total-tokens.ts';
import { describeRange, type OptionSpec, type OptionsSchema, optionFlag } from './options.ts';
import type { MethodFactory } from './types.ts';

export const methodRegistry: Readonly<Record<string, MethodFactory>> = {
  round_robin: createRoundRobin,
  total_requests: createTotalRequests,
  total_tokens: createTotalTokens,
  follow_bootstrap_room: createFollowBootstrapRoom,
  prefix_match: createPrefixMatch,
  consistent_hash: createConsistentHash,
  cache_aware: createCacheAware,
};

/** Registered method names, in registry order. */
export function methodNames(): string[] {
  return Object.keys(methodRegistry);
}

/** One option name as every host shows it: which methods read it, with each method's spec. */
export interface MethodOptionEntry {
  /** camelCase, as configs spell it. */
  readonly name: string;
  /** kebab-case, as CLI flags spell it (`--max-prefix-tokens`). */
  readonly flag: string;
  /** Method name -> that method's spec of this option, in registry order. */
  readonly specs: Readonly<Record<string, OptionSpec>>;
}

/**
 * Every option of every registered method, once per name, in registry then schema order.
 * Computed on each call, so a method registered before a host builds its flags is included.
 */
export function methodOptionCatalog(): MethodOptionEntry[] {
  const byName = new Map<string, Record<string, OptionSpec>>();
  for (const [method, factory] of Object.entries(methodRegistry)) {
    for (const [name, spec] of Object.entries(factory.options)) {
      const specs = byName.get(name) ?? {};
      byName.set(name, specs);
      specs[method] = spec;
    }
  }
  return [...byName].map(([name, specs]) => ({ name, flag: optionFlag(name), specs }));
}

/** Whether every method that reads the option takes a number (the CLI parses it as one). */
export function isNumericOption(entry: MethodOptionEntry): boolean {
  return Object.values(entry.specs).every((s) => s.type !== 'enum');
}

/** One line of help for an option: per method, its default and doc (one entry when all agree). */
export function optionHelp(entry: MethodOptionEntry): string {
  const parts = Object.entries(entry.specs).map(
    ([method, spec]) => `${method} (default ${spec.default}, ${describeRange(spec)}): ${spec.doc}`,
  );
  return parts.join('; ');
}

/** The options schema of a registered method (empty for a method without options). */
export function methodOptionSchema(method: string): OptionsSchema {
  const factory = Object.hasOwn(methodRegistry, method) ? methodRegistry[method] : undefined;
  if (!factory) {
    throw new PolicyConfigError(
      `unknown method ${JSON.stringify(method)}; valid methods: ${methodNames().join(', ')}`,
    );
  }
  return factory.options;
}
