// Runs the simulations a command asked for and shapes the results into reports, driving the
// progress bar. The engine and the metrics are sim-core's; this file only sequences them.

import { hostTier } from '../entities/presets.ts';
import { chooseBest } from '../report/sweep-choice.ts';
import type {
  PolicySamples,
  RunReport,
  SweepCell,
  SweepObjective,
  SweepReport,
} from '../report/types.ts';
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
  engine?: EngineFlags;
}

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
): { report: RunReport; samples: PolicySamples[] } {
  const progress = createProgress(io);
  const n = input.policies.length;
  try {
    const { result, records } = runComparisonDetailed({
      scenario: input.scenario,
      scenarioOptions: input.scenarioOptions,
      policies: input.policies.map((p) => p.config),
      ranks: input.ranks,
      profile: input.profile,
      seed: input.seed,
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
    const samples = result.policies.map((s, i) => {
      const recs = records[i] ?? [];
      const byArrival = [...recs].sort((a, b) => a.arrivalMs - b.arrivalMs || a.id - b.id);
      return {
        policy: s.policy,
        ttftMs: recs.map((r) => r.ttftMs),
        ttftByArrivalMs: byArrival.map((r) => r.ttftMs),
      };
    });
    return { report, samples };
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
  policy: string;
  /** The dispatcher's affinity config for every cell; undefined when off. */
  affinity?: Record<string, unknown>;
  windows: readonly number[];
  prefixLengths: readonly number[];
  objective: SweepObjective;
  engine?: EngineFlags;
}

export function sweep(io: CliIo, input: SweepInput): { report: SweepReport } {
  // One plan for the whole grid: every cell sees exactly the same requests.
  const plan = buildWorkload(input.scenario, input.scenarioOptions, input.seed);
  const pairs: { window: number; prefixLength: number }[] = [];
  for (const prefixLength of input.prefixLengths) {
    for (const window of input.windows)
      if (prefixLength >= window) pairs.push({ window, prefixLength });
  }
  const progress = createProgress(io);
  const grid: SweepCell[] = [];
  let ranks = input.ranks ?? plan.ranks;
  try {
    pairs.forEach(({ window, prefixLength }, i) => {
      const affinity = input.affinity !== undefined ? { affinity: input.affinity } : {};
      const { result } = runComparisonDetailed({
        scenario: input.scenario,
        plan,
        policies: [{ method: input.policy, window, prefixLength, ...affinity }],
        ranks: input.ranks,
        profile: input.profile,
        seed: input.seed,
        ...engineOptions(input.profile, input.engine),
        onProgress: (f) =>
          progress.update(
            (i + f) / pairs.length,
            `window=${window} prefix-length=${prefixLength} (${i + 1}/${pairs.length})`,
          ),
      });
      ranks = result.ranks;
      const summary = result.policies[0]!;
      const options: Record<string, unknown> = { window, prefixLength, ...affinity };
      grid.push({ window, prefixLength, result: { ...summary, options } });
    });
  } finally {
    progress.done();
  }
  const { best, reason } = chooseBest(grid, input.objective);
  return {
    report: {
      format: 'kvroute-sim-sweep/v1',
      command: 'sweep',
      scenario: input.scenario,
      scenarioOptions: {
        ...(plan.options ?? input.scenarioOptions),
        ...(input.displayOptions ?? {}),
      },
      ranks,
      profile: input.profile.name,
      seed: input.seed,
      policy: input.policy,
      objective: input.objective,
      windows: input.windows.filter((w) => pairs.some((p) => p.window === w)),
      prefixLengths: input.prefixLengths.filter((l) => pairs.some((p) => p.prefixLength === l)),
      grid,
      best: { window: best.window, prefixLength: best.prefixLength },
      reason,
    },
  };
}
