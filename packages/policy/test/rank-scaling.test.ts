// Indexes that keep decisions cheap at many ranks must not change a single decision: the load
// index gives exactly the rank a scan of the healthy ranks gives (tie-break rotation included),
// and the inverted prefix index matches exactly what asking every rank matches.
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { ChainedPrefixIndex } from '../src/hashing/chained-index.ts';
import { createDispatcher, createLoadTracker, type DispatchTicket } from '../src/index.ts';
import { LoadIndex } from '../src/load-index.ts';

type Op =
  | { kind: 'begin'; input: number; maxNew: number }
  | { kind: 'done'; pick: number }
  | { kind: 'health'; rank: number; healthy: boolean }
  | { kind: 'resize'; ranks: number };

const op: fc.Arbitrary<Op> = fc.oneof(
  {
    weight: 6,
    arbitrary: fc.record({
      kind: fc.constant('begin' as const),
      input: fc.integer({ min: 0, max: 3 }),
      maxNew: fc.integer({ min: 0, max: 2 }),
    }),
  },
  { weight: 4, arbitrary: fc.record({ kind: fc.constant('done' as const), pick: fc.nat() }) },
  {
    weight: 1,
    arbitrary: fc.record({
      kind: fc.constant('health' as const),
      rank: fc.nat({ max: 40 }),
      healthy: fc.boolean(),
    }),
  },
  {
    weight: 1,
    arbitrary: fc.record({
      kind: fc.constant('resize' as const),
      ranks: fc.integer({ min: 1, max: 40 }),
    }),
  },
);

describe('LoadIndex', () => {
  for (const method of ['total_tokens', 'total_requests']) {
    it(`${method}: indexed decisions equal scanned ones under any interleaving`, () => {
      fc.assert(
        fc.property(fc.integer({ min: 1, max: 40 }), fc.array(op, { maxLength: 300 }), (n, ops) => {
          const indexed = {
            d: createDispatcher({ method }),
            t: createLoadTracker(n),
            open: [] as DispatchTicket[],
          };
          const scanned = {
            d: createDispatcher({ method }),
            t: createLoadTracker(n),
            open: [] as DispatchTicket[],
          };
          for (const o of ops) {
            if (o.kind === 'begin') {
              const req = { inputIds: new Uint32Array(o.input).fill(1), maxNewTokens: o.maxNew };
              const healthy = indexed.t.ranks.some((r) => r.healthy);
              if (!healthy) continue;
              const a = indexed.d.begin(req, indexed.t);
              // A view that is not the tracker's own array takes the scanning path.
              const b = scanned.d.begin(req, scanned.t, { view: scanned.t.ranks.slice() });
              expect(a.rank).toBe(b.rank);
              indexed.open.push(a);
              scanned.open.push(b);
            } else if (o.kind === 'done') {
              if (indexed.open.length === 0) continue;
              const i = o.pick % indexed.open.length;
              indexed.open.splice(i, 1)[0]?.done();
              scanned.open.splice(i, 1)[0]?.done();
            } else if (o.kind === 'health') {
              if (o.rank >= indexed.t.ranks.length) continue;
              indexed.t.setHealthy(o.rank, o.healthy);
              scanned.t.setHealthy(o.rank, o.healthy);
            } else {
              indexed.t.resize(o.ranks);
              scanned.t.resize(o.ranks);
            }
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
