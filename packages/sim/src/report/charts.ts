// Vega-lite specs for the HTML report. Data is inlined (`data.values`) so rendering
// never touches a loader or the network. Every spec keeps the policies in the order the
// user gave them, so colours match across charts.
import type { TopLevelSpec } from 'vega-lite';
import { isBestCell } from './sweep-choice.ts';
import { policyLabel } from './table.ts';
import type { PolicyReport, PolicySamples, SweepReport } from './types.ts';

const WIDTH = 560;

/** One colour per policy, in the user's order, with the legend under the chart. */
function policyColor(labels: string[]) {
  return {
    field: 'policy',
    type: 'nominal',
    scale: { domain: labels },
    legend: { orient: 'bottom', columns: 1 },
  } as const;
}

/**
 * Colour and dash per policy for line charts: policies that behave alike draw the same
 * curve, and the dashes keep each one visible.
 */
function policyLines(labels: string[]) {
  return {
    color: policyColor(labels),
    strokeDash: { field: 'policy', type: 'nominal', scale: { domain: labels } },
  } as const;
}

/** At most `maxPoints` (value, fraction <= value) pairs of the empirical CDF, keeping the extremes. */
export function ecdfPoints(values: readonly number[], maxPoints = 200): { x: number; y: number }[] {
  const sorted = [...values].filter(Number.isFinite).sort((a, b) => a - b);
  const n = sorted.length;
  if (n === 0) return [];
  const step = Math.max(1, Math.ceil(n / maxPoints));
  const out: { x: number; y: number }[] = [];
  for (let i = 0; i < n; i += step) out.push({ x: sorted[i]!, y: (i + 1) / n });
  if ((n - 1) % step !== 0) out.push({ x: sorted[n - 1]!, y: 1 });
  return out;
}

export function ttftCdfSpec(
  policies: readonly PolicyReport[],
  samples: readonly PolicySamples[],
): TopLevelSpec {
  const labels = policies.map(policyLabel);
  const values = samples.flatMap((s, i) =>
    ecdfPoints(s.ttftMs).map((p) => ({
      policy: labels[i] ?? s.policy,
      ttftMs: p.x,
      fraction: p.y,
    })),
  );
  // Real traffic has TTFTs from tens of ms to tens of seconds; on a linear axis the body of
  // the distribution collapses against zero, so wide ranges get a log axis.
  const xs = values.map((v) => v.ttftMs).filter((x) => x > 0);
  const log = xs.length > 0 && Math.max(...xs) / Math.min(...xs) > 20;
  return {
    title: 'TTFT distribution per policy (cumulative share of requests)',
    width: WIDTH,
    height: 260,
    data: { values },
    mark: { type: 'line', interpolate: 'step-after', strokeWidth: 2 },
    encoding: {
      x: log
        ? {
            field: 'ttftMs',
            type: 'quantitative',
            title: 'TTFT (ms, log scale)',
            scale: { type: 'log' },
          }
        : { field: 'ttftMs', type: 'quantitative', title: 'TTFT (ms)' },
      y: {
        field: 'fraction',
        type: 'quantitative',
        title: 'share of requests',
        axis: { format: '%' },
      },
      ...policyLines(labels),
    },
  };
}

/** Above this many requests per policy the per-request chart is unreadable (and the SVG huge). */
export const MAX_TIMELINE_REQUESTS = 1000;

/**
 * Each request's TTFT in arrival order: shows when a policy pays cold prefills (under
 * round_robin on N ranks, a shared prefix is found again only once every N requests).
 * Null when there is nothing to draw or too many requests to draw.
 */
export function ttftTimelineSpec(
  policies: readonly PolicyReport[],
  samples: readonly PolicySamples[],
): TopLevelSpec | null {
  const series = samples.map((s) => s.ttftByArrivalMs ?? []);
  const longest = Math.max(0, ...series.map((s) => s.length));
  if (longest === 0 || longest > MAX_TIMELINE_REQUESTS) return null;
  const labels = policies.map(policyLabel);
  const values = series.flatMap((ttfts, i) =>
    ttfts.map((ttftMs, k) => ({ policy: labels[i] ?? samples[i]?.policy, request: k + 1, ttftMs })),
  );
  return {
    title: 'TTFT of each request, in arrival order',
    width: WIDTH,
    height: 240,
    data: { values },
    mark: { type: 'line', point: true, strokeWidth: 1.5 },
    encoding: {
      x: { field: 'request', type: 'quantitative', title: 'request (arrival order)' },
      y: { field: 'ttftMs', type: 'quantitative', title: 'TTFT (ms)' },
      ...policyLines(labels),
    },
  };
}

