// Runs the simulations a command asked for and shapes the results into reports, driving the
// progress bar. The engine and the metrics are sim-core's; this file only sequences them.

import { oneBigCacheBound } from '../compare/bound.ts';
import { RECOMMENDED } from '../compare/policy-comparison.ts';
import type { RouterModel } from '../compare.ts';
import { hostTier } from '../entities/presets.ts';
import type { CellJob, CellResult, ProfileRef } from '../parallel/cell.ts';
import { runCells } from '../parallel/pool.ts';
import { chooseBest, sweepNotes } from '../report/sweep-choice.ts';
import type {
  PolicySamples,
  RunExtras,
  RunReport,
  SweepCell,
  SweepObjective,
  SweepReport,
} from '../report/types.ts';
import type { ClusterEvent } from '../workloads/types.ts';
import type { CliIo } from './command.ts';
import type { EngineFlags } from './engine-flags.ts';
import type { PolicySpec } from './policies.ts';
import { createProgress } from './progress.ts';
import { buildWorkload, type CostModel, runComparisonDetailed } from './sim-api.ts';

export interface CompareInput {
  command: 'run' | 'replay';
  scenario: string;
  scenarioOptions: Record<string, unknown>;
  /** Shown in the report instead of the plan's options (e.g. the trace path as typed). */
  displayOptions?: Record<string, unknown>;
  seed: string | number;
  ranks?: number;
  profile: CostModel;
  policies: readonly PolicySpec[];
  /** Router replicas and index source (--replicas, --index-source, --event-lag-ms). */
  router?: RouterModel;
  engine?: EngineFlags;
}

/** Plain data (it crosses worker threads and shard files): what engineOptions returns. */
export type EngineOptions = ReturnType<typeof engineOptions>;

/** The comparison options an EngineFlags asks for, resolved against the profile. */
export function engineOptions(profile: CostModel, e: EngineFlags | undefined) {
  if (e === undefined) return {};
  const settings = { ...e.settings };
  if (e.hostTokens !== undefined) {
    settings.hostKv = hostTier(profile, e.hostTokens, {
      ...(e.hostTokensPerMs !== undefined ? { tokensPerMs: e.hostTokensPerMs } : {}),
      ...(e.hostEviction !== undefined ? { eviction: e.hostEviction } : {}),
    });
  }
  return {
    engine: settings,
    ...(e.maxConcurrency !== undefined ? { maxConcurrency: e.maxConcurrency } : {}),
    ...(e.requestRate !== undefined ? { requestRate: e.requestRate } : {}),
  };
}

export function compare(
  io: CliIo,
  input: CompareInput,
): { report: RunReport; samples: PolicySamples[]; extras: () => RunExtras } {
  const progress = createProgress(io);
  const n = input.policies.length;
  try {
    const plan = buildWorkload(input.scenario, input.scenarioOptions, input.seed);
    const { result, records } = runComparisonDetailed({
      scenario: input.scenario,
      scenarioOptions: input.scenarioOptions,
      plan,
      policies: input.policies.map((p) => p.config),
      ranks: input.ranks,
      profile: input.profile,
      seed: input.seed,
      ...(input.router ? { router: input.router } : {}),
      ...engineOptions(input.profile, input.engine),
      onProgress: (f) => {
        const i = Math.min(n - 1, Math.floor(f * n));
        progress.update(f, `${input.policies[i]?.method ?? ''} (${i + 1}/${n})`);
      },
    });
    const report: RunReport = {
      format: 'kvroute-sim-report/v1',
      command: input.command,
      scenario: result.scenario,
      scenarioOptions: { ...result.scenarioOptions, ...(input.displayOptions ?? {}) },
      ranks: result.ranks,
      profile: result.profile,
      seed: result.seed,
      engine: result.engine,
      policies: result.policies.map((s, i) => ({
        ...s,
        options: input.policies[i]?.reportOptions ?? s.options,
      })),
    };
    if (result.skippedLines !== undefined) report.skippedLines = result.skippedLines;
    if (input.router !== undefined && Object.keys(input.router).length > 0) {
      report.router = input.router;
    }
    const samples = result.policies.map((s, i) => {
      const recs = records[i] ?? [];
      const byArrival = [...recs].sort((a, b) => a.arrivalMs - b.arrivalMs || a.id - b.id);
      return {
        policy: s.policy,
        ttftMs: recs.map((r) => r.ttftMs),
        ttftByArrivalMs: byArrival.map((r) => r.ttftMs),
        arrivalMs: byArrival.map((r) => r.arrivalMs),
      };
    });
    // Only the HTML report draws these; the bound replays the whole plan once more.
    const extras = (): RunExtras => ({
      markers: plan.events.map((e) => ({ atMs: e.atMs, label: markerLabel(e) })),
      boundHitRate: oneBigCacheBound(plan, input.profile.kvCapacityTokens * result.ranks).hitRate,
    });
    return { report, samples, extras };
  } finally {
    progress.done();
  }
}

