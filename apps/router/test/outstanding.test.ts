// The per-worker registry of attempts in flight (what evacuate() fails over when a worker is
// ejected): O(1) add and delete by the index each call carries, checked against a Set; and
// the router using it to move a hung request off a worker that gets ejected.
import { request } from 'undici';
import { afterEach, describe, expect, it } from 'vitest';
import { Outstanding } from '../src/proxy/outstanding.ts';
import { startFaultyWorker } from './helpers/faulty-worker.ts';
import { listenRouter, NO_ACTIVE_CHECKS } from './helpers/router.ts';

interface Call {
  id: number;
  registryIndex: number;
}
const fakeCall = (id: number): Call => ({ id, registryIndex: -1 });

describe('Outstanding', () => {
  it('adds, deletes from the middle and lists what is left', () => {
    const reg = new Outstanding<Call>();
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
    const reg = new Outstanding<Call>();
    const calls = [1, 2, 3, 4].map(fakeCall);
    for (const c of calls) reg.add(c);
    const seen: Call[] = [];
    for (const c of reg.snapshot()) {
      seen.push(c);
      reg.delete(c);
    }
    expect(new Set(seen)).toEqual(new Set(calls));
    expect(reg.size).toBe(0);
  });

  it('matches a Set over a long random run', () => {
    const reg = new Outstanding<Call>();
    const ref = new Set<Call>();
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

describe('a worker taken out moves the attempts it holds elsewhere', () => {
  const cleanups: (() => Promise<void> | void)[] = [];
  afterEach(async () => {
    while (cleanups.length) await cleanups.pop()!();
  });

  it('a request hung on a worker is retried on another as soon as that worker is ejected', async () => {
    const a = await startFaultyWorker('hang-before-headers');
    const b = await startFaultyWorker('ok');
    cleanups.push(
      () => a.close(),
      () => b.close(),
    );
    const { url: base } = await listenRouter(
      [
        '--worker-urls',
        a.url,
        b.url,
        '--load-balance-method',
        'round_robin',
        ...NO_ACTIVE_CHECKS,
        // Far longer than the test: only the ejection can free the hung request.
        '--first-byte-timeout-ms',
        '30000',
        '--outlier-consecutive-failures',
        '3',
        '--outlier-base-ejection-ms',
        '30000',
        '--retry-min-concurrency',
        '16',
        '--log-level',
        'silent',
      ],
      cleanups,
    );
    const url = `${base}/v1/chat/completions`;
    const body = JSON.stringify({ model: 'm', messages: [{ role: 'user', content: 'hi' }] });
    const send = () =>
      request(url, { method: 'POST', headers: { 'content-type': 'application/json' }, body });

    const startedAt = Date.now();
    const hung = send();
    for (let i = 0; i < 200 && a.requests === 0; i++) await new Promise((r) => setTimeout(r, 10));
    expect(a.requests).toBe(1);
    // Now worker a fails fast: three consecutive failures eject it.
    a.mode = 'status-500';
    for (let i = 0; i < 20 && a.requests < 4; i++) {
      const res = await send();
      await res.body.text();
      expect(res.statusCode).toBe(200);
    }
    expect(a.requests).toBeGreaterThanOrEqual(4);
    const res = await hung;
    await res.body.text();
    expect(res.statusCode).toBe(200);
    expect(res.headers['x-kvroute-rank']).toBe('1');
    expect(Date.now() - startedAt).toBeLessThan(10_000);
  });
});
