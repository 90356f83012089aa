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
export {
  createLoadTracker,
  type LoadClaim,
  type LoadTracker,
  type LoadTrackerOptions,
  MAX_REQUEST_TOKENS,
  requestTokens,
} from './load-tracker.ts';
export { PREFIX_MATCH_DEFAULTS } from './methods/prefix-match.ts';
export { readInt, readNumber } from './options.ts';
export { leastLoaded, leastLoadedCool } from './pickers.ts';
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
  TicketOutcome,
} from './types.ts';
export { promptLength } from './types.ts';
