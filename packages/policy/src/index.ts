// @kvroute/policy public entry point. See README.md for the API, config and each method.
export {
  AFFINITY_DEFAULTS,
  AFFINITY_KINDS,
  type AffinityStats,
  RoutingKeyAffinity,
} from './affinity/routing-key.ts';
export { defineMethod } from './define-method.ts';
export {
  type BeginContext,
  createDispatcher,
  type Dispatcher,
  type DispatcherConfig,
  type DispatcherStats,
  type DispatchTicket,
} from './dispatcher.ts';
export {
  NoHealthyRankError,
  PolicyConfigError,
  PolicyRangeError,
  RoutedRankError,
  TokenIdRangeError,
} from './errors.ts';
export { blockKey, chainedBlockKeys, rootKey } from './hashing/block-keys.ts';
export { jumpRank, jumpRankOf } from './hashing/chained.ts';
export { MAGLEV_TABLE_SIZE, maglevEntry, maglevTable } from './hashing/maglev.ts';
export {
  digestMod,
  digestWord,
  prefixDigest,
  prefixKeyLength,
  tokenBytes,
  tokenDigest,
  tokenDigestPortable,
  validateTokenIds,
} from './hashing/prefix-digest.ts';
export {
  type EngineBlockHash,
  KvBlockIndex,
  type KvBlockIndexOptions,
  type KvBlockIndexStats,
} from './kv-index/block-index.ts';
export {
  createLoadTracker,
  type LoadClaim,
  type LoadTracker,
  type LoadTrackerOptions,
  MAX_REQUEST_TOKENS,
  requestTokens,
} from './load-tracker.ts';
export { CACHE_AWARE_OPTIONS } from './methods/cache-aware.ts';
export { CONSISTENT_HASH_OPTIONS } from './methods/consistent-hash.ts';
export { PREFIX_MATCH_DEFAULTS, PREFIX_MATCH_OPTIONS } from './methods/prefix-match.ts';
export {
  describeRange,
  type EnumOptionSpec,
  isOptionKey,
  type NumericOptionSpec,
  type OptionSpec,
  type OptionsSchema,
  type OptionValues,
  optionFlag,
  parseAssignments,
  parseNumber,
  parseScalar,
  readInt,
  readNumber,
  readOption,
  readOptions,
} from './options.ts';
export { failoverRank, healthyTotals, leastLoaded, leastLoadedCool } from './pickers.ts';
export {
  isNumericOption,
  type MethodOptionEntry,
  methodNames,
  methodOptionCatalog,
  methodOptionSchema,
  methodRegistry,
  optionHelp,
} from './registry.ts';
export type {
  Decision,
  DecisionReason,
  DispatchContext,
  KvIndexView,
  LoadQueries,
  LoadTotals,
  Method,
  MethodContext,
  MethodFactory,
  PrefixDigests,
  RankState,
  RouteRequest,
  TicketOutcome,
} from './types.ts';
export { promptLength } from './types.ts';
