// Indexes that keep decisions cheap at many ranks must not change a single decision: the load
// index gives exactly the rank a scan of the healthy ranks gives (tie-break rotation included),
// and the inverted prefix index matches exactly what asking every rank matches.
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { ChainedPrefixIndex } from '../src/hashing/chained-index.ts';
import {
  createDispatcher,
  createLoadTracker,
  type Dispatcher,
  type DispatcherConfig,
  type DispatchTicket,
  type LoadTracker,
  type RouteRequest,
} from '../src/index.ts';
import { LoadIndex } from '../src/load-index.ts';

/** What the host does between decisions: complete a ticket, flip a rank's health, resize. */
type HostOp =
  | { kind: 'done'; pick: number }
  | { kind: 'health'; rank: number; healthy: boolean }
  | { kind: 'resize'; ranks: number };

type Op = { kind: 'begin'; input: number; maxNew: number } | HostOp;

/** Host operations as weighted arbitraries, for ranks up to `maxRanks`. */
const hostOps = (maxRanks: number) =>
  [
    { weight: 4, arbitrary: fc.record({ kind: fc.constant('done' as const), pick: fc.nat() }) },
    {
      weight: 1,
      arbitrary: fc.record({
        kind: fc.constant('health' as const),
        rank: fc.nat({ max: maxRanks }),
        healthy: fc.boolean(),
      }),
    },
    {
      weight: 1,
      arbitrary: fc.record({
        kind: fc.constant('resize' as const),
        ranks: fc.integer({ min: 1, max: maxRanks }),
      }),
    },
  ] as const;

const op: fc.Arbitrary<Op> = fc.oneof(
  {
    weight: 6,
    arbitrary: fc.record({
      kind: fc.constant('begin' as const),
      input: fc.integer({ min: 0, max: 3 }),
      maxNew: fc.integer({ min: 0, max: 2 }),
    }),
  },
  ...hostOps(40),
);

/**
 * Two dispatchers of one config fed the same requests: one on a tracker's own ranks (the
 * indexed path), one on a copy of them (a view that is not the tracker's array scans).
 */
class Pair {
  readonly indexed: { d: Dispatcher; t: LoadTracker; open: DispatchTicket[] };
  readonly scanned: { d: Dispatcher; t: LoadTracker; open: DispatchTicket[] };

  constructor(config: DispatcherConfig, n: number) {
    this.indexed = { d: createDispatcher(config), t: createLoadTracker(n), open: [] };
    this.scanned = { d: createDispatcher(config), t: createLoadTracker(n), open: [] };
  }

  /** Both decisions, tickets kept open; undefined when no rank is healthy. */
  begin(req: RouteRequest): [DispatchTicket, DispatchTicket] | undefined {
    if (!this.indexed.t.ranks.some((r) => r.healthy)) return undefined;
    const a = this.indexed.d.begin(req, this.indexed.t);
    const b = this.scanned.d.begin(req, this.scanned.t, { view: this.scanned.t.ranks.slice() });
    this.indexed.open.push(a);
    this.scanned.open.push(b);
    return [a, b];
  }

  /** Completes a ticket, flips a rank's health or resizes, on both sides alike. */
  apply(o: HostOp, maxRanks: number): void {
    const { indexed, scanned } = this;
    if (o.kind === 'done') {
      if (indexed.open.length === 0) return;
      const i = o.pick % indexed.open.length;
      indexed.open.splice(i, 1)[0]?.done();
      scanned.open.splice(i, 1)[0]?.done();
    } else if (o.kind === 'health') {
      if (o.rank >= indexed.t.ranks.length) return;
      indexed.t.setHealthy(o.rank, o.healthy);
      scanned.t.setHealthy(o.rank, o.healthy);
    } else {
      indexed.t.resize(Math.min(o.ranks, maxRanks));
      scanned.t.resize(Math.min(o.ranks, maxRanks));
    }
  }
}

