// The layout report: colocated against prefill/decode-disaggregated on one workload (run
// --layout pd) or over prefill:decode splits at one GPU count (sweep --layout pd). The same
// object renders as the text table, JSON, CSV, markdown and a self-contained HTML page.
import type { TopLevelSpec } from 'vega-lite';
import type { HitRateTarget, LayoutRow } from '../pd/compare-layouts.ts';
import { ecdfPoints } from './charts.ts';
import { fmtInt, fmtMs, fmtNum, fmtPct, renderTable } from './format.ts';
import { escapeHtml, htmlPage, renderSvg } from './html.ts';

export interface LayoutReport {
  format: 'kvroute-sim-layouts/v1';
  command: 'run' | 'sweep';
  scenario: string;
  scenarioOptions: Record<string, unknown>;
  profile: string;
  seed: string | number;
  link: { gbps: number; setupMs: number };
  prefillPolicy: string;
  decodePolicy: string;
  /** Conditional disaggregation's threshold, when on. */
  localPrefillTokens?: number;
  /** The KV store the prefill ranks share, when there is one. */
  kvStore?: { gbps: number; capacityTokens?: number; decodeOffload: boolean };
  /** The rows, without their TTFT samples. */
  rows: Omit<LayoutRow, 'ttftSamples'>[];
  targets: HitRateTarget[];
  /** sweep: the split that does best on the objective, and colocated's figure beside it. */
  best?: BestSplit;
}

export const LAYOUT_OBJECTIVES = [
  'ttft-p99',
  'ttft-p50',
  'ttft-mean',
  'itl-p99',
  'itl-p50',
  'hit-rate',
  'throughput',
] as const;
export type LayoutObjective = (typeof LAYOUT_OBJECTIVES)[number];

export interface BestSplit {
  objective: LayoutObjective;
  label: string;
  value: number;
  /** The colocated row on as many GPUs, when there is one. */
  colocated?: { label: string; value: number };
}

type Row = Omit<LayoutRow, 'ttftSamples'>;

const METRIC: Record<LayoutObjective, [(r: Row) => number, 'min' | 'max']> = {
  'ttft-p99': [(r) => r.ttftMs.p99, 'min'],
  'ttft-p50': [(r) => r.ttftMs.p50, 'min'],
  'ttft-mean': [(r) => r.ttftMs.mean, 'min'],
  'itl-p99': [(r) => r.itlMs.p99, 'min'],
  'itl-p50': [(r) => r.itlMs.p50, 'min'],
  'hit-rate': [(r) => r.hitRate, 'max'],
  throughput: [(r) => r.throughputTokPerS, 'max'],
};

/**
 * The PD row that does best on `objective` (ties: the first in order, i.e. fewer prefill
 * ranks), with the colocated row of the same GPU count for comparison.
 */
export function bestSplit(rows: readonly Row[], objective: LayoutObjective): BestSplit | undefined {
  const [metric, dir] = METRIC[objective];
  let best: Row | undefined;
  for (const r of rows) {
    if (r.layout !== 'pd') continue;
    if (best === undefined) best = r;
    else if (dir === 'min' ? metric(r) < metric(best) : metric(r) > metric(best)) best = r;
  }
  if (best === undefined) return undefined;
  const colocated = rows.find((r) => r.layout === 'colocated' && r.gpus === best.gpus);
  return {
    objective,
    label: best.label,
    value: metric(best),
    ...(colocated ? { colocated: { label: colocated.label, value: metric(colocated) } } : {}),
  };
}

function fmtObjective(o: LayoutObjective, v: number): string {
  if (o === 'hit-rate') return fmtPct(v);
  if (o === 'throughput') return `${fmtInt(v)} tok/s`;
  return `${fmtMs(v)} ms`;
}

