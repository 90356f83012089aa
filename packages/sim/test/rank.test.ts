import { describe, expect, it } from 'vitest';
import { EventQueue } from '../src/engine/event-queue.ts';
import { RankModel } from '../src/entities/rank.ts';
import { ids, unitProfile } from './helpers/rank.ts';

const profile = unitProfile;

interface Seen {
  first?: number;
  cached?: number;
  end?: number;
  out?: number;
  tokens: number[];
}

function submit(rank: RankModel, id: number, input: Uint32Array, maxNew: number, tokens = false) {
  const seen: Seen = { tokens: [] };
  rank.submit({
    id,
    inputIds: input,
    maxNewTokens: maxNew,
    onFirstToken: (t, c) => {
      seen.first = t;
      seen.cached = c;
    },
    onToken: tokens ? (_i, t) => seen.tokens.push(t) : undefined,
    onFinish: (t, info) => {
      seen.end = t;
      seen.out = info.outputTokens;
    },
  });
  return seen;
}

describe('RankModel', () => {
  it('chunks a long prefill and then decodes, with times from the cost model', () => {
    const q = new EventQueue();
    const rank = new RankModel({ rank: 0, profile, scheduler: q });
    const s = submit(rank, 1, ids(1, 2500), 4, true);
    q.run();
    // Three chunks (1000, 1000, 500): 3 floors + 25 ms of tokens.
    expect(s.first).toBeCloseTo(30 + 25, 9);
    expect(s.cached).toBe(0);
    // Three decode steps of batch 1: 6 ms each, coalesced into one event, tokens still timed.
    expect(s.end).toBeCloseTo(55 + 18, 9);
    expect(s.tokens.map((t) => Math.round(t))).toEqual([55, 61, 67, 73]);
    expect(s.out).toBe(4);
  });

  it('reports the cached prefix as SGLang does and reuses it', () => {
    const q = new EventQueue();
    const rank = new RankModel({ rank: 0, profile, scheduler: q });
    const prefix = ids(1, 800);
    const a = submit(rank, 1, Uint32Array.from([...prefix, 5001, 5002]), 2);
    q.run();
    const b = submit(rank, 2, Uint32Array.from([...prefix, 6001, 6002, 6003]), 2);
    const t0 = q.now();
    q.run();
    expect(a.cached).toBe(0);
    expect(b.cached).toBe(800);
    expect(b.first! - t0).toBeCloseTo(10 + 0.03, 9);
    // A fully cached prompt still computes its last token.
    const c = submit(rank, 3, Uint32Array.from([...prefix, 6001, 6002, 6003]), 1);
    q.run();
    expect(c.cached).toBe(802);
    expect(rank.stats().prefillTokens).toBe(802 + 3 + 1);
  });

  it('admits an arrival at the next decode step boundary, not after the coalesced run', () => {
    const q = new EventQueue();
    const rank = new RankModel({ rank: 0, profile, scheduler: q });
    const a = submit(rank, 1, ids(1, 100), 100);
    let b: Seen | undefined;
    // a's first token at 11 ms; then 6 ms decode steps. Arrive mid-step at 20 ms.
    q.at(20, () => {
      b = submit(rank, 2, ids(5000, 100), 2);
    });
    q.run();
    // Boundary after 20 is 11+6+6 = 23; b's prefill step also carries a's decode (batch 1).
    expect(b!.first).toBeCloseTo(23 + 11 + 6, 9);
    expect(a.end).toBeGreaterThan(b!.first!);
    expect(a.out).toBe(100);
  });

  it('gives the same timeline with and without decode coalescing', () => {
    const run = (coalesceDecode: boolean) => {
      const q = new EventQueue();
      const rank = new RankModel({ rank: 0, profile, scheduler: q, coalesceDecode });
      const seen: Seen[] = [];
      for (let i = 0; i < 6; i++) {
        q.at(i * 37, () =>
          seen.push(submit(rank, i, ids(i * 1000 + 1, 300 + 200 * i), 20 + 7 * i)),
        );
      }
      q.run();
      return { seen: seen.map((s) => [s.first, s.end]), events: q.executed };
    };
    const a = run(true);
    const b = run(false);
    expect(a.seen).toEqual(b.seen);
    expect(a.events).toBeLessThan(b.events);
  });

  it('waits for room in the KV pool and evicts unlocked cache to admit', () => {
    const q = new EventQueue();
    const small = { ...profile, kvCapacityTokens: 1000, chunkedPrefillSize: 1000 };
    const rank = new RankModel({ rank: 0, profile: small, scheduler: q });
    const a = submit(rank, 1, ids(1, 500), 300);
    const b = submit(rank, 2, ids(2000, 500), 10);
    q.run(0);
    expect(rank.load().waitingRequests).toBe(1);
    q.run();
    // b could only start after a finished and freed its reservation.
    expect(b.first!).toBeGreaterThan(a.end!);
    expect(rank.stats().evictedTokens).toBeGreaterThan(0);
    expect(rank.load()).toEqual({
      runningRequests: 0,
      waitingRequests: 0,
      usedTokens: 0,
      capacityTokens: 1000,
    });
  });

  it('lpm admits the waiting request with the longest cached prefix first', () => {
    const q = new EventQueue();
    const rank = new RankModel({
      rank: 0,
      profile: { ...profile, chunkedPrefillSize: 500 },
      scheduler: q,
      schedulePolicy: 'lpm',
    });
    submit(rank, 1, ids(1, 400), 1);
    q.run();
    submit(rank, 99, ids(7000, 600), 1); // occupies the next step
    const cold = submit(rank, 2, ids(9000, 400), 1);
    const warm = submit(rank, 3, Uint32Array.from([...ids(1, 400), 42]), 1);
    q.run();
    expect(warm.first!).toBeLessThan(cold.first!);
  });

  it('abort frees everything and the rank carries on', () => {
    const q = new EventQueue();
    const rank = new RankModel({ rank: 0, profile, scheduler: q });
    const a = submit(rank, 1, ids(1, 100), 1000);
    const b = submit(rank, 2, ids(500, 100), 5);
    q.at(50, () => expect(rank.abort(1)).toBe(true));
    q.run();
    expect(a.end).toBeUndefined();
    expect(b.out).toBe(5);
    expect(rank.abort(1)).toBe(false);
    expect(rank.load().usedTokens).toBe(0);
    expect(() => submit(rank, 3, ids(1, 20_000), 1)).toThrow(/more than the pool/);
  });

  it('with a page size, caches and reports whole pages only', () => {
    const q = new EventQueue();
    const rank = new RankModel({ rank: 0, profile, scheduler: q, pageSize: 16 });
    submit(rank, 1, ids(1, 100), 1);
    q.run();
    const b = submit(rank, 2, Uint32Array.from([...ids(1, 90), 7, 7, 7]), 1);
    q.run();
    expect(b.cached).toBe(80);
    expect(rank.cache.used % 16).toBe(0);
  });
});