describe('LoadIndex', () => {
  for (const method of ['total_tokens', 'total_requests', 'round_robin']) {
    it(`${method}: indexed decisions equal scanned ones under any interleaving`, () => {
      fc.assert(
        fc.property(fc.integer({ min: 1, max: 40 }), fc.array(op, { maxLength: 300 }), (n, ops) => {
          const pair = new Pair({ method }, n);
          const { indexed } = pair;
          for (const o of ops) {
            if (o.kind !== 'begin') {
              pair.apply(o, 40);
              continue;
            }
            const req = { inputIds: new Uint32Array(o.input).fill(1), maxNewTokens: o.maxNew };
            const both = pair.begin(req);
            if (both) expect(both[0].rank).toBe(both[1].rank);
          }
          // The index's sums follow the tracker exactly and return to 0 when all is done.
          for (const tk of indexed.open) tk.done();
          const idx = indexed.t.index as LoadIndex;
          expect(idx.healthyTokens).toBe(0);
          expect(idx.healthyRequests).toBe(0);
          expect(idx.healthyCount).toBe(indexed.t.ranks.filter((r) => r.healthy).length);
        }),
        { numRuns: 300 },
      );
    });
  }

  it('finds the first minimal rank at or after a cursor, cyclically', () => {
    const index = new LoadIndex(8);
    const load = [5, 1, 3, 1, 9, 1, 2, 7];
    for (const [rank, t] of load.entries()) {
      index.set(rank, { healthy: true, inFlightTokens: t, inFlightRequests: 1 });
    }
    expect(index.minIsUnique('tokens')).toBe(false);
    expect(index.firstMinFrom('tokens', 0)).toBe(1);
    expect(index.firstMinFrom('tokens', 2)).toBe(3);
    expect(index.firstMinFrom('tokens', 4)).toBe(5);
    expect(index.firstMinFrom('tokens', 6)).toBe(1);
    index.set(1, { healthy: false, inFlightTokens: 1, inFlightRequests: 1 });
    index.set(3, { healthy: true, inFlightTokens: 4, inFlightRequests: 1 });
    expect(index.minIsUnique('tokens')).toBe(true);
    expect(index.firstMinFrom('tokens', 6)).toBe(5);
    expect(index.healthyCount).toBe(7);
    expect(index.healthyTokens).toBe(5 + 3 + 4 + 9 + 1 + 2 + 7);
  });

  it('refuses a healthy rank whose load is not finite, which would read as unhealthy', () => {
    const index = new LoadIndex(4);
    expect(() =>
      index.set(2, {
        healthy: true,
        inFlightTokens: Number.POSITIVE_INFINITY,
        inFlightRequests: 1,
      }),
    ).toThrow(/rank 2 is healthy with a load that is not finite \(Infinity tokens, 1 requests\)/);
    expect(() =>
      index.set(1, { healthy: true, inFlightTokens: 3, inFlightRequests: Number.NaN }),
    ).toThrow(/rank 1 is healthy/);
    // Nothing was recorded, and an unhealthy rank's load is never read.
    index.set(0, { healthy: false, inFlightTokens: Number.POSITIVE_INFINITY, inFlightRequests: 0 });
    expect(index.healthyCount).toBe(3);
    expect(index.healthyTokens).toBe(0);
    expect(index.firstMinFrom('requests', 0)).toBe(1);
  });

  it('answers leastTokens, firstWithinFrom and the cool order as scans do', () => {
    const leaf = fc.record({
      healthy: fc.boolean(),
      inFlightTokens: fc.integer({ min: 0, max: 6 }),
      inFlightRequests: fc.integer({ min: 0, max: 2 }),
      cool: fc.integer({ min: 0, max: 2 }),
    });
    fc.assert(
      fc.property(
        fc.array(leaf, { minLength: 1, maxLength: 40 }),
        fc.integer({ min: -1, max: 7 }),
        fc.nat({ max: 50 }),
        (leaves, max, cursor) => {
          const n = leaves.length;
          const index = new LoadIndex(n);
          leaves.forEach((l, rank) => {
            index.set(rank, l);
          });
          const cool = leaves.map((l) => l.cool);
          index.bindCool(cool);
          const ok = (r: number) => {
            const l = leaves[r] as (typeof leaves)[number];
            return l.healthy && l.inFlightTokens <= max;
          };
          const ranks = leaves.map((_, r) => r);
          const healthyTokens = leaves.filter((l) => l.healthy).map((l) => l.inFlightTokens);
          expect(index.leastTokens()).toBe(Math.min(...healthyTokens));
          const c = cursor % n;
          const first = [...ranks.slice(c), ...ranks.slice(0, c)].find(ok) ?? -1;
          expect(index.firstWithinFrom(max, cursor)).toBe(first);
          // The cool order: least (tokens, requests, cool), first such at or after the cursor.
          const key = (r: number) => {
            const l = leaves[r] as (typeof leaves)[number];
            return [l.inFlightTokens, l.inFlightRequests, l.cool];
          };
          const healthy = ranks.filter((r) => leaves[r]?.healthy);
          const lex = (a: number[], b: number[]) =>
            (a[0] as number) - (b[0] as number) ||
            (a[1] as number) - (b[1] as number) ||
            (a[2] as number) - (b[2] as number);
          const best = healthy.length ? healthy.map(key).sort(lex)[0] : undefined;
          const minimal = healthy.filter((r) => best && lex(key(r), best) === 0);
          expect(index.coolMinCount()).toBe(minimal.length);
          const firstCool = [...ranks.slice(c), ...ranks.slice(0, c)].find((r) =>
            minimal.includes(r),
          );
          expect(index.firstCoolMinFrom(cursor)).toBe(firstCool ?? -1);
        },
      ),
      { numRuns: 2000 },
    );
  });

  it('reports no rank when none is healthy', () => {
    const index = new LoadIndex(3);
    for (let r = 0; r < 3; r++)
      index.set(r, { healthy: false, inFlightTokens: 0, inFlightRequests: 0 });
    expect(index.firstMinFrom('requests', 0)).toBe(-1);
  });
});