export function bestLine(report: LayoutReport): string[] {
  const b = report.best;
  if (!b) return [];
  const vs = b.colocated
    ? `; ${b.colocated.label}: ${fmtObjective(b.objective, b.colocated.value)}`
    : '';
  return [`best split for ${b.objective}: ${b.label} (${fmtObjective(b.objective, b.value)})${vs}`];
}

export function layoutReport(
  head: Omit<LayoutReport, 'format' | 'rows' | 'targets' | 'best'>,
  rows: readonly LayoutRow[],
  targets: readonly HitRateTarget[],
  objective?: LayoutObjective,
): LayoutReport {
  const plain = rows.map(({ ttftSamples: _s, ...r }) => r);
  const best = objective !== undefined ? bestSplit(plain, objective) : undefined;
  return {
    format: 'kvroute-sim-layouts/v1',
    ...head,
    rows: plain,
    targets: [...targets],
    ...(best ? { best } : {}),
  };
}

const HEADER = [
  'layout',
  'GPUs',
  'policy',
  'hit rate',
  'TTFT p50',
  'TTFT p90',
  'TTFT p99',
  'ITL p50',
  'ITL p99',
  'transfer p50',
  'decode wait p50',
  'req/s',
  'tok/s',
  'out tok/s/GPU',
  'failed',
];

function cells(r: LayoutReport['rows'][number]): string[] {
  return [
    r.label,
    String(r.gpus),
    r.decodePolicy !== undefined ? `${r.policy} / ${r.decodePolicy}` : r.policy,
    fmtPct(r.hitRate),
    fmtMs(r.ttftMs.p50),
    fmtMs(r.ttftMs.p90),
    fmtMs(r.ttftMs.p99),
    fmtMs(r.itlMs.p50),
    fmtMs(r.itlMs.p99),
    r.transferMs ? fmtMs(r.transferMs.p50) : '-',
    r.decodeWaitMs ? fmtMs(r.decodeWaitMs.p50) : '-',
    fmtNum(r.throughputRps),
    fmtInt(r.throughputTokPerS),
    fmtInt(r.outputTokPerSPerGpu),
    String(r.failed),
  ];
}

/** One line per PD split: its prefill hit rate against colocated on as many GPUs. */
export function targetLines(report: LayoutReport): string[] {
  return report.targets.map((t) => {
    const [p, d] = t.split;
    const gap = (t.pdHitRate - t.colocatedHitRate) * 100;
    return `hit-rate target, pd ${p}:${d}: prefill side ${fmtPct(t.pdHitRate)} vs colocated ${report.prefillPolicy} on ${p} ranks ${fmtPct(t.colocatedHitRate)} (${gap >= 0 ? '+' : ''}${gap.toFixed(2)} pt): ${t.met ? 'met' : 'MISSED'}${t.replyShare > 0 ? `; previous replies, cached only where they were generated, are ${fmtPct(t.replyShare)} of input tokens` : ''}`;
  });
}

function meta(report: LayoutReport): string {
  return `scenario ${report.scenario}, profile ${report.profile}, seed ${report.seed}; PD: prefill ${report.prefillPolicy}, decode ${report.decodePolicy}, link ${report.link.gbps} Gb/s + ${report.link.setupMs} ms setup${report.localPrefillTokens !== undefined ? `, local prefill on the decode rank up to ${report.localPrefillTokens} uncached tokens` : ''}${report.kvStore !== undefined ? `, KV store shared by the prefill ranks at ${report.kvStore.gbps} Gb/s${report.kvStore.capacityTokens !== undefined ? ` (${report.kvStore.capacityTokens} tokens)` : ''}${report.kvStore.decodeOffload ? ' with decode offload' : ', prompts only'}` : ''}; colocated rows run the prefill method on every rank. ITL = per-request mean inter-token latency; transfer = link queueing + whole-prompt KV transfer.`;
}

export function renderLayoutTable(report: LayoutReport): string {
  return `${[
    renderTable(HEADER, report.rows.map(cells)),
    '',
    ...bestLine(report),
    ...targetLines(report),
    meta(report),
  ].join('\n')}\n`;
}

