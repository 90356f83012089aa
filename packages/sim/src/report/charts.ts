// Vega-lite specs for the HTML report. Data is inlined (`data.values`) so rendering
// never touches a loader or the network. Every spec keeps the policies in the order the
// user gave them, so colours match across charts.
import type { TopLevelSpec } from 'vega-lite';
import { isBestCell } from './sweep-choice.ts';
import { policyLabel } from './table.ts';
import type { PolicyReport, PolicySamples, RunMarker, SweepReport } from './types.ts';

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
  // the distribution collapses against zero, so wide ranges get a log axis. The axis spans
  // the data (a fixed range left most of the width empty and squeezed the tail).
  const xs = values.map((v) => v.ttftMs).filter((x) => x > 0);
  const lo = xs.length > 0 ? Math.min(...xs) : 1;
  const hi = xs.length > 0 ? Math.max(...xs) : 1;
  const log = xs.length > 0 && hi / lo > 20;
  const x = log
    ? {
        field: 'ttftMs',
        type: 'quantitative',
        title: 'TTFT (ms, log scale)',
        scale: { type: 'log', domain: [lo, hi], nice: false },
      }
    : {
        field: 'ttftMs',
        type: 'quantitative',
        title: 'TTFT (ms)',
        scale: { domain: [Math.min(0, lo), hi], nice: false },
      };
  // p50 and p99 of each policy (the table's figures) as marks on the curve.
  const marks = policies.flatMap((p, i) =>
    (
      [
        ['p50', p.ttftMs.p50, 0.5],
        ['p99', p.ttftMs.p99, 0.99],
      ] as const
    )
      .filter(([, v]) => Number.isFinite(v) && v > 0)
      .map(([stat, v, f]) => ({ policy: labels[i], stat, ttftMs: v, fraction: f })),
  );
  const lineColor = {
    ...policyColor(labels),
    legend: { ...policyColor(labels).legend, symbolType: 'stroke' },
  } as const;
  return {
    title: 'TTFT distribution per policy (cumulative share of requests; dots: p50 and p99)',
    width: WIDTH,
    height: 260,
    layer: [
      {
        data: { values },
        mark: { type: 'line', interpolate: 'step-after', strokeWidth: 2 },
        encoding: {
          x,
          y: {
            field: 'fraction',
            type: 'quantitative',
            title: 'share of requests',
            axis: { format: '%' },
          },
          ...policyLines(labels),
          color: lineColor,
        },
      },
      {
        data: { values: marks },
        mark: { type: 'point', filled: true, size: 70 },
        encoding: {
          x,
          y: { field: 'fraction', type: 'quantitative' },
          // The lines' colour and legend: layers sharing a scale must agree on its legend (a
          // layer without one made Vega-Lite warn on every report). Its symbol stays the
          // lines' dash.
          color: lineColor,
          shape: {
            field: 'stat',
            type: 'nominal',
            title: 'percentile',
            legend: { orient: 'bottom' },
          },
        },
      },
    ],
  } as TopLevelSpec;
}

/** Above this many requests per policy the per-request chart is unreadable: bin by time. */
export const MAX_TIMELINE_REQUESTS = 1000;
const TIME_BINS = 60;

function nearestRank(sorted: readonly number[], q: number): number {
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil(q * sorted.length) - 1))]!;
}

/**
 * TTFT over the run. Up to MAX_TIMELINE_REQUESTS requests: each request in arrival order
 * (shows when a policy pays cold prefills). Beyond, with arrival times: p50 and p99 of the
 * requests arriving in each of 60 time bins, with the cluster's events (a rank down, a
 * scale-out, a policy switch) as labelled rules. Null when there is nothing to draw.
 */
