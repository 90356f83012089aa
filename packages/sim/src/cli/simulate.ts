// Runs the simulations a command asked for and shapes the results into reports, driving the
// progress bar. The engine and the metrics are sim-core's; this file only sequences them.

import { methodRegistry } from '@kvroute/policy';
import { oneBigCacheBound } from '../compare/bound.ts';
import { RECOMMENDED } from '../compare/policy-comparison.ts';
import type { RouterModel } from '../compare.ts';
import { hostTier } from '../entities/presets.ts';
import type { CellJob, CellResult, ProfileRef } from '../parallel/cell.ts';
import { runCells } from '../parallel/pool.ts';
import { fmtInt, fmtMs, fmtPct } from '../report/format.ts';
import { chooseBest, settingLabel, sweepNotes, worseThanCurrent } from '../report/sweep-choice.ts';
import type {
  PolicySamples,
  RunExtras,
  RunReport,
  SweepCell,
  SweepLoadReport,
  SweepObjective,
  SweepReport,
} from '../report/types.ts';
import {
  planSweep,
  type RejectedSetting,
  type SweepAxis,
  type SweepSetting,
  sameSetting,
} from '../sweep/axes.ts';
import { routerConfigYaml } from '../sweep/router-config.ts';
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
  /** Policy switches at given times (--switch-policy), added to the plan's events. */
  switches?: ClusterEvent[];
  /** Replay of a recorded trace: apply (and mark) the router's recorded policy switches. */
  recordedSwitches?: boolean;
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
    const built = buildWorkload(input.scenario, input.scenarioOptions, input.seed);
    for (const w of built.warnings ?? []) io.stderr.write(`warning: ${w}\n`);
    const added: ClusterEvent[] = [...(input.switches ?? [])];
    if (input.recordedSwitches) {
      for (const s of built.recorded?.switches ?? []) {
        added.push({
          atMs: s.timestamp,
          kind: 'policy-switch',
          policy: { ...s.options, method: s.method },
        });
      }
    }
    const plan = added.length > 0 ? { ...built, events: [...built.events, ...added] } : built;
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
    // Only the HTML report draws these; the bound replays the whole plan once more. Its cache
    // is the pool the ranks ran with (--kv-capacity, --mem-fraction, --engine move it off the
    // profile's), or the bound would compare the policies with a cluster they never had.
    const extras = (): RunExtras => ({
      markers: plan.events.map((e) => ({
        atMs: e.atMs,
        label: markerLabel(e),
        kind: e.kind === 'policy-switch' ? ('policy' as const) : ('cluster' as const),
      })),
      boundHitRate: oneBigCacheBound(plan, result.engine.kvCapacityTokens * result.ranks).hitRate,
    });
    return { report, samples, extras };
  } finally {
    progress.done();
  }
}

/** The offered-load axis of a sweep (`--load`): the whole grid runs at each point. */
export interface SweepLoad {
  axis: 'rate' | 'concurrency';
  /** Requests per second or concurrency the multipliers multiply. */
  base: number;
  multipliers: readonly number[];
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
  /** Methods to sweep, in order (each gets its own option grid, see sweep/axes.ts). */
  policies: readonly string[];
  /** Option axes as given: option name -> LIST or range text. */
  axes?: ReadonlyMap<string, string>;
  /** The dispatcher's affinity config for every cell; undefined when off. */
  affinity?: Record<string, unknown>;
  objective: SweepObjective;
  /** Only cells within this many hit-rate points of the best hit rate compete. */
  hitRateWithin?: number;
  /**
   * The setting deployed now (e.g. the one a recorded trace was routed with): run as one more
   * cell on the same workload, reported as `current`, and compared with in the verdict.
   */
  current?: SweepSetting;
  /** Worker threads (default: one per core). */
  workers?: number;
  engine?: EngineFlags;
  /** Router replicas and index source for every cell (--replicas, --index-source, ...). */
  router?: RouterModel;
  load?: SweepLoad;
}

/**
 * What a sweep's report is assembled from besides its cells: written into shard files, so plain
 * data (the profile by name, the axes and settings resolved, the engine options resolved).
 */
