import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { RadixCache, type RadixHandle } from '../src/cache/radix-cache.ts';
import { type BlockTokenSource, describeTokens, tokenSourceOf } from '../src/cache/token-source.ts';
import { getProfile } from '../src/cost/profiles.ts';
import { simulatePlan } from '../src/simulate.ts';
import { buildWorkload } from '../src/workloads/registry.ts';
import { traceTokens } from '../src/workloads/replay.ts';
import { cachedNodes } from './helpers/radix.ts';

// A radix cache given described arrays (token-source.ts) keeps ranges of their sources
// instead of copies, and compares equal block ids a block at a time. It must behave exactly
// as the same cache given plain copies: same matches, sizes, nodes, evicted and stored paths.
// Tokens here come from a vocabulary of 3, so blocks with different ids often share tokens
// and the block-at-a-time shortcut must not lose a chance-equal token.

class TestSource implements BlockTokenSource {
  constructor(
    readonly family: string,
    readonly blockTokens: number,
    private readonly ids: readonly number[],
    readonly length: number,
  ) {}
  blockId(b: number): number {
    return this.ids[b]!;
  }
  tokenAt(p: number): number {
    const id = this.blockId(Math.floor(p / this.blockTokens));
    const q = p % this.blockTokens;
    // Family-dependent, so two families' equal ids need not give equal tokens.
    return 1 + ((id * 7 + q * 3 + (id >> 1) * q + this.family.length) % 3);
  }
}

function build(family: string, blockTokens: number, ids: number[], length: number): Uint32Array {
  const src = new TestSource(family, blockTokens, ids, length);
  const out = new Uint32Array(length);
  for (let p = 0; p < length; p++) out[p] = src.tokenAt(p);
  describeTokens(out, src);
  return out;
}

type Op =
  | { kind: 'insert'; family: number; ids: number[]; cut: number; drop: boolean; resume: boolean }
  | { kind: 'extend'; which: number; tail: number[] }
  | { kind: 'lock'; which: number }
  | { kind: 'unlock'; which: number }
  | { kind: 'evict'; tokens: number }
  | { kind: 'reset' };

const op: fc.Arbitrary<Op> = fc.oneof(
  {
    weight: 8,
    arbitrary: fc.record({
      kind: fc.constant('insert' as const),
      family: fc.nat(1),
      // Few ids, so prompts share leading blocks.
      ids: fc.array(fc.integer({ min: 0, max: 4 }), { minLength: 1, maxLength: 8 }),
      cut: fc.nat(7),
      drop: fc.boolean(),
      resume: fc.boolean(),
    }),
  },
  {
    weight: 2,
    arbitrary: fc.record({
      kind: fc.constant('extend' as const),
      which: fc.nat(),
      tail: fc.array(fc.integer({ min: 1, max: 3 }), { maxLength: 6 }),
    }),
  },
  { weight: 2, arbitrary: fc.record({ kind: fc.constant('lock' as const), which: fc.nat() }) },
  { weight: 2, arbitrary: fc.record({ kind: fc.constant('unlock' as const), which: fc.nat() }) },
  { weight: 3, arbitrary: fc.record({ kind: fc.constant('evict' as const), tokens: fc.nat(160) }) },
  { weight: 1, arbitrary: fc.record({ kind: fc.constant('reset' as const) }) },
);

