// Turns `--policies` and the shared policy flags into dispatcher configs, and
// says which options each policy actually used, for the report.
import {
  AFFINITY_KINDS,
  type DispatcherConfig,
  methodNames,
  methodOptionCatalog,
  methodRegistry,
} from '@kvroute/policy';
import { checkName, parseAssignments } from './args.ts';
import { UsageError } from './errors.ts';

/**
 * The shared policy flags: method options by name (`window`, `epsilon`, ...: any option of any
 * registered method, one flag each, see methodOptionFlags) plus affinity.
 */
export interface PolicyFlags {
  /** Affinity kind (`routing_key` or `none`). */
  affinity?: string;
  /** The affinity table's own options (`maxEntries`, `ttlMs`), from `--affinity KIND:key=value`. */
  affinityOptions?: Record<string, unknown>;
  [option: string]: unknown;
}

export interface PolicySpec {
  /** Method name (SGLang naming). */
  method: string;
  config: DispatcherConfig;
  /** The options this method reads, as set on the command line, plus affinity: what the report shows. */
  reportOptions: Record<string, unknown>;
}

export function checkAffinity(raw: string | undefined): string | undefined {
  if (raw === undefined) return undefined;
  return checkName('affinity kind', raw, [...AFFINITY_KINDS, 'none']);
}

/**
 * `--affinity KIND[:key=value...]`, e.g. `routing_key:maxEntries=1000:ttlMs=60000`; the policy
 * validates the options (unknown names and bad numbers are its errors, listing the valid ones).
 */
export function parseAffinityFlag(
  raw: string | undefined,
): Pick<PolicyFlags, 'affinity' | 'affinityOptions'> {
  if (raw === undefined) return {};
  const [kind = '', ...assignments] = raw.split(':');
  const affinity = checkAffinity(kind.trim())!;
  if (assignments.length === 0) return { affinity };
  if (affinity === 'none') throw new UsageError(`--affinity none takes no options, got '${raw}'`);
  if (assignments.some((a) => a.trim() === '')) {
    throw new UsageError(`--affinity: empty option in '${raw}' (use kind:key=value:key=value)`);
  }
  return { affinity, affinityOptions: parseAssignments('affinity', assignments) };
}

/** The dispatcher's `affinity` config for the flags; undefined when affinity is off. */
export function affinityConfig(flags: PolicyFlags): Record<string, unknown> | undefined {
  if (flags.affinity === undefined || flags.affinity === 'none') return undefined;
  return { kind: flags.affinity, ...(flags.affinityOptions ?? {}) };
}

/**
 * One entry of `--policies`: `name` or `name:key=value[:key=value...]`, where the per-policy
 * options go under the config's `options` (they win over the shared flags, and the
 * dispatcher rejects names this method does not read).
 */
export function parsePolicy(entry: string, flags: PolicyFlags): PolicySpec {
  const [name = '', ...assignments] = entry.split(':');
  const method = checkName('policy', name.trim(), methodNames());
  if (assignments.some((a) => a.trim() === '')) {
    throw new UsageError(`--policies: empty option in '${entry}' (use name:key=value:key=value)`);
  }
  const own = parseAssignments('policies', assignments);
  const config: DispatcherConfig = { method };
  // Shared flags apply to every policy; the dispatcher ignores top-level options that belong
  // to other methods, so `--window` with round_robin in the list is fine.
  const catalog = methodOptionCatalog();
  for (const { name } of catalog) if (flags[name] !== undefined) config[name] = flags[name];
  if (flags.affinity !== undefined) config.affinity = affinityConfig(flags) ?? { kind: 'none' };
  if (assignments.length > 0) config.options = own;

  const reads = methodRegistry[method]?.optionNames;
  const reportOptions: Record<string, unknown> = {};
  for (const { name } of catalog) {
    const v = flags[name];
    if (v !== undefined && (reads === undefined || reads.includes(name))) reportOptions[name] = v;
  }
  Object.assign(reportOptions, own);
  const affinity = affinityConfig(flags);
  if (affinity !== undefined) reportOptions.affinity = affinity;
  return { method, config, reportOptions };
}

export function parsePolicies(list: readonly string[], flags: PolicyFlags): PolicySpec[] {
  if (list.length === 0)
    throw new UsageError(`--policies needs at least one of: ${methodNames().join(', ')}`);
  const dup = list.find((e, i) => list.indexOf(e) !== i);
  // Two identical entries would be one row twice and collide in the charts' legends.
  if (dup !== undefined) throw new UsageError(`--policies lists '${dup}' twice`);
  return list.map((e) => parsePolicy(e, flags));
}

export {
  methodOptionFlags,
  methodOptionsHelp,
  methodOptionValue,
  readMethodOptionFlags,
} from '../method-option-flags.ts';