export interface SweepSpec
  extends Pick<
    SweepInput,
    | 'scenario'
    | 'scenarioOptions'
    | 'displayOptions'
    | 'seed'
    | 'ranks'
    | 'profileRef'
    | 'affinity'
    | 'objective'
    | 'hitRateWithin'
    | 'current'
    | 'router'
  > {
  profile: string;
  policies: string[];
  axes: SweepAxis[];
  /** Every setting to run, in report order, and those the methods refused. */
  settings: SweepSetting[];
  rejected: RejectedSetting[];
  /** Rank model and client load, resolved (engine flags). */
  engine?: EngineOptions;
  /** With --load: each point's multiplier, value and resolved engine options. */
  load?: {
    axis: 'rate' | 'concurrency';
    base: number;
    points: { multiplier: number; value: number; engine: EngineOptions }[];
  };
}

export const SHARD_FORMAT = 'kvroute-sim-sweep-shard/v2';

export interface SweepShard {
  format: typeof SHARD_FORMAT;
  shard: { index: number; count: number };
  sweep: SweepSpec;
  /** Cells in the whole sweep. */
  total: number;
  cells: { index: number; result: CellResult }[];
}

export function sweepSpec(input: SweepInput): SweepSpec {
  const grid = planSweep(input.policies, input.axes ?? new Map());
  if (input.current !== undefined) {
    // The current setting must be one the method accepts, checked like any cell.
    methodRegistry[input.current.method]?.({ ...input.current.options });
  }
  const spec: SweepSpec = {
    scenario: input.scenario,
    scenarioOptions: input.scenarioOptions,
    ...(input.displayOptions ? { displayOptions: input.displayOptions } : {}),
    seed: input.seed,
    ...(input.ranks !== undefined ? { ranks: input.ranks } : {}),
    profile: input.profile.name,
    profileRef: input.profileRef,
    policies: [...input.policies],
    axes: grid.axes,
    settings: grid.settings,
    rejected: grid.rejected,
    ...(input.affinity !== undefined ? { affinity: input.affinity } : {}),
    objective: input.objective,
    ...(input.hitRateWithin !== undefined ? { hitRateWithin: input.hitRateWithin } : {}),
    ...(input.current !== undefined ? { current: input.current } : {}),
    ...(input.engine !== undefined ? { engine: engineOptions(input.profile, input.engine) } : {}),
    ...(input.router !== undefined && Object.keys(input.router).length > 0
      ? { router: input.router }
      : {}),
  };
  if (input.load !== undefined) {
    const { axis, base } = input.load;
    spec.load = {
      axis,
      base,
      points: input.load.multipliers.map((multiplier) => {
        const value =
          axis === 'rate' ? base * multiplier : Math.max(1, Math.round(base * multiplier));
        const engine: EngineFlags =
          axis === 'rate'
            ? { ...(input.engine ?? { settings: {} }), requestRate: value }
            : { ...(input.engine ?? { settings: {} }), maxConcurrency: value };
        return { multiplier, value, engine: engineOptions(input.profile, engine) };
      }),
    };
  }
  return spec;
}

/** The method a sweep's verdict compares with: the recommended default, with its defaults. */
export const REFERENCE_METHOD = RECOMMENDED;

/** Cells per load point: the settings, the reference, then the current setting if any. */
function cellsPerPoint(spec: SweepSpec): number {
  return spec.settings.length + 1 + (spec.current !== undefined ? 1 : 0);
}

/**
 * One cell job per setting, then the reference (the recommended default method), then the
 * current setting; all of it once per load point. Every cell builds the same plan, so all
 * see the same requests.
 */
export function sweepJobs(spec: SweepSpec): CellJob[] {
  const affinity = spec.affinity !== undefined ? { affinity: spec.affinity } : {};
  const points = spec.load?.points.map((p) => p.engine) ?? [spec.engine];
  const jobs: CellJob[] = [];
  for (const engine of points) {
    const job = (policy: CellJob['policy']): CellJob => ({
      scenario: spec.scenario,
      scenarioOptions: spec.scenarioOptions,
      seed: spec.seed,
      ...(spec.ranks !== undefined ? { ranks: spec.ranks } : {}),
      profile: spec.profileRef,
      policy,
      ...(engine !== undefined ? { engine } : {}),
      ...(spec.router !== undefined ? { router: spec.router } : {}),
    });
    for (const s of spec.settings) jobs.push(job({ method: s.method, ...s.options, ...affinity }));
    jobs.push(job({ method: REFERENCE_METHOD, ...affinity }));
    if (spec.current !== undefined) {
      jobs.push(job({ method: spec.current.method, ...spec.current.options, ...affinity }));
    }
  }
  return jobs;
}

