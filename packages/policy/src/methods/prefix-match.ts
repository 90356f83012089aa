// prefix_match: route by a hash of the prompt's leading tokens, so requests sharing a long
// prefix (agent system prompt + tools) land on the rank that already caches it. This is the
// upstream SGLang proposal, implemented exactly:
//
// Algorithm: key tokens = the first floor(min(len, prefixLength) / window) * window tokens, or
// the whole input when it is shorter than one window; each token as a little-endian uint32;
// digest = BLAKE2b-512 of those bytes; primary rank = digest as a big-endian unsigned integer
// mod the rank count. If the primary is unhealthy, the digest's own order over ranks (jump
// consistent hash draws seeded by its first two big-endian words, pickers.failoverRank) picks
// the first healthy rank: only the dead rank's keys move, spread evenly, and every router
// instance agrees. Empty input: the rotating round-robin fallback, reason
// 'fallback-round-robin'. Windows make the key stable while a conversation grows inside one
// window, and cap hashing cost at prefixLength tokens.
// Cost: one BLAKE2b over at most 4 * prefixLength bytes (about 30 us for 4,096 tokens) plus a
// 64-byte mod; only the hashed tokens are validated. A key seen twice before is served from a
// small memo after a byte-for-byte compare instead (DigestMemo: agents repeat their prefix).
// Failover: O(log ranks) per draw.
// Failure modes: load-blind (one hot prefix pins one rank); requests sharing only part of
// the key scatter (a common 1,000-token system prompt followed by different user turns
// within the first 4,096 tokens gives different keys); the mod reshuffles almost every key
// when the rank count changes.
// Options (top level or under `options`):
//   window        256   tokens per hashing window (>= 1)
//   prefixLength  4096  most tokens hashed (>= window)

import { defineMethod } from '../define-method.ts';
import { PolicyRangeError } from '../errors.ts';
import { DigestMemo, digestMod, digestWord, prefixKeyLength } from '../hashing/prefix-digest.ts';
import type { OptionsSchema } from '../options.ts';
import { failoverRank } from '../pickers.ts';
import type { Decision, Method, MethodContext, RankState } from '../types.ts';

export const PREFIX_MATCH_OPTIONS = {
  window: {
    type: 'int',
    default: 256,
    min: 1,
    doc: 'tokens per hashing window',
    sweep: [64, 128, 256, 512],
  },
  prefixLength: {
    type: 'int',
    default: 4096,
    min: 1,
    doc: 'most prompt tokens hashed into the key (at least window)',
    sweep: [1024, 2048, 4096, 8192],
  },
} as const satisfies OptionsSchema;

export const PREFIX_MATCH_DEFAULTS = {
  window: PREFIX_MATCH_OPTIONS.window.default,
  prefixLength: PREFIX_MATCH_OPTIONS.prefixLength.default,
} as const;

export const createPrefixMatch = defineMethod(
  'prefix_match',
  PREFIX_MATCH_OPTIONS,
  (options, raw): Method => {
    const window = options.window;
    // A window above the default prefix length raises the default with it.
    const prefixLength =
      raw.prefixLength == null
        ? Math.max(PREFIX_MATCH_DEFAULTS.prefixLength, window)
        : options.prefixLength;
    if (prefixLength < window) {
      throw new PolicyRangeError(
        'prefixLength',
        `prefix_match: prefixLength must be >= window (${window}), got ${prefixLength}`,
      );
    }
    let hashed = 0;
    let failovers = 0;
    const memo = new DigestMemo();
    let fallbacks = 0;
    return {
      name: 'prefix_match',
      maxPromptTokens: prefixLength,
      select(ctx: MethodContext): Decision {
        const ids = ctx.request.inputIds;
        const length = ids ? ids.length : 0;
        if (!ids || length === 0) {
          return { rank: ctx.tieBreak(ctx.healthy).rank, reason: 'fallback-round-robin' };
        }
        const keyLength = prefixKeyLength(length, window, prefixLength);
        // A host's own digest (a simulator's sweep keeps each once), else hashed here.
        const digest = ctx.prefixDigests?.digest(ids, keyLength) ?? memo.digest(ids, keyLength);
        const primary = digestMod(digest, ctx.ranks.length);
        if ((ctx.ranks[primary] as RankState).healthy) {
          return { rank: primary, reason: 'prefix-hash' };
        }
        // The order is a function of the key alone (every router agrees) and unrelated to the
        // primary's index, so a dead rank's keys scatter instead of following one neighbour.
        const rank = failoverRank(ctx, digestWord(digest, 0), digestWord(digest, 4));
        return { rank, reason: 'prefix-hash-failover' };
      },
      commit(_ctx: MethodContext, decision: Decision): void {
        if (decision.reason === 'prefix-hash') hashed++;
        else if (decision.reason === 'prefix-hash-failover') {
          hashed++;
          failovers++;
        } else if (decision.reason === 'fallback-round-robin') fallbacks++;
      },
      stats: () => ({ hashed, failovers, fallbacks }),
    } satisfies Method;
  },
);
