// Plain-text comparison tables for the terminal, and the columns the HTML report shares with
// them (runColumns, sweepColumns).

import { optionFlag } from '@kvroute/policy';
import type { RouterModel } from '../compare.ts';
import { fmtInt, fmtMs, fmtNum, fmtPct, renderTable } from './format.ts';
import { isBestCell, settingLabel } from './sweep-choice.ts';
import type { PolicyReport, RunReport, SweepCell, SweepLoadReport, SweepReport } from './types.ts';

export function policyLabel(p: PolicyReport): string {
  const opts = Object.entries(p.options)
    .filter(([, v]) => v !== undefined && (typeof v !== 'object' || v === null))
    .map(([k, v]) => `${k}=${String(v)}`);
  const affinity = p.options.affinity;
  if (affinity && typeof affinity === 'object' && 'kind' in affinity) {
    opts.push(`affinity=${String((affinity as { kind: unknown }).kind)}`);
  }
  return opts.length > 0 ? `${p.policy} (${opts.join(', ')})` : p.policy;
}

export interface Columns {
  header: string[];
  rows: string[][];
}

/**
 * The comparison's columns, one place for the terminal table and the HTML report so they
 * cannot drift. The text table drops the cold/steady columns when no policy has them (the
 * HTML always shows them) and explains the cold count in its subtitle instead of the header.
 */
export function runColumns(report: RunReport, target: 'text' | 'html'): Columns {
  const html = target === 'html';
  const hasCold = html || report.policies.some((p) => p.coldTtftMs !== null);
  const hasSteady = html || report.policies.some((p) => p.steadyTtftMs !== null);
  // Only scenarios with rank failures or scale changes retry or fail requests.
  const hasFaults = report.policies.some((p) => p.retried > 0 || p.failed > 0);
  const header = [
    'policy',
    'hit rate',
    'TTFT p50',
    'p90',
    'p99',
    'mean',
    ...(hasCold ? [html ? 'cold mean (n)' : 'cold mean'] : []),
    ...(hasSteady ? ['steady p50'] : []),
    'req/s',
    'tok/s',
    'imbalance',
    'evicted tok',
    'queue mean',
    ...(hasFaults ? ['retried', 'failed'] : []),
  ];
  const rows = report.policies.map((p) => [
    policyLabel(p),
    fmtPct(p.hitRate),
    fmtMs(p.ttftMs.p50),
    fmtMs(p.ttftMs.p90),
    fmtMs(p.ttftMs.p99),
    fmtMs(p.ttftMs.mean),
    ...(hasCold
      ? [p.coldTtftMs ? `${fmtMs(p.coldTtftMs.mean)} (${p.coldTtftMs.count})` : '-']
      : []),
    ...(hasSteady ? [p.steadyTtftMs ? fmtMs(p.steadyTtftMs.p50) : '-'] : []),
    fmtNum(p.throughputRps, 3),
    fmtInt(p.throughputTokPerS),
    fmtNum(p.imbalance, 2),
    fmtInt(p.evictions),
    fmtMs(p.queueingMs.mean),
    ...(hasFaults ? [fmtInt(p.retried), fmtInt(p.failed)] : []),
  ]);
  return { header, rows };
}

/** Option columns of a sweep: its axes, once per option. */
export function sweepOptionColumns(report: SweepReport): string[] {
  return [...new Set(report.axes.map((a) => a.option))];
}

/**
 * The sweep grid's columns: the method, one column per swept option
 * (`-` where the cell's method does not read it), the metrics, and which row is the best, the
 * current setting (`--current`) and the recommended default (`reference`), the last two as
 * extra rows after the grid, in the text table and the HTML one alike.
 */
