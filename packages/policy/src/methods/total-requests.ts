// total_requests: the healthy rank with the fewest in-flight requests.
//
// Algorithm: the minimum over healthy ranks (the tracker's load index, or one pass); ties go
// to the dispatcher's rotating tie-breaker. Fixes two flaws of SGLang's version: it considered inactive ranks, and
// `list.index(min(...))` sent every tie (e.g. a burst arriving before any completion is
// accounted) to the lowest rank.
// Cost: O(log ranks) through the load tracker's index when the host dispatches on the
// tracker's own ranks (Dispatcher.begin without a view); else one pass over the healthy ranks.
// Failure modes: blind to request size (one 100k-token prompt counts as one request) and to
// cache contents; as good as the host's accounting (LoadTracker.onDispatch/onComplete).
// Options: none.
import { defineMethod } from '../define-method.ts';
import { leastBy } from '../pickers.ts';
import type { Decision, Method, MethodContext } from '../types.ts';

export const createTotalRequests = defineMethod(
  'total_requests',
  {},
  () =>
    ({
      name: 'total_requests',
      maxPromptTokens: 0,
      select(ctx: MethodContext): Decision {
        return { rank: leastBy(ctx, 'requests').rank, reason: 'least-requests' };
      },
    }) satisfies Method,
);
