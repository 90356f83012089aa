// prefix_match: the upstream PR's own tests, the key rules, failover, validation and options.
import { describe, expect, it } from 'vitest';
import {
  createDispatcher,
  PolicyRangeError,
  prefixKeyLength,
  TokenIdRangeError,
} from '../src/index.ts';
import { makeRanks, prng, randomIds } from './helpers.ts';

const rand = prng(7);

function prefixMatch(options: Record<string, unknown> = {}) {
  return createDispatcher({ method: 'prefix_match', ...options });
}

describe('prefix_match (upstream PR tests)', () => {
  it('sends the same prefix to the same rank', () => {
    const d = prefixMatch();
    const ranks = makeRanks(16);
    const prefix = randomIds(rand, 4096);
    const first = d.dispatch({ inputIds: prefix }, ranks);
    expect(first.reason).toBe('prefix-hash');
    for (let i = 0; i < 20; i++) {
      const suffix = randomIds(rand, 1 + Math.floor(rand() * 3000));
      expect(d.dispatch({ inputIds: [...prefix, ...suffix] }, ranks).rank).toBe(first.rank);
    }
  });

  it('spreads 256 distinct prefixes over at least 12 of 16 ranks', () => {
    const d = prefixMatch();
    const ranks = makeRanks(16);
    const used = new Set<number>();
    for (let i = 0; i < 256; i++)
      used.add(d.dispatch({ inputIds: randomIds(rand, 512) }, ranks).rank);
    expect(used.size).toBeGreaterThanOrEqual(12);
  });

  it('over 10,000 prefixes gives no rank more than 1.3x the mean', () => {
    const d = prefixMatch({ window: 16, prefixLength: 64 });
    const ranks = makeRanks(16);
    const counts = new Array<number>(16).fill(0);
    for (let i = 0; i < 10_000; i++) {
      const r = d.dispatch({ inputIds: randomIds(rand, 64) }, ranks).rank;
      counts[r] = (counts[r] ?? 0) + 1;
    }
    expect(Math.max(...counts)).toBeLessThanOrEqual(1.3 * (10_000 / 16));
  });

  it('falls back to round robin on empty input, with a reason saying so', () => {
    const d = prefixMatch();
    const ranks = makeRanks(4);
    const seen = [0, 1, 2, 3, 4, 5].map(() => d.dispatch({ inputIds: [] }, ranks));
    expect(seen.map((s) => s.reason)).toEqual(new Array(6).fill('fallback-round-robin'));
    expect(seen.map((s) => s.rank)).toEqual([0, 1, 2, 3, 0, 1]);
    expect(d.dispatch({}, ranks).reason).toBe('fallback-round-robin');
  });

  it('lets an explicit routed rank take precedence', () => {
    const d = prefixMatch();
    const ranks = makeRanks(8);
    const ids = randomIds(rand, 1000);
    const natural = d.dispatch({ inputIds: ids }, ranks).rank;
    const target = (natural + 3) % 8;
    expect(d.dispatch({ inputIds: ids, routedRank: target }, ranks)).toEqual({
      rank: target,
      reason: 'routed',
    });
  });
});

describe('prefix_match key', () => {
  it('hashes whole windows only, capped at prefixLength, or the whole short input', () => {
    expect(prefixKeyLength(0, 256, 4096)).toBe(0);
    expect(prefixKeyLength(100, 256, 4096)).toBe(100);
    expect(prefixKeyLength(256, 256, 4096)).toBe(256);
    expect(prefixKeyLength(600, 256, 4096)).toBe(512);
    expect(prefixKeyLength(10_000, 256, 4096)).toBe(4096);
    expect(prefixKeyLength(10_000, 256, 1000)).toBe(768);
  });

  it('ignores tokens after the key and reacts to every token inside it', () => {
    const d = prefixMatch({ window: 4, prefixLength: 8 });
    const ranks = makeRanks(1000);
    const base = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10];
    const rank = d.dispatch({ inputIds: base }, ranks).rank;
    // Token 8 and beyond are outside the key; tokens 0..7 are in it.
    expect(d.dispatch({ inputIds: [...base.slice(0, 8), 99, 98] }, ranks).rank).toBe(rank);
    // Partial window: 10 tokens with window 4 and prefix 8 hash 8; 7 tokens would hash 4.
    expect(d.dispatch({ inputIds: base.slice(0, 8) }, ranks).rank).toBe(rank);
    let changed = 0;
    for (let i = 0; i < 8; i++) {
      const ids = [...base];
      ids[i] = 1000 + i;
      if (d.dispatch({ inputIds: ids }, ranks).rank !== rank) changed++;
    }
    expect(changed).toBeGreaterThanOrEqual(7);
  });
});