export function ttftTimelineSpec(
  policies: readonly PolicyReport[],
  samples: readonly PolicySamples[],
  markers: readonly RunMarker[] = [],
): TopLevelSpec | null {
  const series = samples.map((s) => s.ttftByArrivalMs ?? []);
  const longest = Math.max(0, ...series.map((s) => s.length));
  if (longest === 0) return null;
  const labels = policies.map(policyLabel);
  if (longest <= MAX_TIMELINE_REQUESTS) {
    const values = series.flatMap((ttfts, i) =>
      ttfts.map((ttftMs, k) => ({
        policy: labels[i] ?? samples[i]?.policy,
        request: k + 1,
        ttftMs,
      })),
    );
    const line = {
      data: { values },
      mark: { type: 'line', point: true, strokeWidth: 1.5 },
      encoding: {
        x: { field: 'request', type: 'quantitative', title: 'request (arrival order)' },
        y: { field: 'ttftMs', type: 'quantitative', title: 'TTFT (ms)' },
        ...policyLines(labels),
      },
    };
    // Events sit before the first request that arrived at or after them.
    const arrivals = samples.find((s) => (s.arrivalMs?.length ?? 0) > 0)?.arrivalMs ?? [];
    const at = (ms: number): number => arrivals.filter((a) => a < ms).length + 0.5;
    const layers = arrivals.length > 0 ? markerLayers(markers, 'request', at, longest) : [];
    return {
      title: 'TTFT of each request, in arrival order',
      width: WIDTH,
      height: 240,
      ...(layers.length > 0 ? { layer: [line, ...layers] } : line),
    } as TopLevelSpec;
  }
  if (samples.some((s) => (s.arrivalMs?.length ?? 0) !== (s.ttftByArrivalMs?.length ?? 0))) {
    return null;
  }
  const end = Math.max(
    1,
    ...samples.flatMap((s) => s.arrivalMs ?? []),
    ...markers.map((m) => m.atMs),
  );
  const width = end / TIME_BINS;
  const values: { policy: string; stat: string; timeS: number; ttftMs: number }[] = [];
  samples.forEach((s, i) => {
    const bins: number[][] = Array.from({ length: TIME_BINS }, () => []);
    const arrivals = s.arrivalMs ?? [];
    (s.ttftByArrivalMs ?? []).forEach((t, k) => {
      if (Number.isFinite(t))
        bins[Math.min(TIME_BINS - 1, Math.floor(arrivals[k]! / width))]!.push(t);
    });
    bins.forEach((b, j) => {
      if (b.length === 0) return;
      b.sort((x, y) => x - y);
      const timeS = ((j + 0.5) * width) / 1000;
      const policy = labels[i] ?? s.policy;
      values.push({ policy, stat: 'p99', timeS, ttftMs: nearestRank(b, 0.99) });
      values.push({ policy, stat: 'p50', timeS, ttftMs: nearestRank(b, 0.5) });
    });
  });
  return {
    title: `TTFT over time: p50 and p99 of the requests arriving in each ${(width / 1000).toFixed(width < 10_000 ? 1 : 0)} s`,
    width: WIDTH,
    height: 260,
    layer: [
      {
        data: { values },
        mark: { type: 'line', strokeWidth: 1.5, point: { size: 12 } },
        encoding: {
          x: {
            field: 'timeS',
            type: 'quantitative',
            title: 'arrival time (s)',
            scale: { domain: [0, end / 1000], nice: false },
          },
          y: {
            field: 'ttftMs',
            type: 'quantitative',
            title: 'TTFT (ms, log scale)',
            scale: { type: 'log' },
          },
          color: policyColor(labels),
          strokeDash: {
            field: 'stat',
            type: 'nominal',
            title: 'percentile',
            scale: { domain: ['p50', 'p99'] },
            // Drawn as line strokes: the lines' point marks would make both entries one dot.
            legend: {
              orient: 'bottom',
              symbolType: 'stroke',
              symbolStrokeWidth: 2,
              symbolSize: 300,
              // Both set, or vega-lite gives the symbol the filled points' fill and no stroke.
              symbolStrokeColor: '#444',
              symbolFillColor: 'transparent',
            },
          },
          detail: { field: 'stat', type: 'nominal' },
        },
      },
      ...markerLayers(markers, 'timeS', (ms) => ms / 1000, end / 1000),
    ],
  } as TopLevelSpec;
}

/** Marker colours: the cluster's events red, policy switches blue (dashed). */
const MARKER_STYLE = {
  cluster: { color: '#c00', strokeDash: [] as number[], y: 6 },
  policy: { color: '#1f5fbf', strokeDash: [5, 3], y: 20 },
} as const;

