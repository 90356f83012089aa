import { tokenDigest } from '@kvroute/policy';
import { describe, expect, it } from 'vitest';
import { runComparisonDetailed } from '../src/compare.ts';
import { getProfile } from '../src/cost/profiles.ts';
import { SourceDigests } from '../src/host/prefix-digests.ts';
import { buildWorkload } from '../src/workloads/registry.ts';
import { traceTokens } from '../src/workloads/replay.ts';

// A sweep's cells share one store of prefix digests per plan. It may only ever answer what
// hashing would: the digest of the request's own tokens.
describe('prefix digests kept across runs of one plan', () => {
  it("answers tokenDigest's bytes for a replay's token arrays, and nothing for others", () => {
    const store = new SourceDigests();
    const ids = traceTokens({ inputLength: 3000, hashIds: [5, 6, 7, 8, 9, 10] }, 512, 42);
    const first = store.digest(ids, 1024);
    expect(Buffer.from(first!).equals(tokenDigest(ids, 1024))).toBe(true);
    // Read again (a new array of the same request's tokens: the next cell), from the store.
    expect(store.digest(ids, 1024)).toBe(first);
    expect(Buffer.from(store.digest(ids, 2048)!).equals(tokenDigest(ids, 2048))).toBe(true);
    expect(store.stats()).toEqual({ hits: 1, misses: 2, entries: 2 });
    // Another request with a different block: its own digest.
    const other = traceTokens({ inputLength: 3000, hashIds: [5, 6, 7, 8, 9, 11] }, 512, 42);
    expect(Buffer.from(store.digest(other, 3000)!).equals(tokenDigest(other, 3000))).toBe(true);
    // Plain arrays and views that do not start at the source's first token: not vouched for.
    expect(store.digest(Uint32Array.from(ids), 1024)).toBeNull();
    expect(store.digest(ids.subarray(1), 1024)).toBeNull();
    expect(store.digest(Array.from(ids), 1024)).toBeNull();
  });

  it('a comparison of several prefix_match settings on a replay gives the same results with it', () => {
    const plan = buildWorkload('replay', { limit: 300, ranks: 4 }, 3);
    const policies = [
      { method: 'prefix_match', window: 64, prefixLength: 1024 },
      { method: 'prefix_match', window: 256, prefixLength: 1024 },
      { method: 'prefix_match', window: 128, prefixLength: 2048 },
    ];
    const base = {
      scenario: 'replay',
      plan,
      policies,
      seed: 3,
      profile: getProfile('h200-llama-3.1-8b'),
    };
    const store = new SourceDigests();
    const shared = runComparisonDetailed({ ...base, prefixDigests: store });
    const hashed = runComparisonDetailed({ ...base, prefixDigests: { digest: () => null } });
    expect(JSON.stringify(shared.result)).toBe(JSON.stringify(hashed.result));
    // The second window at the same prefix length found every long prompt's key stored.
    expect(store.stats().hits).toBeGreaterThan(100);
  });
});
