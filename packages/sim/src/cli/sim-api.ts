// Everything the CLI takes from sim-core, in one place, so the commands read as plain calls.
export { type ComparisonRun, runComparisonDetailed } from '../compare.ts';
export type { CostModel } from '../cost/cost-model.ts';
export { loadProfileFile } from '../cost/cost-model.ts';
export { getProfile, profileNames } from '../cost/profiles.ts';
export { buildWorkload, scenarioList, scenarioNames } from '../workloads/registry.ts';

/** The scenario `replay FILE` runs (workloads/replay.ts: options file, speedup, skipInvalid). */
export const REPLAY_SCENARIO = 'replay';
