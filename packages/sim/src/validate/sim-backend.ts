// What validate needs from the rest of the simulator, behind one small interface so the
// harness can be tested against a fake target without running the engine, and so the
// command's wiring to sim-core sits in one place. All imports are static: the GPU
// worker's device script runs this command from an esbuild bundle.
import { createDispatcher, methodNames } from '@kvroute/policy';
import { UsageError } from '../cli/errors.ts';
import type { CostModel } from '../cost/cost-model.ts';
import { loadProfileFile } from '../cost/cost-model.ts';
import { getProfile, profileNames } from '../cost/profiles.ts';
import type { OutcomeRecord, ValidatePlan } from './types.ts';

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
    const valid = profileNames();
    if (!valid.includes(which.profile)) {
      throw new UsageError(
        `unknown profile '${which.profile}'; valid profiles: ${valid.join(', ')}`,
      );
    }
    return getProfile(which.profile);
  },
  buildPlan() {
    throw new Error('buildPlan: sim-core workloads not wired yet');
  },
  simulate() {
    throw new Error('simulate: sim-core engine not wired yet');
  },
};
