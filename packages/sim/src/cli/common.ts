// Flags shared by run, sweep and replay, and their checks.
import { existsSync } from 'node:fs';
import { resolve } from 'node:path';
import type { ProfileRef } from '../parallel/cell.ts';
import type { ClusterEvent } from '../workloads/types.ts';
import {
  checkName,
  nameList,
  nonNegativeNumber,
  type OptionSpec,
  type Parsed,
  parseAssignments,
  parseSeed,
  positiveInt,
  str,
  strs,
} from './args.ts';
import type { CliIo } from './command.ts';
import {
  checkEngineFlags,
  ENGINE_FLAGS_HELP,
  ENGINE_OPTIONS,
  type EngineFlags,
  readEngineFlags,
} from './engine-flags.ts';
import { UsageError } from './errors.ts';
import { checkTargets, type OutputTargets } from './outputs.ts';
import {
  methodOptionFlags,
  methodOptionsHelp,
  type PolicyFlags,
  type PolicySpec,
  parseAffinityFlag,
  parsePolicies,
  parsePolicy,
  readMethodOptionFlags,
} from './policies.ts';
import {
  type CostModel,
  getProfile,
  loadProfileFile,
  profileNames,
  scenarioList,
  scenarioNames,
} from './sim-api.ts';

export const DEFAULT_SEED = 1;

/** --switch-policy (run and replay): the router's policy switched at a moment of the run. */
export const SWITCH_OPTIONS: OptionSpec = {
  'switch-policy': { type: 'string', multiple: true },
};

export const SWITCH_FLAGS_HELP = `  --switch-policy AT=POLICY
                        repeatable: at time AT of the run (ms, or with a unit: 90s, 2m) every
                        policy's router switches to POLICY (name:key=value as in --policies),
                        as a hot reload does; the TTFT-over-time chart marks it. E.g.
                        --switch-policy 60s=prefix_match:window=64 (default: no switch)`;

/** The policy-switch events --switch-policy asks for, in the order given. */
export function readSwitches(p: Parsed, flags: SimFlags): ClusterEvent[] {
  return strs(p, 'switch-policy').map((entry) => {
    const eq = entry.indexOf('=');
    const m = /^\s*(\d+(?:\.\d+)?)\s*(ms|s|m)?\s*$/.exec(eq > 0 ? entry.slice(0, eq) : '');
    if (!m || eq < 0) {
      throw new UsageError(
        `--switch-policy: expected AT=POLICY such as 60s=prefix_match:window=64, got '${entry}'`,
      );
    }
    const unit = m[2] ?? 'ms';
    const atMs = Number(m[1]) * (unit === 'ms' ? 1 : unit === 's' ? 1000 : 60_000);
    const spec = parsePolicy(entry.slice(eq + 1).trim(), flags.policyFlags);
    return { atMs, kind: 'policy-switch', policy: spec.config };
  });
}
export const DEFAULT_POLICIES = 'round_robin,total_tokens,prefix_match';

export const SIM_OPTIONS: OptionSpec = {
  ranks: { type: 'string' },
  profile: { type: 'string' },
  'profile-file': { type: 'string' },
  seed: { type: 'string' },
  ...methodOptionFlags(),
  affinity: { type: 'string' },
  set: { type: 'string', multiple: true },
  json: { type: 'string' },
  csv: { type: 'string' },
  html: { type: 'string' },
  ...ENGINE_OPTIONS,
};

/** Router-side model flags (run, replay, sweep): replicas, their cache index source, load polls. */
export const ROUTER_OPTIONS: OptionSpec = {
  replicas: { type: 'string' },
  'index-source': { type: 'string' },
  'event-lag-ms': { type: 'string' },
  'load-poll-ms': { type: 'string' },
};

export const ROUTER_FLAGS_HELP = `  --replicas N          router replicas in front of the ranks, requests spread round-robin
                        (default 1); each sees only its own decisions and in-flight counts
  --index-source SRC    where the routers' cache index comes from: learned (default, from
                        their own decisions), events (the ranks' KV events, shared by all
                        replicas, after --event-lag-ms), oracle (the caches themselves)
  --event-lag-ms L      KV event delivery lag for --index-source events (default 5)
  --load-poll-ms P      with --replicas >= 2: each replica polls the ranks' request counts every
                        P ms and adds the others' requests, as of its last poll, to its own
                        (the router's --load-poll-interval; 0: always current; default: none)`;

