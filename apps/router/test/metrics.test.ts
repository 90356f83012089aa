import { Counter, Histogram, Registry } from 'prom-client';
import { describe, expect, it } from 'vitest';
import { bindCounter, bindHistogram } from '../src/metrics.ts';

// The bound series update prom-client's entries directly after the first call; the exposition
// must be what prom-client's own label-bound children produce, through resets too.
function pair(buckets: number[]) {
  const make = () => {
    const registry = new Registry();
    const h = new Histogram({
      name: 'h_seconds',
      help: 'h',
      labelNames: ['rank', 'stream'] as const,
      buckets,
      registers: [registry],
    });
    const c = new Counter({
      name: 'c_total',
      help: 'c',
      labelNames: ['rank'] as const,
      registers: [registry],
    });
    return { registry, h, c };
  };
  return { fast: make(), ref: make() };
}

describe('bound metric series', () => {
  it('expose exactly what prom-client children expose', async () => {
    const buckets = [1e-6, 5e-6, 1e-5, 0.001, 0.5, 1, 30];
    const { fast, ref } = pair(buckets);
    const fastH = [
      bindHistogram(fast.h, { rank: '0', stream: 'true' }, buckets),
      bindHistogram(fast.h, { rank: '1', stream: 'false' }, buckets),
    ];
    const refH = [
      ref.h.labels({ rank: '0', stream: 'true' }),
      ref.h.labels({ rank: '1', stream: 'false' }),
    ];
    const fastC = [bindCounter(fast.c, { rank: '0' }), bindCounter(fast.c, { rank: '1' })];
    const refC = [ref.c.labels({ rank: '0' }), ref.c.labels({ rank: '1' })];
    const values = [0, 1e-6, 2e-6, 5e-6, 0.0009, 0.001, 0.3, 0.5, 1, 29.9, 30, 31, 1e9, 7e-7];
    for (let round = 0; round < 3; round++) {
      for (let i = 0; i < values.length * 3; i++) {
        const v = values[i % values.length]!;
        fastH[i % 2]!.observe(v);
        refH[i % 2]!.observe(v);
        fastC[(i >> 1) % 2]!.inc(Math.round(v * 7));
        refC[(i >> 1) % 2]!.inc(Math.round(v * 7));
      }
      expect(await fast.registry.metrics()).toBe(await ref.registry.metrics());
      // A reset drops the series; the next update recreates it through prom-client.
      fast.registry.resetMetrics();
      ref.registry.resetMetrics();
      expect(await fast.registry.metrics()).toBe(await ref.registry.metrics());
    }
    fastH[0]!.observe(0.01);
    refH[0]!.observe(0.01);
    expect(await fast.registry.metrics()).toBe(await ref.registry.metrics());
  });

  it('leave invalid values to prom-client', () => {
    const { fast } = pair([1]);
    const h = bindHistogram(fast.h, { rank: '0', stream: 'true' }, [1]);
    const c = bindCounter(fast.c, { rank: '0' });
    h.observe(0.5);
    c.inc(1);
    expect(() => h.observe(Number.POSITIVE_INFINITY)).toThrow(TypeError);
    expect(() => c.inc(-1)).toThrow('It is not possible to decrease a counter');
  });
});
