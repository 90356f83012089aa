// total_requests: the healthy rank with the fewest in-flight requests.
//
// Algorithm: one pass for the minimum over healthy ranks; ties go to the dispatcher's rotating
// tie-breaker. Fixes two flaws of SGLang's version: it considered inactive ranks, and
// `list.index(min(...))` sent every tie (e.g. a burst arriving before any completion is
// accounted) to the lowest rank.
// Cost: O(healthy ranks), no allocation unless there is a tie.
// Failure modes: blind to request size (one 100k-token prompt counts as one request) and to
// cache contents; as good as the host's accounting (LoadTracker.onDispatch/onComplete).
// Options: none.
import { defineMethod } from '../define-method.ts';
import type { Decision, Method, MethodContext, RankState } from '../types.ts';

export const createTotalRequests = defineMethod(
  'total_requests',
  {},
  () =>
    ({
      name: 'total_requests',
      maxPromptTokens: 0,
      select(ctx: MethodContext): Decision {
        const healthy = ctx.healthy;
        let min = Number.POSITIVE_INFINITY;
        let count = 0;
        let best = healthy[0] as RankState;
        for (const r of healthy) {
          if (r.inFlightRequests < min) {
            min = r.inFlightRequests;
            best = r;
            count = 1;
          } else if (r.inFlightRequests === min) {
            count++;
          }
        }
        if (count > 1) best = ctx.tieBreak(healthy.filter((r) => r.inFlightRequests === min));
        return { rank: best.rank, reason: 'least-requests' };
      },
    }) satisfies Method,
);
