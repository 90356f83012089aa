// SGLang's `--load-balance-method` names mapped to method factories. Keep this a plain object
// literal: adding a method is one import and one line, and everything that iterates the
// registry (methodNames, the conformance suite, the benchmark) picks it up.
import { createCacheAware } from './methods/cache-aware.ts';
import { createConsistentHash } from './methods/consistent-hash.ts';
import { createFollowBootstrapRoom } from './methods/follow-bootstrap-room.ts';
import { createPrefixMatch } from './methods/prefix-match.ts';
import { createRoundRobin } from './methods/round-robin.ts';
import { createTotalRequests } from './methods/total-requests.ts';
import { createTotalTokens } from './methods/total-tokens.ts';
import type { MethodFactory } from './types.ts';

export const methodRegistry: Readonly<Record<string, MethodFactory>> = {
  round_robin: createRoundRobin,
  total_requests: createTotalRequests,
  total_tokens: createTotalTokens,
  follow_bootstrap_room: createFollowBootstrapRoom,
  prefix_match: createPrefixMatch,
  consistent_hash: createConsistentHash,
  cache_aware: createCacheAware,
};

/** Registered method names, in registry order. */
export function methodNames(): string[] {
  return Object.keys(methodRegistry);
}
