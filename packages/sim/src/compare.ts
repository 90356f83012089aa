// Runs one workload under several policies and returns the comparison the CLI prints and
// writes as JSON. The plan is built once, so every policy sees the same
// requests; each policy gets fresh ranks and a fresh dispatcher.
import type { DispatcherConfig, PrefixDigests } from '@kvroute/policy';
import type { CostModel } from './cost/cost-model.ts';
import { getProfile } from './cost/profiles.ts';
import { type EngineSettings, type ResolvedEngine, resolveEngine } from './entities/presets.ts';
import type { IndexSource } from './host/kv-events.ts';
import { SourceDigests } from './host/prefix-digests.ts';
import type { PolicyRunSummary, RequestRecord } from './metrics/types.ts';
import { type RankOverrides, simulatePlan } from './simulate.ts';
import { withRequestRate } from './workloads/load.ts';
import { buildWorkload } from './workloads/registry.ts';
import type { WorkloadPlan } from './workloads/types.ts';

export interface ComparisonOptions {
  scenario: string;
  scenarioOptions?: Record<string, unknown>;
  /** Method names ('prefix_match') or full dispatcher configs. */
  policies: readonly (string | DispatcherConfig)[];
  /** Rank count; defaults to the scenario's. */
  ranks?: number;
  /** Profile name or a loaded CostModel (--profile-file). */
  profile: string | CostModel;
  seed: string | number;
  /** Applied to every policy that does not set them itself (prefix_match's knobs). */
  window?: number;
  prefixLength?: number;
  rank?: RankOverrides;
  /** Engine preset and settings (default: SGLang's); `rank` overrides win over them. */
  engine?: EngineSettings;
  /** Closed loop: at most this many requests in flight (benchmark --max-concurrency). */
  maxConcurrency?: number;
  /** Open loop: send the plan's requests as Poisson arrivals at this many requests/s. */
  requestRate?: number;
  /** Progress over the whole comparison (0..1). */
  onProgress?(fraction: number): void;
  /** A plan built beforehand (e.g. to reuse one across a sweep); scenarioOptions then unused. */
  plan?: WorkloadPlan;
  /** Router replicas and where their cache index comes from (SimulateOptions). */
  router?: RouterModel;
  /**
   * Prefix digests shared with other runs of the same plan (a sweep's cells); default: one
   * store for these policies' runs when there are several.
   */
  prefixDigests?: PrefixDigests;
}

export interface RouterModel {
  replicas?: number;
  indexSource?: IndexSource;
  eventLagMs?: number | readonly number[];
  loadPollMs?: number;
}

export interface ComparisonResult {
  scenario: string;
  scenarioOptions: Record<string, unknown>;
  ranks: number;
  profile: string;
  seed: string | number;
  /** The rank model every policy ran on (preset, admission, caps, KV pool). */
  engine: ResolvedEngine & { maxConcurrency?: number; requestRate?: number };
  /** Replay: trace lines skipped with skipInvalid. */
  skippedLines?: number;
  policies: PolicyRunSummary[];
}

export interface ComparisonRun {
  result: ComparisonResult;
  /** Per-request records, one array per policy, in the order of `result.policies`. */
  records: RequestRecord[][];
}

export function policyConfig(
  p: string | DispatcherConfig,
  extra: { window?: number; prefixLength?: number } = {},
): DispatcherConfig {
  const base: DispatcherConfig = typeof p === 'string' ? { method: p } : { ...p };
  // Only methods that take these knobs get them; the dispatcher rejects unknown options.
  if (base.method === 'prefix_match') {
    if (extra.window !== undefined && base.window === undefined) base.window = extra.window;
    if (extra.prefixLength !== undefined && base.prefixLength === undefined) {
      base.prefixLength = extra.prefixLength;
    }
  }
  return base;
}

export function runComparisonDetailed(opts: ComparisonOptions): ComparisonRun {
  if (opts.policies.length === 0) throw new RangeError('policies: give at least one policy');
  const profile = typeof opts.profile === 'string' ? getProfile(opts.profile) : opts.profile;
  let plan = opts.plan ?? buildWorkload(opts.scenario, opts.scenarioOptions ?? {}, opts.seed);
  if (opts.requestRate !== undefined) plan = withRequestRate(plan, opts.requestRate, opts.seed);
  const ranks = opts.ranks ?? plan.ranks;
  const engine = resolveEngine(profile, opts.engine);
  const { engine: _name, ...fromEngine } = engine;
  const rank: RankOverrides = { ...fromEngine, ...(opts.rank ?? {}) };
  const summaries: PolicyRunSummary[] = [];
  const records: RequestRecord[][] = [];
  const n = opts.policies.length;
  // Runs of one plan share digests; a single run would only hold them.
  const prefixDigests = opts.prefixDigests ?? (n > 1 ? new SourceDigests() : undefined);
  opts.policies.forEach((p, i) => {
    const run = simulatePlan(plan, {
      policy: policyConfig(p, opts),
      ranks,
      profile,
      seed: opts.seed,
      ...opts.router,
      rank,
      ...(opts.maxConcurrency !== undefined ? { maxConcurrency: opts.maxConcurrency } : {}),
      onProgress: opts.onProgress ? (f) => opts.onProgress!((i + f) / n) : undefined,
      ...(prefixDigests ? { prefixDigests } : {}),
    });
    summaries.push(run.summary);
    records.push(run.records);
  });
  const result: ComparisonResult = {
    scenario: plan.scenario,
    scenarioOptions: plan.options ?? opts.scenarioOptions ?? {},
    ranks,
    profile: profile.name,
    seed: opts.seed,
    engine: {
      ...engine,
      ...(opts.maxConcurrency !== undefined ? { maxConcurrency: opts.maxConcurrency } : {}),
      ...(opts.requestRate !== undefined ? { requestRate: opts.requestRate } : {}),
    },
    policies: summaries,
  };
  if (plan.skippedLines !== undefined) result.skippedLines = plan.skippedLines;
  return { result, records };
}

export function runComparison(opts: ComparisonOptions): ComparisonResult {
  return runComparisonDetailed(opts).result;
}
