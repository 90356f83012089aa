import { afterEach, describe, expect, it } from 'vitest';
import { RealtimeScheduler } from '../src/scheduler.ts';

const open: RealtimeScheduler[] = [];
const make = (scale: number, wall?: () => number) => {
  const s = new RealtimeScheduler(scale, wall);
  open.push(s);
  return s;
};
afterEach(() => {
  for (const s of open.splice(0)) s.close();
});

const settle = (s: RealtimeScheduler) =>
  new Promise<void>((resolve) => {
    const poll = () => (s.pending() === 0 ? resolve() : setTimeout(poll, 1));
    poll();
  });

describe('RealtimeScheduler', () => {
  it('rejects a negative or non-finite time scale', () => {
    expect(() => new RealtimeScheduler(-1)).toThrow(/timeScale/);
    expect(() => new RealtimeScheduler(Number.NaN)).toThrow(/timeScale/);
  });

  it('time scale 0: runs everything on the next turn, in (time, sequence) order, now() = event time', async () => {
    const s = make(0);
    const seen: Array<[string, number]> = [];
    s.at(30, () => seen.push(['c', s.now()]));
    s.at(10, () => {
      seen.push(['a', s.now()]);
      s.at(s.now() + 5, () => seen.push(['a+5', s.now()]));
    });
    s.at(10, () => seen.push(['b', s.now()]));
    const cancelled = s.at(20, () => seen.push(['x', s.now()]));
    cancelled.cancel();
    expect(seen).toEqual([]);
    await new Promise((r) => setImmediate(r));
    expect(seen).toEqual([
      ['a', 10],
      ['b', 10],
      ['a+5', 15],
      ['c', 30],
    ]);
    // Between events model time stays where the last event left it.
    expect(s.now()).toBe(30);
  });

  it('scaled time: model ms = wall ms / scale, events in order, now() never goes back', async () => {
    let wall = 1000;
    const s = make(0.5, () => wall);
    expect(s.now()).toBe(0);
    wall += 10; // 10 wall ms = 20 model ms
    expect(s.now()).toBe(20);
    const order: number[] = [];
    const times: number[] = [];
    for (const t of [26, 22, 24]) {
      s.at(t, () => {
        order.push(t);
        times.push(s.now());
      });
    }
    wall += 100; // everything is due
    await settle(s);
    expect(order).toEqual([22, 24, 26]);
    expect(times).toEqual([22, 24, 26]);
    expect(s.now()).toBe(220);
  });

  it('real timers: an event scheduled in the future runs, a cancelled one does not', async () => {
    const s = make(0.01); // 100x faster than real time
    const ran: string[] = [];
    s.at(s.now() + 100, () => ran.push('due')); // ~1 wall ms
    s.at(s.now() + 50, () => ran.push('cancelled')).cancel();
    await settle(s);
    expect(ran).toEqual(['due']);
  });

  it('close() drops pending events', async () => {
    const s = make(0);
    let ran = false;
    s.at(1, () => {
      ran = true;
    });
    s.close();
    await new Promise((r) => setImmediate(r));
    expect(ran).toBe(false);
    expect(s.pending()).toBe(0);
  });
});
