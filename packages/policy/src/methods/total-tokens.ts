// total_tokens: the healthy rank with the fewest in-flight tokens, then the fewest requests.
//
// Algorithm: the lexicographic minimum (tokens, requests) over healthy ranks (the tracker's
// load index, or one pass); remaining ties go to the dispatcher's rotating tie-breaker
// (SGLang sent them to rank 0 and considered inactive ranks).
// Cost: O(log ranks) through the load tracker's index when the host dispatches on the
// tracker's own ranks (Dispatcher.begin without a view); else one pass over the healthy ranks.
// Failure modes: cache-blind, so shared prefixes scatter; "tokens" are the host's estimate
// (input + max new tokens, the dispatch ticket's accounting rule), not the engine's actual work.
// Options: none.
import { defineMethod } from '../define-method.ts';
import { leastBy } from '../pickers.ts';
import type { Decision, Method, MethodContext } from '../types.ts';

export const createTotalTokens = defineMethod(
  'total_tokens',
  {},
  () =>
    ({
      name: 'total_tokens',
      maxPromptTokens: 0,
      select(ctx: MethodContext): Decision {
        return { rank: leastBy(ctx, 'tokens').rank, reason: 'least-tokens' };
      },
    }) satisfies Method,
);
