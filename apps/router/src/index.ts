// @kvroute/router public entry point. See README.md for flags, env vars and YAML keys.

export { main, type RunningRouter, SHUTDOWN_GRACE_MS, startRouter } from './cli.ts';
export {
  DEFAULT_CONFIG,
  envName,
  type HealthConfig,
  helpText,
  OPTIONS,
  type OptionSpec,
  parseArgs,
  type RouterConfig,
  readEnv,
  readYaml,
  redactConfig,
  resolveConfig,
  validateConfig,
} from './config.ts';
export { RouterConfigError, RouterError, type RouterErrorCode } from './errors.ts';
export { HealthMonitor } from './health.ts';
export { LoadPoller } from './load-poller.ts';
export { parseLoadsResponse, parseVllmMetrics, type WorkerLoad } from './load-report.ts';
export { createRouterMetrics, type RouterMetrics } from './metrics.ts';
export { type RankInfo, type RankSlot, RankTable, type Worker } from './rank-table.ts';
export {
  type BuildRouterOptions,
  buildRouter,
  dispatcherConfig,
  type RouterState,
} from './router.ts';
