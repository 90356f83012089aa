// total_tokens: the healthy rank with the fewest in-flight tokens, then the fewest requests.
//
// Algorithm: one pass for the lexicographic minimum (tokens, requests) over healthy ranks;
// remaining ties go to the dispatcher's rotating tie-breaker (SGLang sent them to rank 0 and
// considered inactive ranks).
// Cost: O(healthy ranks), no allocation unless there is a tie.
// Failure modes: cache-blind, so shared prefixes scatter; "tokens" are the host's estimate
// (input + max new tokens, the dispatch ticket's accounting rule), not the engine's actual work.
// Options: none.
import { defineMethod } from '../define-method.ts';
import type { Decision, Method, MethodContext, RankState } from '../types.ts';

export const createTotalTokens = defineMethod(
  'total_tokens',
  {},
  () =>
    ({
      name: 'total_tokens',
      maxPromptTokens: 0,
      select(ctx: MethodContext): Decision {
        const healthy = ctx.healthy;
        let minTokens = Number.POSITIVE_INFINITY;
        let minRequests = Number.POSITIVE_INFINITY;
        let count = 0;
        let best = healthy[0] as RankState;
        for (const r of healthy) {
          if (
            r.inFlightTokens < minTokens ||
            (r.inFlightTokens === minTokens && r.inFlightRequests < minRequests)
          ) {
            minTokens = r.inFlightTokens;
            minRequests = r.inFlightRequests;
            best = r;
            count = 1;
          } else if (r.inFlightTokens === minTokens && r.inFlightRequests === minRequests) {
            count++;
          }
        }
        if (count > 1) {
          best = ctx.tieBreak(
            healthy.filter(
              (r) => r.inFlightTokens === minTokens && r.inFlightRequests === minRequests,
            ),
          );
        }
        return { rank: best.rank, reason: 'least-tokens' };
      },
    }) satisfies Method,
);