/**
 * Labelled vertical rules for the run's events, at x = place(atMs) on the `field` axis (whose
 * right end is xMax): a label in the right 40% of the chart runs leftwards, so it stays inside.
 */
function markerLayers(
  markers: readonly RunMarker[],
  field: string,
  place: (atMs: number) => number,
  xMax: number,
): object[] {
  const out: object[] = [];
  for (const kind of ['cluster', 'policy'] as const) {
    const values = markers
      .filter((m) => (m.kind ?? 'cluster') === kind)
      .map((m) => ({ [field]: place(m.atMs), label: m.label }));
    if (values.length === 0) continue;
    const style = MARKER_STYLE[kind];
    out.push({
      data: { values },
      mark: { type: 'rule', color: style.color, strokeWidth: 1.5, strokeDash: style.strokeDash },
      encoding: { x: { field, type: 'quantitative' } },
    });
    for (const right of [false, true]) {
      const side = values.filter((v) => Number(v[field]) > 0.6 * xMax === right);
      if (side.length === 0) continue;
      out.push({
        data: { values: side },
        mark: {
          type: 'text',
          color: style.color,
          align: right ? 'right' : 'left',
          dx: right ? -3 : 3,
          y: style.y,
          fontSize: 11,
        },
        encoding: {
          x: { field, type: 'quantitative' },
          text: { field: 'label', type: 'nominal' },
        },
      });
    }
  }
  return out;
}

/**
 * Vertical pixel offsets for the trade-off chart's labels: a label that would overlap one
 * already placed (within a label's width across, a line's height up or down, on the chart's
 * 0-100% by 0-max scales) goes one line below it.
 */
function labelOffsets(values: readonly { hitRate: number; p99: number }[]): number[] {
  const maxY = Math.max(1, ...values.map((v) => v.p99));
  const px = (v: { hitRate: number; p99: number }) => ({
    x: v.hitRate * WIDTH,
    y: (1 - v.p99 / maxY) * TRADE_OFF_HEIGHT,
  });
  const placed: { x: number; y: number }[] = [];
  return values.map((v) => {
    const at = px(v);
    let dy = 0;
    while (placed.some((p) => Math.abs(p.x - at.x) < 90 && Math.abs(p.y - (at.y + dy)) < 12)) {
      dy += 13;
    }
    placed.push({ x: at.x, y: at.y + dy });
    return dy;
  });
}

const TRADE_OFF_HEIGHT = 240;

/**
 * The trade-off each policy makes: token hit rate against TTFT p99, with the hit rate one
 * cache of all ranks' capacity would reach (no routing can pass it) as a rule.
 */
