import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { KeyStore, OWN_BUFFER } from '../src/cache/key-store.ts';
import { RadixCache } from '../src/cache/radix-cache.ts';
import { cachedNodes } from './helpers/radix.ts';

// Radix keys in shared, compacted chunks must behave exactly as keys in their own buffers:
// the same matches, sizes, nodes and evicted paths after any sequence of operations, while
// keys move between chunks under them.

type Op =
  | { kind: 'insert'; prefix: number; tail: number[] }
  | { kind: 'lock'; which: number }
  | { kind: 'unlock'; which: number }
  | { kind: 'evict'; tokens: number }
  | { kind: 'reset' };

const PREFIXES = [
  Uint32Array.from({ length: 40 }, (_, i) => 100 + i),
  Uint32Array.from({ length: 25 }, (_, i) => 200 + i),
  new Uint32Array(0),
];

const op: fc.Arbitrary<Op> = fc.oneof(
  {
    weight: 6,
    arbitrary: fc.record({
      kind: fc.constant('insert' as const),
      prefix: fc.nat(PREFIXES.length - 1),
      tail: fc.array(fc.integer({ min: 1, max: 4 }), { maxLength: 30 }),
    }),
  },
  { weight: 2, arbitrary: fc.record({ kind: fc.constant('lock' as const), which: fc.nat() }) },
  { weight: 2, arbitrary: fc.record({ kind: fc.constant('unlock' as const), which: fc.nat() }) },
  {
    weight: 3,
    arbitrary: fc.record({ kind: fc.constant('evict' as const), tokens: fc.nat(120) }),
  },
  { weight: 1, arbitrary: fc.record({ kind: fc.constant('reset' as const) }) },
);

/** Every node's key is a view of the chunk that lists it (or its own buffer). */
function checkKeys(cache: RadixCache): void {
  for (const n of cachedNodes(cache)) {
    if (n.chunk === null || n.chunk === OWN_BUFFER) continue;
    expect(n.key.buffer).toBe(n.chunk.data.buffer);
    expect(n.chunk.owners.has(n)).toBe(true);
  }
}

function prompt(o: { prefix: number; tail: number[] }): Uint32Array {
  const p = PREFIXES[o.prefix]!;
  const out = new Uint32Array(p.length + o.tail.length);
  out.set(p, 0);
  out.set(o.tail, p.length);
  return out;
}

