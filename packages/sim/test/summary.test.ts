// Latency statistics of a run: sorted as a typed array (no boxed copy at the end of a long
// run), with the same values as numpy's linear-interpolation percentiles.
import { describe, expect, it } from 'vitest';
import { latencyStats, percentile, round3 } from '../src/metrics/summary.ts';

describe('latencyStats', () => {
  it('gives numpy-style percentiles and the mean, leaving its input as it was', () => {
    const values = [5, 1, 4, 2, 3, 0.5, 10];
    const copy = [...values];
    const sorted = [...values].sort((a, b) => a - b);
    const mean = sorted.reduce((a, b) => a + b, 0) / sorted.length;
    expect(latencyStats(values)).toEqual({
      p50: 3,
      p90: round3(5 + (10 - 5) * 0.4),
      p99: round3(5 + (10 - 5) * 0.94),
      mean: round3(mean),
    });
    expect(values).toEqual(copy);
    expect(percentile([], 0.5)).toBe(0);
    expect(latencyStats([])).toEqual({ p50: 0, p90: 0, p99: 0, mean: 0 });
  });
});