export function tradeOffSpec(
  policies: readonly PolicyReport[],
  boundHitRate?: number,
): TopLevelSpec {
  const labels = policies.map(policyLabel);
  const values = policies.map((p, i) => ({
    policy: labels[i],
    hitRate: p.hitRate,
    p99: p.ttftMs.p99,
  }));
  const x = {
    field: 'hitRate',
    type: 'quantitative',
    title: 'token hit rate',
    axis: { format: '%' },
    scale: { domain: [0, 1] },
  };
  return {
    title: `Hit rate vs TTFT p99 per policy${boundHitRate !== undefined ? ' (red: the one-big-cache bound)' : ''}`,
    width: WIDTH,
    height: TRADE_OFF_HEIGHT,
    layer: [
      {
        data: { values },
        mark: { type: 'point', filled: true, size: 110 },
        encoding: {
          x,
          y: { field: 'p99', type: 'quantitative', title: 'TTFT p99 (ms)', scale: { zero: true } },
          color: policyColor(labels),
        },
      },
      // One label layer per point, each moved down below the labels it would overprint
      // (policies with about the same hit rate and p99 sit on one spot).
      ...labelOffsets(values).map((dy, i) => ({
        data: { values: [values[i]] },
        mark: { type: 'text', align: 'left', dx: 8, dy, fontSize: 11 },
        encoding: {
          x,
          y: { field: 'p99', type: 'quantitative' },
          text: { field: 'policy', type: 'nominal' },
        },
      })),
      ...(boundHitRate !== undefined
        ? [
            {
              data: {
                values: [
                  { hitRate: boundHitRate, label: `bound ${(boundHitRate * 100).toFixed(1)}%` },
                ],
              },
              mark: { type: 'rule', color: '#c00', strokeDash: [4, 3], strokeWidth: 2 },
              encoding: { x },
            },
            {
              data: {
                values: [
                  { hitRate: boundHitRate, label: `bound ${(boundHitRate * 100).toFixed(1)}%` },
                ],
              },
              mark: { type: 'text', color: '#c00', align: 'right', dx: -4, y: 8, fontSize: 11 },
              encoding: { x, text: { field: 'label', type: 'nominal' } },
            },
          ]
        : []),
    ],
  } as TopLevelSpec;
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

/**
 * The options of `method` that vary among its cells, in axis order: a heatmap draws one or
 * two of them (more than two would need a chart per fixed value of the rest).
 */
export function varyingOptions(report: SweepReport, method: string): string[] {
  const cells = report.grid.filter((c) => c.method === method);
  const out: string[] = [];
  for (const a of report.axes) {
    if (!a.methods.includes(method) || out.includes(a.option)) continue;
    if (new Set(cells.map((c) => c.options[a.option])).size > 1) out.push(a.option);
  }
  return out;
}

/**
 * A heatmap of one method's cells over its one or two varying options (one row when one),
 * the best cell outlined; null when the method varies no option or more than two.
 */
export function sweepHeatmapSpec(
  report: SweepReport,
  metric: SweepMetric,
  method: string = report.policies[0] ?? report.policy,
): TopLevelSpec | null {
  const varying = varyingOptions(report, method);
  if (varying.length === 0 || varying.length > 2) return null;
  const [xo, yo] = varying as [string, string | undefined];
  const cells = report.grid.filter((c) => c.method === method);
  const values = cells.map((c) => ({
    x: c.options[xo],
    y: yo === undefined ? method : c.options[yo],
    value:
      metric === 'hitRate'
        ? c.result.hitRate
        : metric === 'ttftP99'
          ? c.result.ttftMs.p99
          : c.result.ttftMs.mean,
    best: isBestCell(report, c),
  }));
  // Option values are numbers or words; vega-lite sorts either.
  const xs = [...new Set(values.map((v) => v.x))] as string[];
  const ys = [...new Set(values.map((v) => v.y))] as string[];
  const title = (o: string) => (/window|length|tokens/i.test(o) ? `${o} (tokens)` : o);
  const higherIsBetter = metric === 'hitRate';
  // Anchored: hit rate on 0-100%, times from 0 ms, so a 1.5-point spread reads as the small
  // difference it is instead of spanning the whole colour range.
  const domain: [number, number] = higherIsBetter
    ? [0, 1]
    : [0, Math.max(1, ...values.map((v) => v.value))];
  return {
    title: `${method} sweep: ${METRIC_TITLES[metric]}${higherIsBetter ? ' (higher is better)' : ' (lower is better)'}`,
    width: Math.max(160, 70 * xs.length),
    height: Math.max(yo === undefined ? 40 : 120, 40 * ys.length),
    data: { values },
    encoding: {
      x: { field: 'x', type: 'ordinal', sort: xs, title: title(xo), axis: { labelAngle: 0 } },
      y: {
        field: 'y',
        type: 'ordinal',
        sort: [...ys].reverse(),
        title: yo === undefined ? '' : title(yo),
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
            scale: { scheme: higherIsBetter ? 'greens' : 'oranges', domain },
            // The legend in the cells' own units.
            legend: { format: higherIsBetter ? '%' : ',.0f' },
          },
          stroke: { condition: { test: 'datum.best', value: 'black' }, value: null },
          strokeWidth: { condition: { test: 'datum.best', value: 3 }, value: 0 },
        },
      },
      {
        mark: { type: 'text', fontSize: 11 },
        encoding: {
          text: { field: 'value', type: 'quantitative', format: higherIsBetter ? '.1%' : '.0f' },
          // Dark cells get white text: black on the scheme's darkest third is hard to read.
          color: {
            condition: {
              test: `datum.value > ${(domain[1] * 0.6).toPrecision(6)}`,
              value: 'white',
            },
            value: 'black',
          },
        },
      },
    ],
  };
}