describe('KeyStore under a radix cache', () => {
  it('changes nothing a cache does, with keys moving between tiny chunks', () => {
    let moved = 0;
    fc.assert(
      fc.property(
        fc.constantFrom(1, 4),
        fc.array(op, { minLength: 1, maxLength: 80 }),
        (pageSize, ops) => {
          // Chunks of 96 tokens (an eighth of ~250 live is less): a few keys per chunk, and
          // evictions compact often.
          const store = new KeyStore({
            minChunkTokens: 96,
            maxChunkTokens: 512,
            chunkFromTokens: 0,
          });
          const logA: string[] = [];
          const logB: string[] = [];
          const a = new RadixCache({
            capacityTokens: 150,
            pageSize,
            keys: store,
            onEvict: (p) => logA.push(Array.from(p).join(',')),
          });
          const b = new RadixCache({
            capacityTokens: 150,
            pageSize,
            keys: null,
            onEvict: (p) => logB.push(Array.from(p).join(',')),
          });
          // A second cache on the same store, so chunks mix two caches' keys.
          const other = new RadixCache({ capacityTokens: 100, pageSize, keys: store });
          const inserted: Uint32Array[] = [];
          const locked: [ReturnType<RadixCache['insert']>, ReturnType<RadixCache['insert']>][] = [];
          for (const o of ops) {
            if (o.kind === 'insert') {
              const p = prompt(o);
              if (p.length > 150) continue;
              // Make room as a rank would, then insert.
              for (const c of [a, b]) {
                const over = c.used + p.length - c.capacity;
                if (over > 0) c.evict(over);
              }
              if (a.used + p.length > a.capacity) continue;
              inserted.push(p);
              a.insert(p);
              b.insert(p);
              other.evict(Math.max(0, other.used + p.length - other.capacity));
              if (other.used + p.length <= other.capacity) other.insert(p.slice().reverse());
            } else if (o.kind === 'lock' && inserted.length > 0) {
              const p = inserted[o.which % inserted.length]!;
              const ha = a.match(p).handle;
              const hb = b.match(p).handle;
              a.lock(ha);
              b.lock(hb);
              locked.push([ha, hb]);
            } else if (o.kind === 'unlock' && locked.length > 0) {
              const [ha, hb] = locked.splice(o.which % locked.length, 1)[0]!;
              a.unlock(ha);
              b.unlock(hb);
            } else if (o.kind === 'evict') {
              expect(a.evict(o.tokens)).toBe(b.evict(o.tokens));
            } else if (o.kind === 'reset') {
              a.reset();
              b.reset();
              locked.length = 0;
            }
            expect([a.used, a.evictable, a.nodeCount]).toEqual([b.used, b.evictable, b.nodeCount]);
            checkKeys(a);
            checkKeys(other);
            for (const p of inserted) {
              expect(a.match(p).matchedTokens).toBe(b.match(p).matchedTokens);
            }
          }
          expect(logA).toEqual(logB);
          // The store holds what the caches hold: a.used plus the other cache's tokens.
          expect(store.live).toBe(a.used + other.used);
          moved += store.tokensMoved;
        },
      ),
      { numRuns: 400 },
    );
    // The runs did exercise compaction.
    expect(moved).toBeGreaterThan(1000);
  });

  it('compacts a mostly evicted chunk: what it holds stays within about twice what is live', () => {
    const store = new KeyStore({
      minChunkTokens: 1024,
      maxChunkTokens: 1 << 16,
      chunkFromTokens: 0,
    });
    const cache = new RadixCache({ capacityTokens: 1 << 20, keys: store });
    const prompts = Array.from({ length: 400 }, (_, i) =>
      Uint32Array.from({ length: 100 }, (_, j) => i * 1000 + j + 1),
    );
    for (const p of prompts) cache.insert(p);
    expect(store.live).toBe(40_000);
    // LRU: the oldest 300 go, emptying the early chunks and compacting partly emptied ones.
    cache.evict(30_000);
    expect(cache.used).toBe(10_000);
    expect(store.live).toBe(10_000);
    expect(store.tokensMoved).toBeGreaterThan(0);
    // The survivors still match in full after moving.
    for (const p of prompts.slice(300)) expect(cache.match(p).matchedTokens).toBe(100);
    for (const p of prompts.slice(0, 300)) expect(cache.match(p).matchedTokens).toBe(0);
  });

  it('grows chunks with what it holds, so few are created', () => {
    const store = new KeyStore({
      minChunkTokens: 256,
      maxChunkTokens: 1 << 20,
      chunkFromTokens: 0,
    });
    const cache = new RadixCache({ capacityTokens: 1 << 22, keys: store });
    for (let i = 0; i < 1000; i++) {
      cache.insert(Uint32Array.from({ length: 500 }, (_, j) => i * 1000 + j + 1));
    }
    expect(store.live).toBe(500_000);
    // 500k tokens in chunks of an eighth of the live total: a few dozen chunks, not 1,000
    // buffers.
    expect(store.chunksCreated).toBeLessThan(60);
  });

  it('rejects bad chunk sizes', () => {
    expect(() => new KeyStore({ minChunkTokens: 0 })).toThrow(/minChunkTokens/);
    expect(() => new KeyStore({ chunkFromTokens: -1 })).toThrow(/chunkFromTokens/);
    expect(() => new KeyStore({ minChunkTokens: 64, maxChunkTokens: 32 })).toThrow(
      /maxChunkTokens/,
    );
  });
});

describe('KeyStore below its chunking size', () => {
  it('keeps keys in their own buffers, counted, until it holds chunkFromTokens', () => {
    const store = new KeyStore({ chunkFromTokens: 1000, minChunkTokens: 64 });
    const cache = new RadixCache({ capacityTokens: 10_000, keys: store });
    const a = cache.insert(Uint32Array.from({ length: 600 }, (_, i) => i + 1));
    const b = cache.insert(Uint32Array.from({ length: 600 }, (_, i) => 5000 + i));
    expect(a.chunk).toBe(OWN_BUFFER);
    expect(b.chunk).toBe(OWN_BUFFER);
    expect(store.chunksCreated).toBe(0);
    // Past 1,000 live tokens keys go into chunks.
    const c = cache.insert(Uint32Array.from({ length: 100 }, (_, i) => 9000 + i));
    expect(c.chunk).not.toBe(OWN_BUFFER);
    expect(store.chunksCreated).toBe(1);
    expect(store.live).toBe(1300);
    cache.evict(1300);
    expect(store.live).toBe(0);
  });
});