export interface SweepInput {
  scenario: string;
  scenarioOptions: Record<string, unknown>;
  displayOptions?: Record<string, unknown>;
  seed: string | number;
  ranks?: number;
  profile: CostModel;
  /** How a worker thread (or a shard on another machine) loads the same profile. */
  profileRef: ProfileRef;
  policy: string;
  /** The dispatcher's affinity config for every cell; undefined when off. */
  affinity?: Record<string, unknown>;
  windows: readonly number[];
  prefixLengths: readonly number[];
  objective: SweepObjective;
  /** Worker threads (default: one per core). */
  workers?: number;
  engine?: EngineFlags;
  /** Router replicas and index source for every cell (--replicas, --index-source, ...). */
  router?: RouterModel;
}

/** What a sweep's report is assembled from besides its cells: written into shard files. */
export interface SweepSpec {
  scenario: string;
  scenarioOptions: Record<string, unknown>;
  displayOptions?: Record<string, unknown>;
  seed: string | number;
  ranks?: number;
  profile: string;
  profileRef: ProfileRef;
  policy: string;
  affinity?: Record<string, unknown>;
  windows: number[];
  prefixLengths: number[];
  objective: SweepObjective;
  /** Rank model and client load, resolved (engine flags). */
  engine?: EngineOptions;
  router?: RouterModel;
}

export const SHARD_FORMAT = 'kvroute-sim-sweep-shard/v1';

export interface SweepShard {
  format: typeof SHARD_FORMAT;
  shard: { index: number; count: number };
  sweep: SweepSpec;
  /** Cells in the whole grid. */
  total: number;
  cells: { index: number; result: CellResult }[];
}

export function sweepSpec(input: SweepInput): SweepSpec {
  return {
    scenario: input.scenario,
    scenarioOptions: input.scenarioOptions,
    ...(input.displayOptions ? { displayOptions: input.displayOptions } : {}),
    seed: input.seed,
    ...(input.ranks !== undefined ? { ranks: input.ranks } : {}),
    profile: input.profile.name,
    profileRef: input.profileRef,
    policy: input.policy,
    ...(input.affinity !== undefined ? { affinity: input.affinity } : {}),
    windows: [...input.windows],
    prefixLengths: [...input.prefixLengths],
    objective: input.objective,
    ...(input.engine !== undefined ? { engine: engineOptions(input.profile, input.engine) } : {}),
    ...(input.router !== undefined && Object.keys(input.router).length > 0
      ? { router: input.router }
      : {}),
  };
}

/** The grid's (window, prefix length) pairs in report order; pairs the policy rejects are left out. */
export function sweepPairs(spec: SweepSpec): { window: number; prefixLength: number }[] {
  const pairs: { window: number; prefixLength: number }[] = [];
  for (const prefixLength of spec.prefixLengths) {
    for (const window of spec.windows)
      if (prefixLength >= window) pairs.push({ window, prefixLength });
  }
  return pairs;
}

