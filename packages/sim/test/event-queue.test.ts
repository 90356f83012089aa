// the engine. Events run by (time, sequence number), time jumps from event to
// event, and nothing in the simulation reads a wall clock or Math.random.
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { EventQueue } from '../src/engine/event-queue.ts';
import { stream } from '../src/workloads/random.ts';

describe('EventQueue', () => {
  it('runs events by time, equal times first-in first-out, and jumps the clock to each', () => {
    const q = new EventQueue();
    const seen: string[] = [];
    const log = (name: string) => () => seen.push(`${name}@${q.now()}`);
    // Many equal times scheduled out of order exercise the heap's tie-breaking.
    const times = [50, 10, 30, 10, 50, 0, 30, 10, 1e9, 0];
    times.forEach((t, i) => {
      q.at(t, log(`e${i}`));
    });
    // An event scheduled while running, at the current time, runs after those already queued.
    q.at(10, () => {
      seen.push(`x@${q.now()}`);
      q.at(10, log('late'));
    });
    q.run();
    const expected = times
      .map((t, i) => ({ t, i, name: `e${i}@${t}` }))
      .sort((a, b) => a.t - b.t || a.i - b.i)
      .map((e) => e.name);
    // x was queued after e0..e9 at time 10; 'late' after everything else at time 10.
    expected.splice(expected.indexOf('e7@10') + 1, 0, 'x@10', 'late@10');
    expect(seen).toEqual(expected);
    expect(q.now()).toBe(1e9);
    expect(q.executed).toBe(times.length + 2);
  });

  it('skips cancelled events, stops at untilMs, and refuses to schedule in the past', () => {
    const q = new EventQueue();
    const seen: number[] = [];
    const a = q.at(5, () => seen.push(5));
    q.at(7, () => seen.push(7));
    q.at(20, () => seen.push(20));
    a.cancel();
    q.run(10);
    expect(seen).toEqual([7]);
    expect(q.now()).toBe(7);
    expect(() => q.at(6, () => {})).toThrow(/before the current time/);
    expect(() => q.at(Number.NaN, () => {})).toThrow(RangeError);
    q.run();
    expect(seen).toEqual([7, 20]);
    expect(q.executed).toBe(2);
  });

  it('keeps order over many random events', () => {
    const q = new EventQueue();
    const rand = stream(1, 'event-queue-test');
    const out: [number, number][] = [];
    for (let i = 0; i < 5000; i++) {
      const t = Math.floor(rand() * 200);
      q.at(t, () => out.push([q.now(), i]));
    }
    q.run();
    for (let k = 1; k < out.length; k++) {
      const [t0, i0] = out[k - 1]!;
      const [t1, i1] = out[k]!;
      expect(t1 > t0 || (t1 === t0 && i1 > i0)).toBe(true);
    }
  });
});

describe('no hidden clocks or randomness', () => {
  // The simulation proper; the CLI's progress bar and validate/compare (which time real runs)
  // may read the wall clock, but never the engine, entities, workloads, cost model or metrics.
  const src = fileURLToPath(new URL('../src/', import.meta.url));
  const simCore = ['engine', 'entities', 'cache', 'cost', 'workloads', 'metrics', 'report'];
  const files = (dir: string): string[] =>
    readdirSync(dir).flatMap((f) => {
      const p = join(dir, f);
      return statSync(p).isDirectory() ? files(p) : p.endsWith('.ts') ? [p] : [];
    });

  it('never calls Math.random, Date.now, performance.now or new Date()', () => {
    const checked = [
      ...simCore.flatMap((d) => files(join(src, d))),
      join(src, 'simulate.ts'),
      join(src, 'compare.ts'),
    ];
    expect(checked.length).toBeGreaterThan(20);
    for (const file of checked) {
      const code = readFileSync(file, 'utf8')
        .split('\n')
        .filter((l) => !l.trimStart().startsWith('//') && !l.trimStart().startsWith('*'))
        .join('\n');
      expect(code, file).not.toMatch(/Math\.random|Date\.now|performance\.now|new Date\(/);
    }
  });
});
