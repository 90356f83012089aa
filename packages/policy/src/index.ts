// @kvroute/policy public entry point. See README.md for the API, config and each method.
export {
  AFFINITY_DEFAULTS,
  AFFINITY_KINDS,
  type AffinityStats,
  RoutingKeyAffinity,
} from './affinity/routing-key.ts';
export { defineMethod } from './define-method.ts';
export {
  createDispatcher,
  type Dispatcher,
  type DispatcherConfig,
  type DispatcherStats,
} from './dispatcher.ts';
export {
  NoHealthyRankError,
  PolicyConfigError,
  PolicyRangeError,
  RoutedRankError,
  TokenIdRangeError,
} from './errors.ts';
export { blockKey, chainedBlockKeys, rootKey } from './hashing/block-keys.ts';
export {
  digestMod,
  digestWord,
  prefixDigest,
  prefixKeyLength,
  rendezvousPick,
  rendezvousScore,
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
export { createLoadTracker, type LoadTracker, type LoadTrackerOptions } from './load-tracker.ts';
export { PREFIX_MATCH_DEFAULTS } from './methods/prefix-match.ts';
export { readInt, readNumber } from './options.ts';
export { methodNames, methodRegistry } from './registry.ts';
export type {
  Decision,
  DecisionReason,
  DispatchContext,
  KvIndexView,
  Method,
  MethodContext,
  MethodFactory,
  RankState,
  RouteRequest,
} from './types.ts';