export function sweepColumns(report: SweepReport, target: 'text' | 'html'): Columns {
  const text = target === 'text';
  const options = sweepOptionColumns(report);
  const header = [
    'method',
    ...options.map((o) => (text ? optionFlag(o) : o)),
    'hit rate',
    'TTFT p50',
    'p99',
    'mean',
    'req/s',
    'tok/s',
    'imbalance',
    'chosen',
  ];
  const row = (c: SweepCell, label: string, mark: string) => [
    label,
    ...options.map((o) => (c.options[o] === undefined ? '-' : String(c.options[o]))),
    fmtPct(c.result.hitRate),
    fmtMs(c.result.ttftMs.p50),
    fmtMs(c.result.ttftMs.p99),
    fmtMs(c.result.ttftMs.mean),
    fmtNum(c.result.throughputRps, 3),
    fmtInt(c.result.throughputTokPerS),
    fmtNum(c.result.imbalance, 2),
    mark,
  ];
  const rows = report.grid.map((c) =>
    row(c, c.method, isBestCell(report, c) ? (text ? '<- best' : 'best') : ''),
  );
  if (report.current !== undefined) {
    const c = report.current;
    rows.push(row(c, c.method, 'current'));
  }
  if (report.reference !== undefined) {
    const ref = report.reference;
    const cell: SweepCell = { method: ref.policy, options: {}, result: ref };
    rows.push(row(cell, `${ref.policy} (defaults)`, 'reference'));
  }
  return { header, rows };
}

/** The router model in a title: '; 3 router replicas, index events (5 ms lag), load poll 100 ms'. */
export function routerTitle(r: RouterModel | undefined): string {
  if (r === undefined) return '';
  const n = r.replicas ?? 1;
  const parts = [`${n} router replica${n === 1 ? '' : 's'}`];
  const source = r.indexSource ?? 'learned';
  if (source === 'events') {
    const lag = r.eventLagMs ?? 5;
    parts.push(
      `index events (${typeof lag === 'number' ? `${lag} ms` : `${lag.length} sampled`} lag)`,
    );
  } else parts.push(`index ${source}`);
  if (r.loadPollMs !== undefined) {
    parts.push(r.loadPollMs === 0 ? 'live load view' : `load poll ${r.loadPollMs} ms`);
  }
  return `; ${parts.join(', ')}`;
}

export function renderRunTable(report: RunReport): string {
  const { header, rows } = runColumns(report, 'text');
  const title =
    (report.command === 'replay'
      ? `replay of ${String(report.scenarioOptions.file ?? report.scenario)}, `
      : `scenario ${report.scenario}, `) +
    `${report.ranks} ranks, profile ${report.profile}, seed ${String(report.seed)}` +
    (report.skippedLines ? `, ${report.skippedLines} invalid trace lines skipped` : '') +
    routerTitle(report.router);
  return `${title}\n(TTFT and queueing in ms; cold = requests that found nothing cached, count in parentheses)\n\n${renderTable(header, rows)}\n`;
}

export function renderSweepTable(report: SweepReport): string {
  const { header, rows } = sweepColumns(report, 'text');
  const title =
    `sweep ${report.policy} on ${report.scenario}, ${report.ranks} ranks, profile ${report.profile}, ` +
    `seed ${String(report.seed)}, objective ${report.objective}` +
    (report.hitRateWithin !== undefined
      ? ` with hit rate within ${report.hitRateWithin} points of the best`
      : '') +
    routerTitle(report.router);
  const rejected =
    report.rejected.length > 0
      ? `
${report.rejected.length} setting${report.rejected.length > 1 ? 's' : ''} left out, refused by the method (e.g. ${settingLabel(report.rejected[0]!)}: ${report.rejected[0]!.error})
`
      : '';
  return `${title}

${renderTable(header, rows)}
${rejected}
best: ${settingLabel(report.best)}
${report.reason}

router config (kvroute-router --config FILE):
${report.routerConfig}`;
}

/** `sweep --load`: the grid at each load, then where the best setting changes. */
export function renderSweepLoadTable(doc: SweepLoadReport): string {
  const unit = doc.axis === 'rate' ? 'requests/s' : 'in flight';
  const tables = doc.points
    .map(
      (pt) =>
        `== load x${pt.multiplier} (${Math.round(pt.value * 1000) / 1000} ${unit}) ==\n${renderSweepTable(pt.report)}`,
    )
    .join('\n');
  const changes =
    doc.changes.length === 0
      ? `the best setting is the same at every load tried (x${doc.points.map((p) => p.multiplier).join(', x')})`
      : doc.changes.join('\n');
  return `${tables}\n${changes}\nrouter config: the winner at the first load listed (x${doc.points[0]?.multiplier})\n`;
}