export interface RouterModelFlags {
  replicas?: number;
  indexSource?: 'learned' | 'events' | 'oracle';
  eventLagMs?: number;
  loadPollMs?: number;
}

export function readRouterFlags(p: Parsed): RouterModelFlags {
  const out: RouterModelFlags = {};
  const replicas = str(p, 'replicas');
  if (replicas !== undefined) out.replicas = positiveInt('replicas', replicas);
  const source = str(p, 'index-source');
  if (source !== undefined) {
    out.indexSource = checkName('index-source', source, ['learned', 'events', 'oracle']) as
      | 'learned'
      | 'events'
      | 'oracle';
  }
  const lag = str(p, 'event-lag-ms');
  if (lag !== undefined) {
    const n = nonNegativeNumber('event-lag-ms', lag);
    if (source !== 'events') throw new UsageError('--event-lag-ms needs --index-source events');
    out.eventLagMs = n;
  }
  const poll = str(p, 'load-poll-ms');
  if (poll !== undefined) {
    const n = nonNegativeNumber('load-poll-ms', poll);
    if ((out.replicas ?? 1) < 2) throw new UsageError('--load-poll-ms needs --replicas 2 or more');
    out.loadPollMs = n;
  }
  return out;
}

/**
 * Help for the flags readSimFlags reads; `methodOptions: false` leaves out the method option
 * flags (sweep documents them as axes).
 */
export function simFlagsHelp(methodOptions = true): string {
  const options = methodOptions
    ? `${methodOptionsHelp()}
                        (method options: each policy in --policies reads the ones it has)
`
    : '';
  return `  --ranks N             integer >= 1: rank count, for the simulator and the scenario's own
                        'ranks' option (default: the scenario's, e.g. 16 for seed-sequential)
  --profile NAME        name: cost profile (see 'kvroute-sim profiles'); default
                        seed-qwen3-moe-dp16 for seed-* scenarios, h200-llama-3.1-8b otherwise
  --profile-file FILE   path: a kvroute-cost-profile/v1 JSON file instead of a named profile
                        (default: none)
  --seed S              integer or string: seed of every random stream (default ${DEFAULT_SEED});
                        same seed, same bytes
  --set KEY=VALUE       scenario option, repeatable (e.g. --set requests=10 --set accumulate=true);
                        true/false and numerals are typed, anything else is a string; an unknown
                        KEY is an error listing the scenario's options (default: none)
${options}  --affinity KIND       routing-key cache affinity for every policy: routing_key | none (default none);
                        table options as KIND:key=value, e.g. routing_key:maxEntries=1000:ttlMs=60000
  --json FILE|-         path or '-': write the JSON report (schema in the package README);
                        '-' = stdout only (default: not written)
  --csv FILE|-          path or '-': one CSV row per policy (sweep: per grid cell) (default: not written)
  --html FILE|-         path or '-': a self-contained HTML report with charts (default: not written)
${ENGINE_FLAGS_HELP}
  -h, --help            this help`;
}

export const SIM_FLAGS_HELP = simFlagsHelp();

export interface SimFlags {
  ranks?: number;
  profile: CostModel;
  /** Where `profile` came from, so another thread or machine can load the same one. */
  profileRef: ProfileRef;
  seed: string | number;
  scenarioOptions: Record<string, unknown>;
  /** Scenario options to show in reports instead of the resolved ones (paths as typed). */
  displayOptions?: Record<string, unknown>;
  policyFlags: PolicyFlags;
  outputs: OutputTargets;
  /** Rank model and client load (--engine, --admission, --max-concurrency, ...). */
  engine: EngineFlags;
}

