// round_robin: cycle over the healthy ranks.
//
// Algorithm: a cursor; pick the first healthy rank at or after it (wrapping), and move the
// cursor past the rank actually used. Routed requests and affinity hits do not move it, as in
// SGLang, which only counts requests that go through its round-robin scheduler.
// Cost: O(1) while the cursor's rank is healthy; past unhealthy ranks O(log ranks) with the
// host tracker's load index (MethodContext.queries), else a scan.
// Failure modes: load-blind and cache-blind; a rank that comes back is simply rejoined. When
// the rank count shrinks the cursor wraps.
// Options: none.
import { defineMethod } from '../define-method.ts';
import type { Decision, Method, MethodContext, RankState } from '../types.ts';

export const createRoundRobin = defineMethod('round_robin', {}, () => {
  let cursor = 0;
  let decisions = 0;
  return {
    name: 'round_robin',
    maxPromptTokens: 0,
    select(ctx: MethodContext): Decision {
      const n = ctx.ranks.length;
      const start = cursor < n ? cursor : 0;
      const queries = ctx.queries;
      if (queries && !(ctx.ranks[start] as RankState).healthy) {
        return { rank: queries.firstHealthy(start), reason: 'round-robin' };
      }
      for (let i = 0; i < n; i++) {
        const r = ctx.ranks[(start + i) % n] as RankState;
        if (r.healthy) return { rank: r.rank, reason: 'round-robin' };
      }
      // Unreachable: the dispatcher guarantees a healthy rank.
      return { rank: (ctx.healthy[0] as RankState).rank, reason: 'round-robin' };
    },
    commit(ctx: MethodContext, decision: Decision): void {
      // Consulted for this request (own pick, or affinity placing a new or re-picked key).
      if (decision.reason === 'routed' || decision.reason === 'affinity') return;
      decisions++;
      cursor = (decision.rank + 1) % ctx.ranks.length;
    },
    stats: () => ({ decisions }),
  } satisfies Method;
});
