// @kvroute/sim, everything at once: the model plus the report renderers and the CLI. Code that
// needs less imports a sub-path instead: `@kvroute/sim/model` (engine, entities, cache, cost,
// workloads, metrics), `@kvroute/sim/report` (renderers), `@kvroute/sim/cli` (runCli and the
// helpers other CLIs built on it share).
export * from './cli/index.ts';
export * from './model.ts';
export * from './report/index.ts';
