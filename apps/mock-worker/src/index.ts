export { buildMockWorker } from './app.ts';
export {
  type EngineCallbacks,
  type EngineHandle,
  type EngineRequest,
  MockEngine,
  type RankLoadInfo,
} from './engine.ts';
export { fillerText, fillerToken, fillerTokenId, promptSeed } from './filler.ts';
export {
  KV_EVENTS_DEFAULT_ENDPOINT,
  type KvEventsOptions,
  RankEventPublisher,
  startKvEventPublishers,
} from './kv-events.ts';
export type { KvEventsConfig } from './options.ts';
export {
  type CliArgs,
  DEFAULTS,
  type FailMode,
  MockWorkerConfigError,
  type MockWorkerOptions,
  parseMockWorkerArgs,
  type ResolvedOptions,
  resolveOptions,
  USAGE,
} from './options.ts';
export {
  KvStoreClient,
  type KvStoreOptions,
  type KvStoreStats,
  type RunningKvStore,
  startKvStore,
} from './pd/kv-store.ts';
export { RealtimeScheduler } from './scheduler.ts';
export { type RunningMockWorker, type StartMockWorkerOptions, startMockWorker } from './start.ts';