export function renderLayoutMarkdown(report: LayoutReport): string {
  const esc = (s: string) => s.replace(/\|/g, '\\|');
  const lines = [
    `# kvroute-sim layouts: ${report.scenario}`,
    '',
    meta(report),
    '',
    `| ${HEADER.join(' | ')} |`,
    `| ${HEADER.map((_, i) => (i === 0 || i === 2 ? '---' : '---:')).join(' | ')} |`,
    ...report.rows.map((r) => `| ${cells(r).map(esc).join(' | ')} |`),
    '',
    ...[...bestLine(report), ...targetLines(report)].map((l) => `- ${l}`),
    '',
  ];
  return lines.join('\n');
}

function round6(_key: string, value: unknown): unknown {
  if (typeof value === 'number' && !Number.isInteger(value) && Number.isFinite(value)) {
    return Math.round(value * 1e6) / 1e6;
  }
  return value;
}

export function layoutToJson(report: LayoutReport): string {
  return `${JSON.stringify(report, round6, 2)}\n`;
}

export function layoutToCsv(report: LayoutReport): string {
  const cols = [
    'layout',
    'label',
    'gpus',
    'prefill_ranks',
    'decode_ranks',
    'policy',
    'decode_policy',
    'requests',
    'failed',
    'hit_rate',
    'ttft_p50_ms',
    'ttft_p90_ms',
    'ttft_p99_ms',
    'itl_p50_ms',
    'itl_p99_ms',
    'transfer_p50_ms',
    'decode_wait_p50_ms',
    'throughput_rps',
    'throughput_tok_per_s',
    'output_tok_per_s_per_gpu',
  ];
  const n = (v: number | undefined) => (v === undefined ? '' : String(round6('', v)));
  const lines = report.rows.map((r) =>
    [
      r.layout,
      r.label,
      r.gpus,
      r.prefillRanks,
      r.decodeRanks,
      r.policy,
      r.decodePolicy ?? '',
      r.requests,
      r.failed,
      n(r.hitRate),
      n(r.ttftMs.p50),
      n(r.ttftMs.p90),
      n(r.ttftMs.p99),
      n(r.itlMs.p50),
      n(r.itlMs.p99),
      n(r.transferMs?.p50),
      n(r.decodeWaitMs?.p50),
      n(r.throughputRps),
      n(r.throughputTokPerS),
      n(r.outputTokPerSPerGpu),
    ].join(','),
  );
  return `${[cols.join(','), ...lines].join('\n')}\n`;
}

const WIDTH = 560;

function ttftCdf(rows: readonly LayoutRow[]): TopLevelSpec {
  const labels = rows.map((r) => r.label);
  const values = rows.flatMap((r) =>
    ecdfPoints(r.ttftSamples).map((p) => ({ layout: r.label, ttftMs: p.x, fraction: p.y })),
  );
  const xs = values.map((v) => v.ttftMs).filter((x) => x > 0);
  const lo = xs.length > 0 ? Math.min(...xs) : 1;
  const hi = xs.length > 0 ? Math.max(...xs) : 1;
  const log = hi / lo > 20;
  return {
    title: 'TTFT distribution per layout',
    width: WIDTH,
    height: 260,
    data: { values },
    mark: { type: 'line', interpolate: 'step-after' },
    encoding: {
      x: {
        field: 'ttftMs',
        type: 'quantitative',
        title: 'TTFT (ms)',
        scale: log ? { type: 'log', domain: [lo, hi] } : { domain: [0, hi] },
      },
      y: { field: 'fraction', type: 'quantitative', title: 'fraction of requests' },
      color: {
        field: 'layout',
        type: 'nominal',
        scale: { domain: labels },
        legend: { orient: 'bottom', columns: 1 },
      },
      strokeDash: { field: 'layout', type: 'nominal', scale: { domain: labels } },
    },
  } as TopLevelSpec;
}

