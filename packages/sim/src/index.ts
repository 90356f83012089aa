// @kvroute/sim public API. Other modules (cli, report, validate) may append export lines.

export type { MatchResult, RadixCacheOptions, RadixHandle } from './cache/radix-cache.ts';
export { RadixCache } from './cache/radix-cache.ts';
export type {
  CostModel,
  CostProfileSpec,
  DecodeCoefficients,
  PrefillCoefficients,
} from './cost/cost-model.ts';
export { costModelFromSpec, loadProfileFile, parseProfileSpec } from './cost/cost-model.ts';
export { getProfile, getProfileSpec, profileNames } from './cost/profiles.ts';
export type { ScheduledEvent, Scheduler } from './engine/event-queue.ts';
export { EventQueue } from './engine/event-queue.ts';
export type { RankLoad, RankModelOptions, RankRequest, RankStats } from './entities/rank.ts';
export { RankModel } from './entities/rank.ts';