export function hitRateSpec(policies: readonly PolicyReport[]): TopLevelSpec {
  const labels = policies.map(policyLabel);
  const values = policies.map((p, i) => ({ policy: labels[i], hitRate: p.hitRate }));
  return {
    title: 'Token hit rate per policy',
    width: WIDTH,
    height: Math.max(60, 28 * values.length),
    data: { values },
    encoding: {
      y: { field: 'policy', type: 'nominal', sort: labels, title: null },
      x: {
        field: 'hitRate',
        type: 'quantitative',
        title: 'cached input tokens / input tokens',
        axis: { format: '%' },
        scale: { domain: [0, 1] },
      },
    },
    layer: [
      {
        mark: 'bar',
        encoding: {
          color: { field: 'policy', type: 'nominal', scale: { domain: labels }, legend: null },
        },
      },
      {
        mark: { type: 'text', align: 'left', dx: 4 },
        encoding: { text: { field: 'hitRate', type: 'quantitative', format: '.1%' } },
      },
    ],
  };
}

export function rankLoadSpec(policies: readonly PolicyReport[]): TopLevelSpec {
  const labels = policies.map(policyLabel);
  const values = policies.flatMap((p, i) =>
    p.perRank.map((r) => ({
      policy: labels[i],
      rank: r.rank,
      prefillTokens: r.prefillTokens,
      requests: r.requests,
    })),
  );
  return {
    title: 'Per-rank load: tokens each rank had to prefill (uncached work)',
    width: WIDTH,
    height: 240,
    data: { values },
    mark: 'bar',
    encoding: {
      x: { field: 'rank', type: 'ordinal', title: 'rank', axis: { labelAngle: 0 } },
      xOffset: { field: 'policy', type: 'nominal', sort: labels },
      y: { field: 'prefillTokens', type: 'quantitative', title: 'prefilled tokens' },
      color: policyColor(labels),
    },
  };
}

export type SweepMetric = 'ttftP99' | 'ttftMean' | 'hitRate';

const METRIC_TITLES: Record<SweepMetric, string> = {
  ttftP99: 'TTFT p99 (ms)',
  ttftMean: 'TTFT mean (ms)',
  hitRate: 'token hit rate',
};

export function sweepHeatmapSpec(report: SweepReport, metric: SweepMetric): TopLevelSpec {
  const values = report.grid.map((c) => ({
    window: c.window,
    prefixLength: c.prefixLength,
    value:
      metric === 'hitRate'
        ? c.result.hitRate
        : metric === 'ttftP99'
          ? c.result.ttftMs.p99
          : c.result.ttftMs.mean,
    best: isBestCell(report, c),
  }));
  const higherIsBetter = metric === 'hitRate';
  return {
    title: `${report.policy} sweep: ${METRIC_TITLES[metric]}${higherIsBetter ? ' (higher is better)' : ' (lower is better)'}`,
    width: Math.max(160, 70 * report.windows.length),
    height: Math.max(120, 40 * report.prefixLengths.length),
    data: { values },
    encoding: {
      x: {
        field: 'window',
        type: 'ordinal',
        sort: report.windows,
        title: 'window (tokens)',
        axis: { labelAngle: 0 },
      },
      y: {
        field: 'prefixLength',
        type: 'ordinal',
        sort: [...report.prefixLengths].reverse(),
        title: 'prefix length (tokens)',
      },
    },
    layer: [
      {
        mark: { type: 'rect' },
        encoding: {
          color: {
            field: 'value',
            type: 'quantitative',
            title: METRIC_TITLES[metric],
            scale: { scheme: higherIsBetter ? 'greens' : 'oranges', reverse: false },
          },
          stroke: { condition: { test: 'datum.best', value: 'black' }, value: null },
          strokeWidth: { condition: { test: 'datum.best', value: 3 }, value: 0 },
        },
      },
      {
        mark: { type: 'text', fontSize: 11 },
        encoding: {
          text: { field: 'value', type: 'quantitative', format: higherIsBetter ? '.1%' : '.0f' },
          color: { value: 'black' },
        },
      },
    ],
  };
}
