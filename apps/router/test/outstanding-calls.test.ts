// The per-worker registry of attempts in flight (what evacuate() fails over when a worker is
// ejected): O(1) add and delete by the index each call carries, checked against a Set.
import { describe, expect, it } from 'vitest';
import type { ForwardCall } from '../src/proxy/forward.ts';
import { OutstandingCalls } from '../src/proxy/route.ts';

const fakeCall = (id: number) => ({ id, registryIndex: -1 }) as unknown as ForwardCall;

describe('OutstandingCalls', () => {
  it('adds, deletes from the middle and lists what is left', () => {
    const reg = new OutstandingCalls();
    const [a, b, c] = [fakeCall(1), fakeCall(2), fakeCall(3)];
    reg.add(a);
    reg.add(b);
    reg.add(c);
    reg.delete(b);
    expect(reg.size).toBe(2);
    expect(new Set(reg.snapshot())).toEqual(new Set([a, c]));
    expect(b.registryIndex).toBe(-1);
    // Deleting again, or deleting a call it never held, changes nothing.
    reg.delete(b);
    reg.delete(fakeCall(4));
    expect(new Set(reg.snapshot())).toEqual(new Set([a, c]));
  });

  it('a snapshot is a copy: calls that leave while it is walked do not disturb the walk', () => {
    const reg = new OutstandingCalls();
    const calls = [1, 2, 3, 4].map(fakeCall);
    for (const c of calls) reg.add(c);
    const seen: ForwardCall[] = [];
    for (const c of reg.snapshot()) {
      seen.push(c);
      reg.delete(c);
    }
    expect(new Set(seen)).toEqual(new Set(calls));
    expect(reg.size).toBe(0);
  });

  it('matches a Set over a long random run', () => {
    const reg = new OutstandingCalls();
    const ref = new Set<ForwardCall>();
    const pool = Array.from({ length: 64 }, (_, i) => fakeCall(i));
    let seed = 12345;
    const rand = () => {
      seed = (seed * 1103515245 + 12345) % 2147483648;
      return seed / 2147483648;
    };
    for (let step = 0; step < 20000; step++) {
      const c = pool[Math.floor(rand() * pool.length)]!;
      if (ref.has(c)) {
        reg.delete(c);
        ref.delete(c);
      } else {
        reg.add(c);
        ref.add(c);
      }
      if (step % 997 === 0) expect(new Set(reg.snapshot())).toEqual(ref);
    }
    expect(reg.size).toBe(ref.size);
    expect(new Set(reg.snapshot())).toEqual(ref);
  });
});
