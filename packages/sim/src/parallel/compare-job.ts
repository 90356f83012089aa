// One simulation of the policy comparison (`pnpm compare`): a workload built from scenario,
// options and seed (open loop at a request rate when one is given), one dispatcher config and
// a built-in profile, as plain data, so the comparison's runs go to worker threads like sweep
// cells. It makes exactly the call the comparison made in one thread, so the report is the same
// bytes whatever the worker count.
import type { DispatcherConfig } from '@kvroute/policy';
import type { CostModel } from '../cost/cost-model.ts';
import { getProfile } from '../cost/profiles.ts';
import type { PolicyRunSummary, RequestRecord } from '../metrics/types.ts';
import { simulatePlan } from '../simulate.ts';
import { withRequestRate } from '../workloads/load.ts';
import { buildWorkload } from '../workloads/registry.ts';
import type { WorkloadPlan } from '../workloads/types.ts';

export interface CompareJob {
  scenario: string;
  scenarioOptions: Record<string, unknown>;
  seed: string | number;
  /** A built-in profile name. */
  profile: string;
  policy: DispatcherConfig;
  /** Open loop at this many requests/s (the load curves); absent: the plan's own arrivals. */
  requestRate?: number;
  /** Return the per-request records too (keys-moved figures, a scenario's own pace). */
  records?: boolean;
}

export interface CompareJobResult {
  summary: PolicyRunSummary;
  records?: RequestRecord[];
}

/** The latest plan and the profiles, built once per thread and reused by the jobs sharing them. */
export class CompareContext {
  private planKey = '';
  private plan: WorkloadPlan | undefined;
  private readonly profiles = new Map<string, CostModel>();

  run(job: CompareJob): CompareJobResult {
    const key = JSON.stringify([job.scenario, job.scenarioOptions, job.seed, job.requestRate]);
    if (key !== this.planKey || this.plan === undefined) {
      let plan = buildWorkload(job.scenario, job.scenarioOptions, job.seed);
      if (job.requestRate !== undefined) plan = withRequestRate(plan, job.requestRate, job.seed);
      this.plan = plan;
      this.planKey = key;
    }
    let profile = this.profiles.get(job.profile);
    if (profile === undefined) {
      profile = getProfile(job.profile);
      this.profiles.set(job.profile, profile);
    }
    const run = simulatePlan(this.plan, { policy: job.policy, profile, seed: job.seed });
    return job.records ? { summary: run.summary, records: run.records } : { summary: run.summary };
  }
}