describe('ChainedPrefixIndex inverted holders', () => {
  it('matchHolders gives what match gives, under inserts, evictions, clears and resizes', () => {
    type IxOp =
      | { kind: 'insert'; rank: number; keys: number[]; cap: number }
      | { kind: 'clear'; rank: number }
      | { kind: 'resize'; n: number }
      | { kind: 'match'; keys: number[]; down: number[] };
    const keys = fc.array(fc.integer({ min: 0, max: 6 }), { minLength: 1, maxLength: 5 });
    const ixOp: fc.Arbitrary<IxOp> = fc.oneof(
      fc.record({
        kind: fc.constant('insert' as const),
        rank: fc.nat({ max: 9 }),
        keys,
        cap: fc.integer({ min: 1, max: 8 }),
      }),
      fc.record({ kind: fc.constant('clear' as const), rank: fc.nat({ max: 9 }) }),
      fc.record({ kind: fc.constant('resize' as const), n: fc.integer({ min: 1, max: 10 }) }),
      fc.record({
        kind: fc.constant('match' as const),
        keys,
        down: fc.array(fc.nat({ max: 9 }), { maxLength: 3 }),
      }),
    );
    fc.assert(
      fc.property(fc.array(ixOp, { maxLength: 200 }), (ops) => {
        const ix = new ChainedPrefixIndex();
        ix.resize(10);
        for (const o of ops) {
          if (o.kind === 'insert') ix.insert(o.rank, o.keys, o.cap);
          else if (o.kind === 'clear') ix.clear(o.rank);
          else if (o.kind === 'resize') ix.resize(o.n);
          else {
            const n = ix.numRanks;
            const healthy = Array.from({ length: n }, (_, r) => r).filter(
              (r) => !o.down.includes(r),
            );
            const dense = new Array<number>(n).fill(0);
            ix.match(o.keys, healthy, dense);
            const ranks: number[] = [];
            const counts: number[] = [];
            ix.matchHolders(o.keys, (r) => r < n && !o.down.includes(r), ranks, counts);
            const sparse = new Array<number>(n).fill(0);
            ranks.forEach((r, i) => {
              sparse[r] = counts[i] as number;
            });
            expect(sparse).toEqual(dense);
          }
        }
      }),
      { numRuns: 400 },
    );
  });
});

