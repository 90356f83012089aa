// One cell of a sweep or comparison grid: a workload (built from scenario, options and seed),
// one dispatcher config, a rank count and a cost profile, described in plain data so it can
// cross a worker_threads boundary and be written into a shard file. Running a cell is the
// same function in the main thread and in a worker, so a parallel run is byte-identical to
// a serial one by construction (the engine reads no clock and no global random source).
import type { DispatcherConfig } from '@kvroute/policy';
import { type RouterModel, runComparisonDetailed } from '../compare.ts';
import { type CostModel, loadProfileFile } from '../cost/cost-model.ts';
import { getProfile } from '../cost/profiles.ts';
import type { EngineSettings } from '../entities/presets.ts';
import { SourceDigests } from '../host/prefix-digests.ts';
import type { PolicyRunSummary } from '../metrics/types.ts';
import { buildWorkload } from '../workloads/registry.ts';
import type { WorkloadPlan } from '../workloads/types.ts';

/** A cost profile by built-in name or by `kvroute-cost-profile/v1` file path. */
export type ProfileRef = { name: string } | { file: string };

export interface CellJob {
  scenario: string;
  scenarioOptions: Record<string, unknown>;
  seed: string | number;
  ranks?: number;
  profile: ProfileRef;
  policy: DispatcherConfig;
  /** Rank model and client load (engine preset and settings, concurrency cap, request rate). */
  engine?: { engine?: EngineSettings; maxConcurrency?: number; requestRate?: number };
  /** Router replicas, index source and load polls (plain data, as SimulateOptions takes them). */
  router?: RouterModel;
}

export interface CellResult {
  summary: PolicyRunSummary;
  /** The rank count the cell ran on (the scenario's when the job gave none). */
  ranks: number;
  /** The plan's resolved scenario options, as reports show them. */
  scenarioOptions: Record<string, unknown>;
}

export function loadProfileRef(ref: ProfileRef): CostModel {
  return 'file' in ref ? loadProfileFile(ref.file) : getProfile(ref.name);
}

/** Plans and profiles built once per thread and reused by the cells that share them. */
export class CellContext {
  private readonly plans = new Map<string, WorkloadPlan>();
  /** The current plan's prefix digests, shared by its cells. */
  private digests = new SourceDigests();
  private readonly profiles = new Map<string, CostModel>();

  run(job: CellJob): CellResult {
    const planKey = JSON.stringify([job.scenario, job.scenarioOptions, job.seed]);
    let plan = this.plans.get(planKey);
    if (plan === undefined) {
      plan = buildWorkload(job.scenario, job.scenarioOptions, job.seed);
      // Grids share one workload; keep only the latest so a long list of distinct ones
      // does not pile up.
      this.plans.clear();
      this.plans.set(planKey, plan);
      this.digests = new SourceDigests();
    }
    const profileKey = JSON.stringify(job.profile);
    let profile = this.profiles.get(profileKey);
    if (profile === undefined) {
      profile = loadProfileRef(job.profile);
      this.profiles.set(profileKey, profile);
    }
    const { result } = runComparisonDetailed({
      scenario: job.scenario,
      plan,
      policies: [job.policy],
      ...(job.ranks !== undefined ? { ranks: job.ranks } : {}),
      profile,
      seed: job.seed,
      ...(job.engine ?? {}),
      ...(job.router ? { router: job.router } : {}),
      prefixDigests: this.digests,
    });
    return {
      summary: result.policies[0]!,
      ranks: result.ranks,
      scenarioOptions: plan.options ?? job.scenarioOptions,
    };
  }
}
