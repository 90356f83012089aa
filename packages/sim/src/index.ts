// @kvroute/sim, everything at once: the model plus the report renderers and the CLI. Code that
// needs less imports a sub-path instead: `@kvroute/sim/model` (engine, entities, cache, cost,
// workloads, metrics), `@kvroute/sim/report` (renderers), `@kvroute/sim/cli` (runCli and the
// helpers other CLIs built on it share).
export * from './cli/index.ts';
export {
  FitError,
  type FitOptions,
  type FitResult,
  fitProfile,
  PREFILL_QUANTILE,
  prefillTerms,
} from './fit/fit.ts';
export { type Observations, type ObservedRequest, readObservations } from './fit/observations.ts';
export * from './model.ts';
export { type ObservedReplayResult, replayObserved } from './replay-observed.ts';
export * from './report/index.ts';
