// KeptMap and KeptSet behave as a Map and a Set (their one hidden entry never shows).
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { KeptMap, KeptSet } from '../src/engine/kept-tables.ts';

type Op = { kind: 'set' | 'delete'; key: number };
const ops = fc.array(
  fc.record({ kind: fc.constantFrom<'set' | 'delete'>('set', 'delete'), key: fc.nat(6) }),
  { maxLength: 60 },
);

describe('kept tables', () => {
  it('a KeptMap answers as a Map after any sets and deletes', () => {
    fc.assert(
      fc.property(ops, (list: Op[]) => {
        const kept = new KeptMap<number, string>();
        const plain = new Map<number, string>();
        for (const [i, op] of list.entries()) {
          if (op.kind === 'set') {
            kept.set(op.key, `v${i}`);
            plain.set(op.key, `v${i}`);
          } else {
            expect(kept.delete(op.key)).toBe(plain.delete(op.key));
          }
          expect(kept.size).toBe(plain.size);
          for (let k = 0; k <= 6; k++) {
            expect(kept.has(k)).toBe(plain.has(k));
            expect(kept.get(k)).toBe(plain.get(k));
          }
        }
        expect(kept.keys()).toEqual([...plain.keys()]);
        const values: string[] = [];
        kept.forEachValue((v) => values.push(v));
        expect(values).toEqual([...plain.values()]);
      }),
    );
  });

  it('a KeptSet answers as a Set, and drain empties it in insertion order', () => {
    const objs = Array.from({ length: 7 }, (_, i) => ({ i }));
    fc.assert(
      fc.property(ops, (list: Op[]) => {
        const kept = new KeptSet<{ i: number }>();
        const plain = new Set<{ i: number }>();
        for (const op of list) {
          const o = objs[op.key]!;
          if (op.kind === 'set') {
            kept.add(o);
            plain.add(o);
          } else {
            expect(kept.delete(o)).toBe(plain.delete(o));
          }
          expect(kept.size).toBe(plain.size);
          for (const x of objs) expect(kept.has(x)).toBe(plain.has(x));
        }
        expect(kept.drain()).toEqual([...plain]);
        expect(kept.size).toBe(0);
        kept.add(objs[0]!);
        expect(kept.size).toBe(1);
        expect(kept.drain()).toEqual([objs[0]]);
      }),
    );
  });
});