/** Cell indices shard `index` (1-based) of `count` runs: every count-th, a deterministic share. */
export function shardIndices(total: number, index: number, count: number): number[] {
  const out: number[] = [];
  for (let i = index - 1; i < total; i += count) out.push(i);
  return out;
}

/**
 * The order a sweep's cells run in: cells of a method other than the grid's own (the
 * reference, the current setting) first, then the grid grouped by prefix length (in index
 * order within a group). The odd cells are one or two among many similar ones and often the
 * slowest (the reference walks its prefix index): run last by index, the reference cell of a
 * 16-cell Mooncake-trace sweep (1.7 s, against about 1 s for the others) left one of two
 * threads idle at the end, and taking it first made the sweep about 8% faster. Cells of one
 * prefix length hash the same prefixes, which a thread keeps between its cells, and each
 * thread starts on its own contiguous run of this order (pool.ts), so grouping them lets each
 * thread hash a prefix length once. The results do not depend on the order.
 */
export function oddMethodsFirst(jobs: readonly CellJob[]): number[] {
  const counts = new Map<string, number>();
  for (const j of jobs) counts.set(j.policy.method, (counts.get(j.policy.method) ?? 0) + 1);
  let common = '';
  let most = 0;
  for (const [method, n] of counts) {
    if (n > most) {
      common = method;
      most = n;
    }
  }
  const odd: number[] = [];
  const rest: number[] = [];
  for (let i = 0; i < jobs.length; i++) (jobs[i]!.policy.method === common ? rest : odd).push(i);
  const prefixLength = (i: number) => {
    const p = (jobs[i]!.policy as { prefixLength?: unknown }).prefixLength;
    return typeof p === 'number' ? p : -1;
  };
  // Array.prototype.sort is stable: index order within a prefix length.
  rest.sort((a, b) => prefixLength(a) - prefixLength(b));
  return [...odd, ...rest];
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
      order: oddMethodsFirst(jobs),
      onDone: (done, total) => progress.update(done / total, `${done}/${total} cells`),
    });
  } finally {
    progress.done();
  }
}

/**
 * Runs a sweep and returns its report: one SweepReport, or with `load` a SweepLoadReport with
 * one per load point. The cells (every setting's full result) are `report.grid`, the
 * current setting's `report.current`; `findCell` looks one setting up.
 */
export async function runSweep(
  io: CliIo,
  input: SweepInput,
): Promise<SweepReport | SweepLoadReport> {
  const spec = sweepSpec(input);
  const results = await runSweepCells(io, sweepJobs(spec), input.workers);
  return assembleSweep(spec, results);
}

/** The cell of `setting` in a report (its grid or its current setting), if it ran. */
export function findCell(report: SweepReport, setting: SweepSetting): SweepCell | undefined {
  const hit = report.grid.find((c) => sameSetting(c, setting));
  if (hit !== undefined) return hit;
  return report.current !== undefined && sameSetting(report.current, setting)
    ? report.current
    : undefined;
}

/** The report from every cell's result, in job order: one run, or merged shards. */
export function assembleSweep(
  spec: SweepSpec,
  results: readonly CellResult[],
): SweepReport | SweepLoadReport {
  const per = cellsPerPoint(spec);
  const points = spec.load?.points ?? [undefined];
  if (results.length !== per * points.length || spec.settings.length === 0) {
    throw new Error(`sweep: ${results.length} results for ${per * points.length} cells`);
  }
  const reports = points.map((_, i) => assemblePoint(spec, results.slice(i * per, (i + 1) * per)));
  if (spec.load === undefined) return reports[0]!;
  const load = spec.load;
  const changes: string[] = [];
  for (let i = 1; i < reports.length; i++) {
    const a = reports[i - 1]!.best;
    const b = reports[i]!.best;
    if (!sameSetting(a, b)) {
      changes.push(
        `the best setting changes between x${load.points[i - 1]!.multiplier} and x${load.points[i]!.multiplier}: ${settingLabel(a)} below, ${settingLabel(b)} above`,
      );
    }
  }
  return {
    format: 'kvroute-sim-sweep-load/v1',
    axis: load.axis,
    base: load.base,
    points: load.points.map((p, i) => ({
      multiplier: p.multiplier,
      value: p.value,
      best: reports[i]!.best,
      report: reports[i]!,
    })),
    changes,
    routerConfig: reports[0]!.routerConfig,
  };
}