describe('prefix methods on the load index', () => {
  // Prompts over a few shared prefixes, in 16-token windows, so that holders, cold misses,
  // overloaded holders and load ties all come up in short runs.
  type PromptOp = { kind: 'begin'; prefix: number; windows: number; maxNew: number } | HostOp;
  const promptOp: fc.Arbitrary<PromptOp> = fc.oneof(
    {
      weight: 6,
      arbitrary: fc.record({
        kind: fc.constant('begin' as const),
        prefix: fc.nat({ max: 5 }),
        windows: fc.integer({ min: 0, max: 6 }),
        maxNew: fc.oneof(fc.integer({ min: 0, max: 40 }), fc.integer({ min: 0, max: 400 })),
      }),
    },
    ...hostOps(24),
  );
  const prompt = (prefix: number, windows: number): Uint32Array => {
    const ids = new Uint32Array(16 * (windows + 1));
    // The first window names the prefix; later windows depend on the prefix and position, so
    // prompts of one prefix extend each other.
    for (let i = 0; i < ids.length; i++) ids[i] = 1 + prefix * 1000 + (i < 16 ? 0 : i);
    return ids;
  };
  const configs: [DispatcherConfig, number][] = [
    [
      {
        method: 'cache_aware',
        window: 16,
        maxPrefixTokens: 64,
        capacityTokens: 48,
        slackTokens: 0,
      },
      24,
    ],
    [{ method: 'cache_aware', window: 16, slackTokens: 20, epsilon: 0.1, loadWeight: 0 }, 24],
    [{ method: 'cache_aware', window: 16, slackTokens: 0, loadWeight: 0.5, coldPick: 'hash' }, 24],
    // Few ranks: most of them hold a prefix, so the ranks that do not are often not the least
    // loaded, and holders come in any order.
    [{ method: 'cache_aware', window: 16, slackTokens: 0, loadWeight: 0.25, epsilon: 0.5 }, 5],
    [{ method: 'cache_aware', window: 16, slackTokens: 0, loadWeight: 0, epsilon: 0.5 }, 5],
    [{ method: 'consistent_hash', window: 16, prefixLength: 32, epsilon: 0.1 }, 24],
    [{ method: 'consistent_hash', window: 16, load: 'requests', epsilon: 0, slack: 1 }, 24],
  ];
  for (const [config, maxRanks] of configs) {
    it(`${JSON.stringify(config)}: indexed decisions equal scanned ones`, () => {
      const reasons = new Map<string, number>();
      fc.assert(
        fc.property(
          fc.integer({ min: 1, max: maxRanks }),
          fc.array(promptOp, { minLength: 50, maxLength: 400 }),
          (n, ops) => {
            const pair = new Pair(config, n);
            for (const o of ops) {
              if (o.kind !== 'begin') {
                pair.apply(o, maxRanks);
                continue;
              }
              const req = { inputIds: prompt(o.prefix, o.windows), maxNewTokens: o.maxNew };
              const both = pair.begin(req);
              if (!both) continue;
              const [a, b] = both;
              expect([a.rank, a.reason, a.matchedTokens]).toEqual([
                b.rank,
                b.reason,
                b.matchedTokens,
              ]);
              reasons.set(a.reason, (reasons.get(a.reason) ?? 0) + 1);
            }
          },
        ),
        { numRuns: 150 },
      );
      // Equal decisions prove little unless every path ran: count them.
      const paths =
        config.method === 'cache_aware'
          ? [
              'cache-hit',
              'cache-hit-overloaded',
              config.coldPick === 'hash' ? 'cache-miss-hash' : 'cache-miss-least-load',
            ]
          : ['consistent-hash', 'consistent-hash-overflow'];
      for (const reason of paths) expect(reasons.get(reason) ?? 0).toBeGreaterThan(200);
    });
  }
});

describe('cache_aware churn order over a long run', () => {
  it('stays equal to the scan through the lazy decay rescales (720,000 decisions)', () => {
    // Every decision scales the churn values' growth by 1 / 0.999; past 1e100 (every ~230,000
    // decisions) they are all rescaled at once, and the load index must re-read them. Without
    // the rescale the growth overflows to Infinity after ~710,000, and the two paths then
    // disagree on ties (Infinity - Infinity is NaN to the scan). Cold prompts on idle ranks
    // tie on load, so the churn order decides nearly every one of these.
    const config = { method: 'cache_aware', window: 16, capacityTokens: 64 };
    const indexed = createDispatcher(config);
    const scanned = createDispatcher(config);
    const t1 = createLoadTracker(8);
    const t2 = createLoadTracker(8);
    const ids = new Uint32Array(16);
    let mismatches = 0;
    let cold = 0;
    for (let i = 0; i < 720_000; i++) {
      ids[0] = 1 + (i % 50_000);
      ids[1] = i % 7;
      const a = indexed.begin({ inputIds: ids }, t1);
      const b = scanned.begin({ inputIds: ids }, t2, { view: t2.ranks.slice() });
      if (a.rank !== b.rank || a.reason !== b.reason) mismatches++;
      if (a.reason === 'cache-miss-least-load') cold++;
      a.done();
      b.done();
    }
    expect(mismatches).toBe(0);
    expect(cold).toBeGreaterThan(600_000);
  });
});

describe('failover on the load index', () => {
  for (const method of ['prefix_match', 'follow_bootstrap_room']) {
    it(`${method}: the indexed failover equals the scanned one, most ranks down`, () => {
      const indexed = createDispatcher({ method, window: 16 });
      const scanned = createDispatcher({ method, window: 16 });
      const tracker = createLoadTracker(200);
      // Three ranks up: 64 draws over 200 ranks miss them about a third of the time, and the
      // fallback (the next healthy rank after the first draw) decides.
      for (const r of tracker.ranks) tracker.setHealthy(r.rank, r.rank % 67 === 5);
      let failovers = 0;
      for (let i = 0; i < 400; i++) {
        const ids = new Uint32Array(32).fill(i + 1);
        const request = method === 'prefix_match' ? { inputIds: ids } : { bootstrapRoom: i * 7919 };
        const a = indexed.begin(request, tracker);
        const b = scanned.dispatch(
          request,
          tracker.ranks.map((r) => ({ ...r })),
        );
        expect([a.rank, a.reason]).toEqual([b.rank, b.reason]);
        if (a.reason.endsWith('failover')) failovers++;
        a.done();
      }
      expect(failovers).toBeGreaterThan(350);
    });
  }
});
