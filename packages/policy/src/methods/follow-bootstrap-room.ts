// follow_bootstrap_room: rank = bootstrap_room % dp_size, for prefill/decode disaggregation,
// where the prefill and the decode side must derive the same rank from the same room.
//
// Algorithm: the room (a non-negative integer, number or bigint) mod the rank count. If that
// rank is unhealthy, the room's own order over ranks (jump consistent hash draws seeded by its
// low and high 32 bits, pickers.failoverRank) picks the first healthy rank, so both sides (and
// every router instance) still agree, and only that rank's rooms move, spread evenly. A request without a room (SGLang asserts) is placed by the
// rotating fallback with reason 'fallback-round-robin', so plain traffic still works.
// Cost: O(1) when the primary is healthy, O(log ranks) per draw on failover.
// Failure modes: load-blind; prefill and decode clusters must have the same dp_size; rooms
// move when the rank count changes (mod).
// Options: none.

import { defineMethod } from '../define-method.ts';
import { failoverRank } from '../pickers.ts';
import type { Decision, Method, MethodContext, RankState } from '../types.ts';

/** Room mod n and two 32-bit seed words, for numbers up to 2^53 and bigints of any size. */
function roomParts(room: bigint | number, n: number): [mod: number, lo: number, hi: number] {
  if (typeof room === 'bigint') {
    if (room < 0n)
      throw new RangeError(`bootstrapRoom must be a non-negative integer, got ${room}`);
    return [
      Number(room % BigInt(n)),
      Number(room & 0xffffffffn),
      Number((room >> 32n) & 0xffffffffn),
    ];
  }
  if (!Number.isSafeInteger(room) || room < 0) {
    throw new RangeError(`bootstrapRoom must be a non-negative safe integer, got ${room}`);
  }
  return [room % n, room >>> 0, Math.floor(room / 0x100000000) >>> 0];
}

export const createFollowBootstrapRoom = defineMethod('follow_bootstrap_room', {}, () => {
  let failovers = 0;
  let fallbacks = 0;
  return {
    name: 'follow_bootstrap_room',
    maxPromptTokens: 0,
    select(ctx: MethodContext): Decision {
      const room = ctx.request.bootstrapRoom;
      if (room === undefined || room === null) {
        return { rank: ctx.tieBreak(ctx.healthy).rank, reason: 'fallback-round-robin' };
      }
      const [primary, lo, hi] = roomParts(room, ctx.ranks.length);
      const r = ctx.ranks[primary] as RankState;
      if (r.healthy) return { rank: primary, reason: 'bootstrap-room' };
      return { rank: failoverRank(ctx, lo, hi), reason: 'bootstrap-room-failover' };
    },
    commit(_ctx: MethodContext, decision: Decision): void {
      if (decision.reason === 'bootstrap-room-failover') failovers++;
      else if (decision.reason === 'fallback-round-robin') fallbacks++;
    },
    stats: () => ({ failovers, fallbacks }),
  } satisfies Method;
});