/** Profile for scenarios run without --profile: the seed scenarios model the seed's deployment. */
export function defaultProfileName(scenario: string): string {
  return scenario.startsWith('seed-') ? 'seed-qwen3-moe-dp16' : 'h200-llama-3.1-8b';
}

export function resolveProfile(p: Parsed, scenario: string, io: CliIo): CostModel {
  const ref = resolveProfileRef(p, scenario, io);
  if ('name' in ref) return getProfile(ref.name);
  // A bad profile file is bad input (exit 2), whatever the loader's error class.
  try {
    return loadProfileFile(ref.file);
  } catch (err) {
    throw new UsageError(`--profile-file: ${(err as Error).message}`);
  }
}

export function resolveProfileRef(p: Parsed, scenario: string, io: CliIo): ProfileRef {
  const name = str(p, 'profile');
  const file = str(p, 'profile-file');
  if (name !== undefined && file !== undefined)
    throw new UsageError('give either --profile or --profile-file, not both');
  if (file !== undefined) return { file: resolve(io.cwd, file) };
  return { name: checkName('profile', name ?? defaultProfileName(scenario), profileNames()) };
}

function scenarioHasOption(scenario: string, option: string): boolean {
  const def = scenarioList().find((s) => s.name === scenario);
  return def !== undefined && Object.hasOwn(def.defaults, option);
}

export function readSimFlags(p: Parsed, scenario: string, io: CliIo): SimFlags {
  const ranksRaw = str(p, 'ranks');
  const outputs: OutputTargets = { json: str(p, 'json'), csv: str(p, 'csv'), html: str(p, 'html') };
  checkTargets(outputs);
  const policyFlags: PolicyFlags = readMethodOptionFlags((flag) => str(p, flag));
  Object.assign(policyFlags, parseAffinityFlag(str(p, 'affinity')));
  const ranks = ranksRaw !== undefined ? positiveInt('ranks', ranksRaw) : undefined;
  const scenarioOptions: Record<string, unknown> = parseAssignments('set', strs(p, 'set'));
  if (ranks !== undefined && scenarioHasOption(scenario, 'ranks')) {
    // Scenarios place cluster events (a failing rank, a scale-out target) relative to their
    // own rank count, so --ranks must reach the workload too, not only the simulator.
    const set = scenarioOptions.ranks;
    if (set !== undefined && Number(set) !== ranks) {
      throw new UsageError(`--ranks ${ranks} conflicts with --set ranks=${String(set)}`);
    }
    scenarioOptions.ranks = ranks;
  }
  // A trace named with --set file=... is relative to the user's directory, like every other
  // path argument (the loader alone would resolve it against the process's).
  const file = scenarioOptions.file;
  let displayOptions: Record<string, unknown> | undefined;
  if (typeof file === 'string' && file !== '' && existsSync(resolve(io.cwd, file))) {
    scenarioOptions.file = resolve(io.cwd, file);
    // Reports show the path as typed, so they do not depend on where the repo lives.
    displayOptions = { file };
  }
  const profile = resolveProfile(p, scenario, io);
  const engine = readEngineFlags(p);
  checkEngineFlags(profile, engine);
  return {
    ...(ranks !== undefined ? { ranks } : {}),
    profile,
    profileRef: resolveProfileRef(p, scenario, io),
    seed: parseSeed(str(p, 'seed'), DEFAULT_SEED),
    scenarioOptions,
    ...(displayOptions ? { displayOptions } : {}),
    policyFlags,
    outputs,
    engine,
  };
}

/** --scenario, required and one of the registered names (run, sweep). */
export function requireScenario(p: Parsed): string {
  const scenario = str(p, 'scenario');
  if (scenario === undefined) {
    throw new UsageError(`--scenario is required; valid scenarios: ${scenarioNames().join(', ')}`);
  }
  return checkName('scenario', scenario, scenarioNames());
}

/** --policies (default DEFAULT_POLICIES) with the shared policy flags applied (run, replay). */
export function readPolicies(p: Parsed, flags: SimFlags): PolicySpec[] {
  return parsePolicies(
    nameList('policies', str(p, 'policies') ?? DEFAULT_POLICIES),
    flags.policyFlags,
  );
}
