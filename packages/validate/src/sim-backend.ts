// What validate needs from the rest of the simulator, behind one small interface so the
// harness can be tested against a fake target without running the engine, and so the
// command's wiring to sim-core sits in one place. All imports are static: the GPU
// worker's device script runs this command from an esbuild bundle.
import { createDispatcher, type DispatcherConfig, methodNames } from '@kvroute/policy';
import { checkName } from '@kvroute/sim/cli';
import {
  buildWorkload,
  type CostModel,
  getProfile,
  loadProfileFile,
  profileNames,
  simulatePlan,
  type WorkloadPlan,
  type WorkloadRequest,
} from '@kvroute/sim/model';
import { materializePlan } from './plan.ts';
import type { OutcomeRecord, PlanRequest, ValidatePlan } from './types.ts';

function asWorkloadRequest(r: PlanRequest): WorkloadRequest {
  const ids = r.inputIds instanceof Uint32Array ? r.inputIds : Uint32Array.from(r.inputIds);
  return { ...r, inputIds: ids };
}

export type SimPlan = ValidatePlan & { events?: unknown[] };

export interface SimulateOptions {
  policy: Record<string, unknown> & { method: string };
  ranks: number;
  profile: CostModel;
  seed: string | number;
  rank: { kvCapacityTokens: number; pageSize: number; chunkedPrefillSize: number };
}

export interface SimBackend {
  methodNames(): string[];
  profileNames(): string[];
  /** Throws the policy package's coded error when the config is invalid. */
  checkPolicy(config: Record<string, unknown> & { method: string }): void;
  loadProfile(which: { profile: string } | { profileFile: string }): CostModel;
  buildPlan(scenario: string, options: Record<string, unknown>, seed: string | number): SimPlan;
  /** Per-request outcomes in plan time (ms since the first arrival of the run). */
  simulate(plan: SimPlan, opts: SimulateOptions): OutcomeRecord[];
}

export const defaultBackend: SimBackend = {
  methodNames: () => methodNames(),
  profileNames: () => profileNames(),
  checkPolicy(config) {
    createDispatcher(config as Parameters<typeof createDispatcher>[0]);
  },
  loadProfile(which) {
    if ('profileFile' in which) return loadProfileFile(which.profileFile);
    return getProfile(checkName('profile', which.profile, profileNames()));
  },
  buildPlan(scenario, options, seed) {
    return materializePlan(buildWorkload(scenario, options, seed));
  },
  simulate(plan, opts) {
    const workload: WorkloadPlan = {
      ...plan,
      clients: plan.clients.map((c) => c.map(asWorkloadRequest)),
      requests: plan.requests.map(asWorkloadRequest),
      events: [],
    };
    const { records } = simulatePlan(workload, {
      policy: opts.policy as DispatcherConfig,
      ranks: opts.ranks,
      profile: opts.profile,
      seed: opts.seed,
      rank: opts.rank,
    });
    return records.map((r) => ({
      id: r.id,
      ok: true,
      startMs: r.arrivalMs,
      ttftMs: r.ttftMs,
      endMs: r.endMs,
      promptTokens: r.inputTokens,
      cachedTokens: r.cachedTokens,
      rank: r.rank,
    }));
  },
};