/** The method a sweep's verdict compares with: the recommended default, with its defaults. */
export const REFERENCE_METHOD = RECOMMENDED;

/**
 * One cell job per pair, then the reference (the recommended default method); every cell
 * builds the same plan, so all see the same requests.
 */
export function sweepJobs(spec: SweepSpec): CellJob[] {
  const affinity = spec.affinity !== undefined ? { affinity: spec.affinity } : {};
  const job = (policy: CellJob['policy']): CellJob => ({
    scenario: spec.scenario,
    scenarioOptions: spec.scenarioOptions,
    seed: spec.seed,
    ...(spec.ranks !== undefined ? { ranks: spec.ranks } : {}),
    profile: spec.profileRef,
    policy,
    ...(spec.engine !== undefined ? { engine: spec.engine } : {}),
    ...(spec.router !== undefined ? { router: spec.router } : {}),
  });
  return [
    ...sweepPairs(spec).map(({ window, prefixLength }) =>
      job({ method: spec.policy, window, prefixLength, ...affinity }),
    ),
    job({ method: REFERENCE_METHOD, ...affinity }),
  ];
}

/** Cell indices shard `index` (1-based) of `count` runs: every count-th, a deterministic share. */
export function shardIndices(total: number, index: number, count: number): number[] {
  const out: number[] = [];
  for (let i = index - 1; i < total; i += count) out.push(i);
  return out;
}

export async function runSweepCells(
  io: CliIo,
  jobs: readonly CellJob[],
  workers: number | undefined,
): Promise<CellResult[]> {
  const progress = createProgress(io);
  try {
    return await runCells(jobs, {
      ...(workers !== undefined ? { workers } : {}),
      onDone: (done, total) => progress.update(done / total, `${done}/${total} cells`),
    });
  } finally {
    progress.done();
  }
}

export async function sweep(io: CliIo, input: SweepInput): Promise<{ report: SweepReport }> {
  const spec = sweepSpec(input);
  const results = await runSweepCells(io, sweepJobs(spec), input.workers);
  return { report: assembleSweep(spec, results) };
}

/** The report from every cell's result, in grid order: one run, or merged shards. */
export function assembleSweep(spec: SweepSpec, results: readonly CellResult[]): SweepReport {
  const pairs = sweepPairs(spec);
  if (results.length !== pairs.length + 1 || pairs.length === 0) {
    throw new Error(`sweep: ${results.length} results for ${pairs.length} cells and the reference`);
  }
  const reference = results[pairs.length]!.summary;
  const affinity = spec.affinity !== undefined ? { affinity: spec.affinity } : {};
  const grid: SweepCell[] = pairs.map(({ window, prefixLength }, i) => {
    const options: Record<string, unknown> = { window, prefixLength, ...affinity };
    return { window, prefixLength, result: { ...results[i]!.summary, options } };
  });
  const last = results[results.length - 1]!;
  const { best, reason } = chooseBest(grid, spec.objective);
  return {
    format: 'kvroute-sim-sweep/v1',
    command: 'sweep',
    scenario: spec.scenario,
    scenarioOptions: { ...results[0]!.scenarioOptions, ...(spec.displayOptions ?? {}) },
    ranks: last.ranks,
    profile: spec.profile,
    seed: spec.seed,
    policy: spec.policy,
    objective: spec.objective,
    windows: spec.windows.filter((w) => pairs.some((p) => p.window === w)),
    prefixLengths: spec.prefixLengths.filter((l) => pairs.some((p) => p.prefixLength === l)),
    grid,
    best: { window: best.window, prefixLength: best.prefixLength },
    reason: reason + sweepNotes(best, reference, spec.objective),
    reference,
    ...(spec.router !== undefined ? { router: spec.router } : {}),
  };
}

function markerLabel(e: ClusterEvent): string {
  if (e.kind === 'rank-down') return `rank ${e.rank} down`;
  if (e.kind === 'rank-up') return `rank ${e.rank} back (cold)`;
  return `scale to ${e.ranks} ranks`;
}