/** Grouped bars of one family of figures (TTFT or ITL percentiles, throughput) per layout. */
function bars(
  title: string,
  rows: readonly LayoutRow[],
  series: readonly [string, (r: LayoutRow) => number][],
  axis: string,
): TopLevelSpec {
  const labels = rows.map((r) => r.label);
  const names = series.map(([n]) => n);
  const values = rows.flatMap((r) =>
    series.map(([name, f]) => ({ layout: r.label, name, value: f(r) })),
  );
  return {
    title,
    width: WIDTH,
    height: Math.max(80, 18 * values.length),
    data: { values },
    encoding: {
      y: { field: 'layout', type: 'nominal', sort: labels, title: null },
      yOffset: { field: 'name', type: 'nominal', sort: names },
      x: { field: 'value', type: 'quantitative', title: axis },
    },
    layer: [
      {
        mark: 'bar',
        encoding: {
          color: {
            field: 'name',
            type: 'nominal',
            scale: { domain: names },
            legend: { orient: 'bottom', title: null },
          },
        },
      },
      {
        mark: { type: 'text', align: 'left', dx: 3, fontSize: 10 },
        encoding: { text: { field: 'value', type: 'quantitative', format: ',.1f' } },
      },
    ],
  } as TopLevelSpec;
}

async function chart(spec: TopLevelSpec): Promise<string> {
  return `<div class="chart">${await renderSvg(spec)}</div>`;
}

export async function renderLayoutHtml(
  report: LayoutReport,
  rows: readonly LayoutRow[],
): Promise<string> {
  const title = `kvroute-sim layouts: ${report.scenario}`;
  const th = HEADER.map((h) => `<th>${escapeHtml(h)}</th>`).join('');
  const trs = report.rows
    .map(
      (r) =>
        `<tr${r.layout === 'pd' ? ' class="pd"' : ''}>${cells(r)
          .map((c) => `<td>${escapeHtml(c)}</td>`)
          .join('')}</tr>`,
    )
    .join('\n');
  const targets = [...bestLine(report), ...targetLines(report)]
    .map((l) => `<li>${escapeHtml(l)}</li>`)
    .join('\n');
  const body = [
    `<h1>${escapeHtml(title)}</h1>`,
    `<p class="meta">${escapeHtml(meta(report))} Times in ms of simulated time.</p>`,
    `<div class="wide"><table>\n<thead><tr>${th}</tr></thead>\n<tbody>\n${trs}\n</tbody>\n</table></div>`,
    ...(targets ? [`<ul>${targets}</ul>`] : []),
    '<h2>Time to first token</h2>',
    await chart(ttftCdf(rows)),
    await chart(
      bars(
        'TTFT per layout',
        rows,
        [
          ['p50', (r) => r.ttftMs.p50],
          ['p90', (r) => r.ttftMs.p90],
          ['p99', (r) => r.ttftMs.p99],
        ],
        'ms',
      ),
    ),
    '<h2>Inter-token latency</h2>',
    await chart(
      bars(
        'Per-request mean inter-token latency',
        rows,
        [
          ['p50', (r) => r.itlMs.p50],
          ['p99', (r) => r.itlMs.p99],
        ],
        'ms',
      ),
    ),
    '<h2>Throughput</h2>',
    await chart(
      bars(
        'Output tokens per second per GPU',
        rows,
        [['out tok/s/GPU', (r) => r.outputTokPerSPerGpu]],
        'tokens/s',
      ),
    ),
  ].join('\n');
  // The base page style, wider and with headers that wrap, so every column fits.
  const style = `
body { max-width: 1400px; }
th { white-space: normal; vertical-align: bottom; }
tr.pd { background: #f3f7fd; }
.wide { overflow-x: auto; }
`;
  return htmlPage(title, body, style);
}