describe('radix keys kept as ranges of a token source', () => {
  it('change nothing a cache does (property, page sizes 1 and 2, two families)', () => {
    let shared = 0;
    fc.assert(
      fc.property(
        fc.constantFrom(1, 2),
        // Prompts of up to 8 blocks: 48-64 tokens, most past the 17 below which arrays are
        // copied rather than described.
        fc.constantFrom(6, 8),
        fc.array(op, { minLength: 1, maxLength: 60 }),
        (pageSize, blockTokens, ops) => {
          const logA: string[] = [];
          const logB: string[] = [];
          const hooks = (log: string[]) => ({
            stored: (p: Uint32Array, s: number) => log.push(`+${s}:${p.join(',')}`),
            evicted: (p: Uint32Array, s: number) => log.push(`-${s}:${p.join(',')}`),
          });
          const a = new RadixCache({
            capacityTokens: 200,
            pageSize,
            onEvict: (p) => logA.push(`e${p.join(',')}`),
          });
          const b = new RadixCache({
            capacityTokens: 200,
            pageSize,
            onEvict: (p) => logB.push(`e${p.join(',')}`),
          });
          // Hooks make extend() rebuild full paths; run half the cases with them.
          if (ops.length % 2 === 0) {
            a.hooks = hooks(logA);
            b.hooks = hooks(logB);
          }
          const prompts: Uint32Array[] = [];
          const held: { a: RadixHandle; b: RadixHandle; depth: number }[] = [];
          for (const o of ops) {
            if (o.kind === 'insert') {
              const family = o.family === 0 ? 'f' : 'family-g';
              const full = build(family, blockTokens, o.ids, o.ids.length * blockTokens);
              // A partial last block, and sometimes a view without the last token (as a rank
              // matches the prompt minus its last token).
              const len = Math.max(1, full.length - (o.cut % blockTokens));
              const described = o.drop ? full.subarray(0, len - 1) : full.subarray(0, len);
              if (described.length === 0) continue;
              const plain = described.slice();
              for (const c of [a, b]) {
                const over = c.used + plain.length - c.capacity;
                if (over > 0) c.evict(over);
              }
              if (a.used + plain.length > a.capacity) continue;
              prompts.push(plain);
              if (o.resume) {
                // As a rank admits: match, then insert from the matched node.
                const ma = a.match(described);
                const mb = b.match(plain);
                expect(ma.matchedTokens).toBe(mb.matchedTokens);
                a.insertFrom(ma.handle, ma.matchedTokens, described);
                b.insertFrom(mb.handle, mb.matchedTokens, plain);
              } else {
                a.insert(described);
                b.insert(plain);
              }
            } else if (o.kind === 'extend' && prompts.length > 0) {
              // A finished request's reply below the node holding its prompt.
              const p = prompts[o.which % prompts.length]!;
              const ma = a.match(p);
              const mb = b.match(p);
              const depth = ma.matchedTokens;
              if (depth === 0) continue;
              const tail = Uint32Array.from(o.tail);
              a.lock(ma.handle);
              b.lock(mb.handle);
              const ea = a.extend(ma.handle, depth, tail);
              const eb = b.extend(mb.handle, depth, tail);
              a.unlock(ma.handle);
              b.unlock(mb.handle);
              const len = depth + tail.length - (tail.length % pageSize);
              const full = new Uint32Array(depth + tail.length);
              full.set(p.subarray(0, depth));
              full.set(tail, depth);
              prompts.push(full.subarray(0, len));
              expect(ea === ma.handle).toBe(eb === mb.handle);
            } else if (o.kind === 'lock' && prompts.length > 0) {
              const p = prompts[o.which % prompts.length]!;
              const ma = a.match(p);
              const mb = b.match(p);
              a.lock(ma.handle);
              b.lock(mb.handle);
              held.push({ a: ma.handle, b: mb.handle, depth: ma.matchedTokens });
            } else if (o.kind === 'unlock' && held.length > 0) {
              const h = held.splice(o.which % held.length, 1)[0]!;
              a.unlock(h.a);
              b.unlock(h.b);
            } else if (o.kind === 'evict') {
              expect(a.evict(o.tokens)).toBe(b.evict(o.tokens));
            } else if (o.kind === 'reset') {
              a.reset();
              b.reset();
              held.length = 0;
            }
            expect([a.used, a.evictable, a.nodeCount]).toEqual([b.used, b.evictable, b.nodeCount]);
            for (const p of prompts)
              expect(a.match(p).matchedTokens).toBe(b.match(p).matchedTokens);
          }
          expect(logA).toEqual(logB);
          shared += cachedNodes(a).filter((n) => n.src !== null).length;
        },
      ),
      { numRuns: 500 },
    );
    // The runs did keep source ranges (not copies).
    expect(shared).toBeGreaterThan(500);
  });

  it('keeps no token copies for described prompts', () => {
    const cache = new RadixCache({ capacityTokens: 1 << 20 });
    for (let i = 0; i < 50; i++) {
      cache.insert(build('f', 64, [0, 1, i % 7, i], 64 * 3 + 10));
    }
    const all = cachedNodes(cache);
    expect(all.length).toBeGreaterThan(10);
    for (const n of all) {
      expect(n.src).not.toBeNull();
      expect(n.key.length).toBe(0);
    }
  });

  it('describeTokens refuses a view or a length that does not match', () => {
    const src = new TestSource('f', 16, [1, 2], 32);
    const arr = new Uint32Array(32);
    expect(() => describeTokens(arr.subarray(1), src)).toThrow(/own its whole buffer/);
    expect(() => describeTokens(new Uint32Array(31), src)).toThrow(/31 tokens, the source 32/);
    describeTokens(arr, src);
    expect(tokenSourceOf(arr.subarray(2, 30))).toBe(src);
    expect(tokenSourceOf(new Uint32Array(32))).toBeNull();
    // Short arrays (V8 keeps them on its heap) are neither described nor looked up.
    expect(tokenSourceOf(arr.subarray(0, 16))).toBeNull();
    const short = new Uint32Array(16);
    describeTokens(short, new TestSource('f', 16, [1], 16));
    expect(tokenSourceOf(short)).toBeNull();
  });

  it("a trace request's source computes the tokens its array holds", () => {
    fc.assert(
      fc.property(
        fc.array(fc.nat(1000), { minLength: 2, maxLength: 6 }),
        fc.integer({ min: 1, max: 15 }),
        fc.integer(),
        fc.option(fc.nat(1000), { nil: undefined }),
        (hashIds, cut, salt, tailId) => {
          const blockTokens = 16;
          const inputLength = hashIds.length * blockTokens - cut;
          const ids = traceTokens({ inputLength, hashIds }, blockTokens, salt, tailId);
          const src = tokenSourceOf(ids)!;
          expect(src.length).toBe(inputLength);
          for (let p = 0; p < inputLength; p++) expect(src.tokenAt(p)).toBe(ids[p]);
          const last = Math.ceil(inputLength / blockTokens) - 1;
          const partial = inputLength % blockTokens !== 0;
          expect(src.blockId(last)).toBe(partial && tailId !== undefined ? tailId : hashIds[last]);
        },
      ),
    );
  });

  it("a trace block's tokens are the documented mix of (salt, id, position)", () => {
    // The reference: token pos of block id, as the replay's header comment defines it. Any
    // change here changes every replay's results.
    const reference = (salt: number, id: number, pos: number) => {
      let h0 = Math.imul(salt ^ id, 0x9e3779b1) ^ (id >>> 16);
      h0 = Math.imul(h0 ^ (h0 >>> 15), 0x85ebca6b);
      let h = (h0 + Math.imul(pos + 1, 0x9e3779b9)) | 0;
      h = Math.imul(h ^ (h >>> 16), 0x7feb352d);
      h ^= h >>> 15;
      return 1 + Math.floor((h >>> 0) * ((30_000 - 1) / 2 ** 32));
    };
    fc.assert(
      fc.property(fc.integer(), fc.nat(), (salt, id) => {
        const ids = traceTokens({ inputLength: 512, hashIds: [id] }, 512, salt);
        for (let p = 0; p < 512; p++) expect(ids[p]).toBe(reference(salt, id, p));
      }),
      { numRuns: 200 },
    );
  });

  it('a replay gives the same results as one whose requests carry plain token arrays', () => {
    const plan = buildWorkload('replay', { limit: 400, ranks: 4 }, 3);
    const plain = {
      ...plan,
      requests: plan.requests.map((r) => ({
        id: r.id,
        clientId: r.clientId,
        outputTokens: r.outputTokens,
        arrivalMs: r.arrivalMs,
        sessionKey: r.sessionKey,
        ...(r.after ? { after: r.after } : {}),
        ...(r.routingKey !== undefined ? { routingKey: r.routingKey } : {}),
        inputIds: r.inputIds.slice(),
      })),
    };
    expect(tokenSourceOf(plan.requests[0]!.inputIds)).not.toBeNull();
    // inputIds is an own, enumerable property: a copy by spread carries the tokens.
    const first = plan.requests[0]!;
    expect(Object.keys(first)).toContain('inputIds');
    expect({ ...first }.inputIds).toEqual(first.inputIds);
    expect(tokenSourceOf(plain.requests[0]!.inputIds)).toBeNull();
    // A small KV pool, so eviction runs too.
    const profile = { ...getProfile('h200-llama-3.1-8b'), kvCapacityTokens: 200_000 };
    for (const method of ['cache_aware', 'round_robin']) {
      const opts = { policy: { method }, ranks: 4, profile, seed: 3 };
      const x = simulatePlan(plan, opts);
      const y = simulatePlan(plain, opts);
      expect(x.summary.hitRate).toBeGreaterThan(0);
      expect(x.summary).toEqual(y.summary);
      expect(x.records).toEqual(y.records);
    }
  });
});