describe('prefix_match failover', () => {
  const keys = Array.from({ length: 4000 }, () => randomIds(rand, 256));
  const ranksOf = (down: number[]) => {
    const d = prefixMatch();
    const ranks = makeRanks(16, down);
    return keys.map((ids) => d.dispatch({ inputIds: ids }, ranks));
  };

  it('moves only the dead rank keys, spread over the healthy ranks', () => {
    const before = ranksOf([]);
    const after = ranksOf([5]);
    const moved = new Array<number>(16).fill(0);
    before.forEach((b, i) => {
      const a = after[i];
      if (b.rank !== 5) {
        expect(a).toEqual(b);
      } else {
        expect(a?.reason).toBe('prefix-hash-failover');
        const r = a?.rank ?? 0;
        moved[r] = (moved[r] ?? 0) + 1;
      }
    });
    const total = moved.reduce((x, y) => x + y, 0);
    expect(total).toBeGreaterThan(150);
    expect(moved[5]).toBe(0);
    // About total/15 each; no single neighbour takes them all.
    expect(moved.filter((m) => m > 0).length).toBeGreaterThanOrEqual(13);
    expect(Math.max(...moved)).toBeLessThan(0.2 * total);
  });

  it('moves only the second dead rank keys when another rank fails', () => {
    const one = ranksOf([5]);
    const two = ranksOf([5, 9]);
    one.forEach((a, i) => {
      if (a.rank !== 9) expect(two[i]?.rank).toBe(a.rank);
      else expect(two[i]?.rank).not.toBe(9);
    });
  });

  it('agrees across independent dispatchers (every router instance)', () => {
    expect(ranksOf([2, 3])).toEqual(ranksOf([2, 3]));
  });
});

describe('prefix_match validation and options', () => {
  it('rejects token ids that are not integers in [0, 2^32) with a RangeError naming the index', () => {
    const d = prefixMatch({ window: 2, prefixLength: 4 });
    const ranks = makeRanks(4);
    for (const bad of [1.5, -1, 2 ** 32, Number.NaN, Number.POSITIVE_INFINITY]) {
      const ids = [1, 2, bad, 4];
      expect(() => d.dispatch({ inputIds: ids }, ranks)).toThrow(TokenIdRangeError);
      expect(() => d.dispatch({ inputIds: ids }, ranks)).toThrow(/inputIds\[2\]/);
    }
    expect(() => d.dispatch({ inputIds: ['1', 2] as unknown as number[] }, ranks)).toThrow(
      RangeError,
    );
    expect(d.dispatch({ inputIds: [0, 2 ** 32 - 1, 5, 6] }, ranks).reason).toBe('prefix-hash');
  });

  it('uses window 256 and prefixLength 4096 by default', () => {
    const a = prefixMatch();
    const b = prefixMatch({ window: 256, prefixLength: 4096 });
    const ranks = makeRanks(16);
    for (let i = 0; i < 30; i++) {
      const ids = randomIds(rand, Math.floor(rand() * 6000));
      expect(a.dispatch({ inputIds: ids }, ranks)).toEqual(b.dispatch({ inputIds: ids }, ranks));
    }
  });

  it('reads options from the top level or under options (options wins), numeric strings too', () => {
    const ranks = makeRanks(1000);
    const ids = randomIds(rand, 300);
    const ref = prefixMatch({ window: 100, prefixLength: 200 }).dispatch({ inputIds: ids }, ranks);
    expect(
      prefixMatch({ window: 7, options: { window: 100, prefixLength: 200 } }).dispatch(
        { inputIds: ids },
        ranks,
      ),
    ).toEqual(ref);
    expect(
      prefixMatch({ window: '100', prefixLength: '200' }).dispatch({ inputIds: ids }, ranks),
    ).toEqual(ref);
  });

  it('throws a RangeError naming the field for bad numbers', () => {
    const cases: [Record<string, unknown>, string][] = [
      [{ window: 0 }, 'window'],
      [{ window: -3 }, 'window'],
      [{ window: 2.5 }, 'window'],
      [{ window: 'abc' }, 'window'],
      [{ window: 512, prefixLength: 256 }, 'prefixLength'],
      [{ prefixLength: 0 }, 'prefixLength'],
    ];
    for (const [options, field] of cases) {
      try {
        prefixMatch(options);
        expect.unreachable();
      } catch (error) {
        expect(error).toBeInstanceOf(RangeError);
        expect(error).toBeInstanceOf(PolicyRangeError);
        expect((error as PolicyRangeError).field).toBe(field);
        expect((error as Error).message).toContain(field);
      }
    }
  });

  it('counts hashed, failover and fallback decisions', () => {
    const d = prefixMatch();
    d.dispatch({ inputIds: [1, 2, 3] }, makeRanks(1));
    d.dispatch({ inputIds: [] }, makeRanks(2));
    d.dispatch({ inputIds: [1, 2, 3] }, makeRanks(2, [0]));
    d.dispatch({ inputIds: [1, 2, 3] }, makeRanks(2, [1]));
    const stats = d.stats().method ?? {};
    expect(stats.fallbacks).toBe(1);
    expect(stats.hashed).toBe(3);
    expect(stats.failovers).toBe(1);
  });
});

describe("prefix_match with a host's prefix digests", () => {
  it('takes the digest the host gives and hashes itself when it gives none', () => {
    const ranks = makeRanks(16);
    const ids = randomIds(rand, 2048);
    const own = prefixMatch().dispatch({ inputIds: ids }, ranks);
    const asked: number[] = [];
    // A digest of zeros is rank 0 for any rank count.
    const zeros = {
      digest(_ids: ArrayLike<number>, count: number) {
        asked.push(count);
        return new Uint8Array(64);
      },
    };
    const d = prefixMatch({ window: 256, prefixLength: 1024 });
    expect(d.dispatch({ inputIds: ids }, ranks, { prefixDigests: zeros }).rank).toBe(0);
    expect(asked).toEqual([prefixKeyLength(ids.length, 256, 1024)]);
    const none = { digest: () => null };
    expect(prefixMatch().dispatch({ inputIds: ids }, ranks, { prefixDigests: none })).toEqual(own);
  });
});