/** v1 readers find a cell's window and prefix length at its top level. */
function legacyKeys(options: Record<string, number | string>) {
  return {
    ...(typeof options.window === 'number' ? { window: options.window } : {}),
    ...(typeof options.prefixLength === 'number' ? { prefixLength: options.prefixLength } : {}),
  };
}

function assemblePoint(spec: SweepSpec, results: readonly CellResult[]): SweepReport {
  const n = spec.settings.length;
  const reference = results[n]!.summary;
  const affinity = spec.affinity !== undefined ? { affinity: spec.affinity } : {};
  const cell = (s: SweepSetting, r: CellResult): SweepCell => ({
    method: s.method,
    options: s.options,
    ...legacyKeys(s.options),
    result: { ...r.summary, options: { ...s.options, ...affinity } },
  });
  const grid = spec.settings.map((s, i) => cell(s, results[i]!));
  const current = spec.current !== undefined ? cell(spec.current, results[n + 1]!) : undefined;
  const last = results[results.length - 1]!;
  const { best, reason } = chooseBest(grid, spec.objective, spec.hitRateWithin);
  const values = (option: string) => [
    ...new Set(
      grid.map((c) => c.options[option]).filter((v): v is number => typeof v === 'number'),
    ),
  ];
  const header = [
    `kvroute-sim sweep: best ${spec.objective}${spec.hitRateWithin !== undefined ? ` with hit rate within ${spec.hitRateWithin} points of the best` : ''} of ${grid.length} settings on ${spec.scenario}, ${last.ranks} ranks, profile ${spec.profile}, seed ${String(spec.seed)}`,
    `predicted: hit rate ${fmtPct(best.result.hitRate)}, TTFT p50 ${fmtMs(best.result.ttftMs.p50)} ms, p99 ${fmtMs(best.result.ttftMs.p99)} ms, ${fmtInt(best.result.throughputTokPerS)} tok/s, over every request (a non-streamed one's first token too, which a router cannot measure: replay --observed compares only what it measured)`,
  ];
  const worse = worseThanCurrent(best, current, spec.objective);
  if (worse !== undefined) header.push(`WARNING: ${worse}`);
  const group = results[0]!.scenarioOptions.group;
  if (typeof group === 'string' && group !== '') {
    // A group that sets its own method ignores the top-level keys.
    header.push(
      `for worker group ${group} only: put these keys in its entry of models: (model: ${group}), or POST /policy with "model": "${group}"; as top-level keys they reach only groups that set no method of their own`,
    );
  }
  return {
    format: 'kvroute-sim-sweep/v1',
    command: 'sweep',
    scenario: spec.scenario,
    scenarioOptions: { ...results[0]!.scenarioOptions, ...(spec.displayOptions ?? {}) },
    ranks: last.ranks,
    profile: spec.profile,
    seed: spec.seed,
    policy: spec.policies.join(','),
    policies: spec.policies,
    objective: spec.objective,
    ...(spec.hitRateWithin !== undefined ? { hitRateWithin: spec.hitRateWithin } : {}),
    axes: spec.axes,
    windows: values('window'),
    prefixLengths: values('prefixLength'),
    grid,
    rejected: spec.rejected,
    best: { method: best.method, options: best.options, ...legacyKeys(best.options) },
    reason: reason + sweepNotes(best, reference, spec.objective, current),
    reference,
    ...(current !== undefined ? { current } : {}),
    routerConfig: routerConfigYaml(best, spec.affinity, header),
    ...(spec.router !== undefined ? { router: spec.router } : {}),
  };
}

/** A policy switch's marker: the method and the options it sets, e.g. 'switch to prefix_match window=64'. */
export function switchLabel(policy: ClusterEvent['policy']): string {
  if (!policy) return 'policy switch';
  const { method, options, affinity: _a, ...top } = policy;
  const opts = { ...top, ...((options as Record<string, unknown> | undefined) ?? {}) };
  const parts = Object.entries(opts).map(([k, v]) => `${k}=${String(v)}`);
  return `switch to ${method}${parts.length > 0 ? ` ${parts.join(' ')}` : ''}`;
}

function markerLabel(e: ClusterEvent): string {
  if (e.kind === 'policy-switch') return switchLabel(e.policy);
  if (e.kind === 'rank-down') return `rank ${e.rank} down`;
  if (e.kind === 'rank-up') return `rank ${e.rank} back (cold)`;
  return `scale to ${e.ranks} ranks`;
}
