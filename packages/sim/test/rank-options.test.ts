// Rank-model options beyond the basic SGLang loop: running-request cap, admission modes
// (reserve, SGLang's optimistic admission with retraction, vLLM's preempt-and-recompute) and
// the host-memory KV tier.
import { describe, expect, it } from 'vitest';
import { EventQueue } from '../src/engine/event-queue.ts';
import { type AdmissionMode, RankModel, type RankModelOptions } from '../src/entities/rank.ts';
import { ids, unitProfile } from './helpers/rank.ts';

const profile = unitProfile;

interface Seen {
  first?: number;
  cached?: number;
  end?: number;
  out?: number;
}

function rankWith(opts: Partial<RankModelOptions>) {
  const q = new EventQueue();
  const rank = new RankModel({ rank: 0, profile, scheduler: q, ...opts });
  const submit = (id: number, input: Uint32Array, maxNew: number) => {
    const seen: Seen = {};
    rank.submit({
      id,
      inputIds: input,
      maxNewTokens: maxNew,
      onFirstToken: (t, c) => {
        seen.first = t;
        seen.cached = c;
      },
      onFinish: (t, info) => {
        seen.end = t;
        seen.out = info.outputTokens;
      },
    });
    return seen;
  };
  return { q, rank, submit };
}

describe('maxRunningRequests', () => {
  it('admits at most that many at once; the rest wait for a slot', () => {
    const { q, submit } = rankWith({ maxRunningRequests: 1, admission: 'reserve' });
    const a = submit(1, ids(1, 100), 3);
    const b = submit(2, ids(1000, 100), 3);
    q.run();
    // a alone: prefill 11 ms, two decode steps of 6 ms; only then b is admitted.
    expect(a.first).toBeCloseTo(11, 9);
    expect(a.end).toBeCloseTo(23, 9);
    expect(b.first).toBeCloseTo(23 + 11, 9);
  });

  it('rejects a non-integer or < 1 cap', () => {
    expect(() => rankWith({ maxRunningRequests: 0 })).toThrow(/maxRunningRequests/);
    expect(() => rankWith({ maxRunningRequests: 1.5 })).toThrow(/maxRunningRequests/);
  });
});

describe('admission modes', () => {
  // Four requests of 1,000 input + 3,000 output tokens: reserved in full, only two fit the
  // 10,000-token pool at once; admitted optimistically, three or four start and the pool
  // runs out while they decode.
  const load = (admission: AdmissionMode) => {
    const { q, rank, submit } = rankWith({ admission });
    const seen = [0, 1, 2, 3].map((i) => submit(i, ids(1 + i * 5000, 1000), 3000));
    q.run();
    return { seen, stats: rank.stats(), load: rank.load() };
  };

  it('reserve: never preempts, but admits only what fits in full', () => {
    const { seen, stats, load: l } = load('reserve');
    expect(stats.preempted).toBe(0);
    for (const s of seen) expect(s.out).toBe(3000);
    // The third request waits for the first two to finish.
    expect(seen[2]!.first!).toBeGreaterThan(seen[0]!.end!);
    expect(l.usedTokens).toBe(0);
  });

  for (const admission of ['optimistic', 'preempt'] as const) {
    it(`${admission}: starts all four, runs out of KV, preempts, and still finishes every one`, () => {
      const { seen, stats, load: l } = load(admission);
      expect(stats.preempted).toBeGreaterThan(0);
      for (const s of seen) expect(s.out).toBe(3000);
      // At least three got their first token before any finished (reserve lets two).
      const firstDone = Math.min(...seen.map((s) => s.end!));
      expect(seen.filter((s) => s.first! < firstDone).length).toBeGreaterThanOrEqual(3);
      expect(l.usedTokens).toBe(0);
      expect(l.runningRequests).toBe(0);
    });
  }

  it('preempt (vLLM) recomputes the victim: more prefill tokens than the inputs', () => {
    const { stats } = load('preempt');
    expect(stats.prefillTokens).toBeGreaterThan(4 * 1000);
  });

  it('rejects an unknown mode', () => {
    expect(() => rankWith({ admission: 'lazy' as AdmissionMode })).toThrow(
      /admission must be one of reserve, optimistic, preempt/,
    );
  });
});

describe('host-memory KV tier', () => {
  // A 3,000-token GPU pool: prefix P (2,000) is evicted by an unrelated prompt, then asked for.
  const run = (hostKv?: RankModelOptions['hostKv']) => {
    const { q, rank, submit } = rankWith({
      kvCapacityTokens: 3000,
      admission: 'reserve',
      ...(hostKv ? { hostKv } : {}),
    });
    const p = ids(1, 2000);
    submit(1, Uint32Array.from([...p, 9001]), 1);
    q.run();
    submit(2, ids(20_000, 2500), 1);
    q.run();
    const t0 = q.now();
    const c = submit(3, Uint32Array.from([...p, 9002, 9003]), 1);
    q.run();
    return { c, ttft: c.first! - t0, stats: rank.stats() };
  };

  it('without it, the evicted prefix is recomputed', () => {
    const { c } = run();
    expect(c.cached).toBe(0);
  });

  it('with it, the prefix is loaded back at the configured rate and counts as cached', () => {
    const { c, ttft, stats } = run({ capacityTokens: 100_000, loadTokensPerMs: 100 });
    expect(c.cached).toBe(2000);
    expect(stats.hostLoadedTokens).toBe(2000);
    // Load 2,000 tokens at 100/ms = 20 ms, plus prefilling the 2 new tokens (10.02 ms).
    expect(ttft).toBeCloseTo(20 + 10 + 0.02, 9);
  });

  it('a host tier too small for the prefix keeps nothing of it', () => {
    // Eviction writes whole nodes; chunked prefill made one node per 1,000-token chunk, so
    // a 999-token tier cannot hold even the first.
    const { c } = run({ capacityTokens: 999, loadTokensPerMs: 100 });
    expect(c.cached).toBe(0);
  });

  it('fifo eviction drops the oldest written path even if it was read since', () => {
    // Host capacity for two 1,000-token paths; write A, B, read A, write C: LRU keeps A, FIFO not.
    const rankOf = (eviction: 'lru' | 'fifo') => {
      const { q, rank, submit } = rankWith({
        kvCapacityTokens: 1100,
        admission: 'reserve',
        hostKv: { capacityTokens: 2100, loadTokensPerMs: 1000, eviction },
      });
      const A = ids(1, 1000);
      const B = ids(10_000, 1000);
      const C = ids(20_000, 1000);
      const send = (id: number, x: Uint32Array) => {
        submit(id, Uint32Array.from([...x, 7]), 1);
        q.run();
      };
      send(1, A);
      send(2, B); // evicts A to host
      send(3, C); // evicts B to host
      send(4, A); // loads A back (an access), evicts C to host: host must drop one path
      send(5, B);
      return rank.stats().hostLoadedTokens;
    };
    // Both load A back (1,000). Making room for C then drops B under lru (A was just read)
    // and A under fifo (written first), so only fifo still has B to load.
    expect(rankOf('lru')).toBe(1000);
    expect(rankOf('fifo')).toBe(2000);
  });
});
