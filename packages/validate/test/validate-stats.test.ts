import { describe, expect, it } from 'vitest';
import { formatError, formatValue, renderComparison } from '../src/render.ts';
import {
  compareSummaries,
  distribution,
  percentile,
  rankAgreement,
  relativeError,
  summarize,
} from '../src/stats.ts';
import type { OutcomeRecord } from '../src/types.ts';

const rec = (id: number, o: Partial<OutcomeRecord>): OutcomeRecord => ({
  id,
  ok: true,
  startMs: 0,
  endMs: 100,
  promptTokens: 100,
  cachedTokens: 0,
  ttftMs: 10,
  ...o,
});

describe('percentile', () => {
  it('interpolates between closest ranks like numpy', () => {
    const v = [4, 1, 3, 2, 5];
    expect(percentile(v, 50)).toBe(3);
    expect(percentile(v, 0)).toBe(1);
    expect(percentile(v, 100)).toBe(5);
    expect(percentile(v, 90)).toBeCloseTo(4.6, 10);
    expect(percentile([1, 2, 3, 4], 50)).toBe(2.5);
    expect(percentile([], 50)).toBeNaN();
  });
  it('distribution gives p50/p90/p99/mean', () => {
    const v = Array.from({ length: 101 }, (_, i) => i);
    expect(distribution(v)).toEqual({ p50: 50, p90: 90, p99: 99, mean: 50 });
  });
});

describe('summarize', () => {
  it('hit rate is cached over prompt tokens of successful requests; throughput over the span', () => {
    const s = summarize([
      rec(1, { startMs: 0, endMs: 1000, promptTokens: 100, cachedTokens: 0, ttftMs: 500 }),
      rec(2, { startMs: 1000, endMs: 2000, promptTokens: 100, cachedTokens: 90, ttftMs: 100 }),
      rec(3, { startMs: 2000, endMs: 4000, promptTokens: 200, cachedTokens: 150, ttftMs: 300 }),
      rec(4, {
        ok: false,
        startMs: 3000,
        endMs: 3500,
        promptTokens: 1000,
        cachedTokens: 1000,
        ttftMs: undefined,
      }),
    ]);
    expect(s.requests).toBe(4);
    expect(s.ok).toBe(3);
    expect(s.errors).toBe(1);
    expect(s.hitRate).toBeCloseTo(240 / 400, 12);
    expect(s.ttftMs.p50).toBe(300);
    expect(s.ttftMs.mean).toBe(300);
    expect(s.durationS).toBe(4);
    expect(s.throughputRps).toBe(0.75);
  });
  it('caps cached at prompt tokens and survives an empty run', () => {
    expect(summarize([rec(1, { promptTokens: 10, cachedTokens: 20 })]).hitRate).toBe(1);
    const empty = summarize([]);
    expect(empty).toMatchObject({ requests: 0, ok: 0, hitRate: 0, throughputRps: 0 });
    expect(empty.ttftMs.p50).toBeNaN();
  });
});

describe('comparison', () => {
  it('relative error is against the observed value', () => {
    expect(relativeError(110, 100)).toBeCloseTo(0.1, 12);
    expect(relativeError(90, 100)).toBeCloseTo(-0.1, 12);
    expect(relativeError(0, 0)).toBe(0);
    expect(relativeError(1, 0)).toBeNaN();
  });
  it('rows carry predicted, observed and both errors; hit rate error in points', () => {
    const p = summarize([rec(1, { cachedTokens: 62, ttftMs: 1300 })]);
    const o = summarize([rec(1, { cachedTokens: 60, ttftMs: 1250 })]);
    const rows = compareSummaries(p, o);
    const hit = rows.find((r) => r.key === 'hitRate')!;
    expect(hit.absError).toBeCloseTo(2, 10);
    expect(hit.relError).toBeCloseTo(2 / 60, 10);
    const p50 = rows.find((r) => r.key === 'ttftP50')!;
    expect(p50).toMatchObject({ predicted: 1300, observed: 1250, unit: 'ms' });
    expect(p50.relError).toBeCloseTo(0.04, 10);
    expect(rows.map((r) => r.key)).toEqual([
      'hitRate',
      'ttftP50',
      'ttftP90',
      'ttftP99',
      'ttftMean',
      'e2eP50',
      'throughput',
      'errors',
    ]);
  });
  it('rank agreement counts only requests whose rank the target reported', () => {
    const pred = [rec(1, { rank: 0 }), rec(2, { rank: 1 }), rec(3, { rank: 2 })];
    const obs = [rec(1, { rank: 0 }), rec(2, { rank: 3 }), rec(3, {})];
    expect(rankAgreement(pred, obs)).toEqual({ compared: 2, same: 1 });
  });
});

describe('rendering', () => {
  it('formats values by unit', () => {
    expect(formatValue(0.6234, 'ratio')).toBe('62.3%');
    expect(formatValue(1290.4, 'ms')).toBe('1290 ms');
    expect(formatValue(3.456, 'ms')).toBe('3.46 ms');
    expect(formatValue(0.41, 'rps')).toBe('0.410 req/s');
    expect(formatValue(Number.NaN, 'ms')).toBe('-');
  });
  it('prints the side-by-side table with errors', () => {
    const p = summarize([rec(1, { cachedTokens: 62, ttftMs: 1300 })]);
    const o = summarize([rec(1, { cachedTokens: 60, ttftMs: 1250 })]);
    const rows = compareSummaries(p, o);
    const text = renderComparison(rows, 'prefix_match');
    const lines = text.split('\n');
    expect(lines[0]).toMatch(/^metric\s+predicted \(prefix_match\)\s+observed\s+error$/);
    expect(lines[1]).toMatch(/^-+( +-+){3}$/);
    expect(text).toMatch(/hit rate\s+62\.0%\s+60\.0%\s+\+2\.0 pt \(\+3\.3%\)/);
    expect(text).toMatch(/TTFT p50\s+1300 ms\s+1250 ms\s+\+4\.0%/);
    expect(text).toMatch(/errors\s+0\s+0\s+0/);
    expect(formatError({ ...rows[0]!, relError: Number.NaN })).toBe('+2.0 pt (-)');
  });
});
