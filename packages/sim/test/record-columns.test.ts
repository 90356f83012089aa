// A run keeps its request records as columns and builds record objects only when asked: the
// records read back, the summary computed from columns and the result's shape must be what
// they were with one object per request.
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { getProfile } from '../src/cost/profiles.ts';
import { RecordColumns } from '../src/metrics/record-columns.ts';
import { latencyStats, subsetLatency, summarize } from '../src/metrics/summary.ts';
import type { RequestRecord } from '../src/metrics/types.ts';
import { simulatePlan } from '../src/simulate.ts';
import { buildWorkload } from '../src/workloads/registry.ts';

const num = fc.oneof(
  fc.double({ noNaN: true, noDefaultInfinity: true }),
  fc.integer(),
  fc.constant(-0),
);
const record: fc.Arbitrary<RequestRecord> = fc
  .record({
    id: fc.nat(),
    clientId: fc.nat(),
    sessionKey: fc.string(),
    tenant: fc.option(fc.string(), { nil: undefined }),
    arrivalMs: num,
    rank: fc.nat(64),
    reason: fc.constantFrom('round-robin', 'prefix-hash', 'cache-hit'),
    inputTokens: fc.nat(100_000),
    cachedTokens: fc.nat(100_000),
    outputTokens: fc.nat(4096),
    queueMs: num,
    ttftMs: num,
    endMs: num,
    retries: fc.nat(3),
  })
  .map(({ tenant, ...r }) => {
    // The host's shape: tenant after sessionKey, only when set.
    const { id, clientId, sessionKey, ...rest } = r;
    return { id, clientId, sessionKey, ...(tenant !== undefined ? { tenant } : {}), ...rest };
  });

/** summarize() as it was, over record objects: the reference for the columns version. */
function reference(recs: RequestRecord[], ranks: number, warmupMs?: number) {
  const byArrival = [...recs].sort((a, b) => a.arrivalMs - b.arrivalMs || a.id - b.id);
  const steady =
    warmupMs !== undefined
      ? byArrival.filter((r) => r.arrivalMs >= warmupMs)
      : byArrival.slice(ranks);
  return {
    ttft: recs.map((r) => r.ttftMs),
    cold: recs.filter((r) => r.cachedTokens === 0).map((r) => r.ttftMs),
    steady: steady.map((r) => r.ttftMs),
    warmup: byArrival.slice(0, ranks).map((r) => r.ttftMs),
    retried: recs.filter((r) => r.retries > 0).length,
  };
}

describe('RecordColumns', () => {
  it('gives back every record exactly as pushed (fields, order, -0, tenant only when set)', () => {
    fc.assert(
      fc.property(fc.array(record, { maxLength: 40 }), (recs) => {
        const c = RecordColumns.of(recs);
        expect(c.length).toBe(recs.length);
        const back = c.toArray();
        expect(back).toEqual(recs);
        back.forEach((r, i) => {
          expect(Object.keys(r)).toEqual(Object.keys(recs[i]!));
          expect(Object.is(r.arrivalMs, recs[i]!.arrivalMs)).toBe(true);
        });
      }),
    );
  });

  it('summarizes columns as it summarized objects', () => {
    const base = { options: {}, failed: 0, perRank: [], reasons: {}, evictedNodes: 0, events: 0 };
    fc.assert(
      fc.property(
        fc.array(record, { maxLength: 40 }),
        fc.nat(5),
        fc.option(fc.integer({ min: -10, max: 10 }), { nil: undefined }),
        (recs, ranks, warmupMs) => {
          const input = {
            ...base,
            policy: 'x',
            ranks,
            mode: 'open' as const,
            ...(warmupMs !== undefined ? { warmupMs } : {}),
          };
          const s = summarize({ ...input, records: recs });
          expect(summarize({ ...input, records: RecordColumns.of(recs) })).toEqual(s);
          const ref = reference(recs, ranks, warmupMs);
          expect(s.retried).toBe(ref.retried);
          expect(s.ttftMs).toEqual(latencyStats(ref.ttft));
          expect(s.coldTtftMs).toEqual(subsetLatency(ref.cold));
          expect(s.steadyTtftMs).toEqual(subsetLatency(ref.steady));
          expect(s.warmupTtftMs).toEqual(subsetLatency(ref.warmup));
        },
      ),
    );
  });
});

describe('a run result', () => {
  it('builds its records on first read, in completion order, as own enumerable data', () => {
    const plan = buildWorkload('replay', { limit: 200 }, 1);
    const run = simulatePlan(plan, {
      policy: { method: 'round_robin' },
      ranks: 4,
      profile: getProfile('h200-llama-3.1-8b'),
      seed: 1,
    });
    expect(Object.keys(run)).toEqual(['summary', 'records', 'meanInSystem']);
    const first = run.records;
    expect(first).toHaveLength(run.summary.requests);
    expect(run.records).toBe(first);
    expect(Object.getOwnPropertyDescriptor(run, 'records')?.value).toBe(first);
    const ends = first.map((r) => r.endMs);
    expect(ends).toEqual([...ends].sort((a, b) => a - b));
    expect(JSON.parse(JSON.stringify({ ...run })).records).toEqual(first);
    expect(structuredClone(run).records).toEqual(first);
  });
});
