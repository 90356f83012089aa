// Plain-text comparison tables for the terminal.
import { fmtInt, fmtMs, fmtNum, fmtPct, renderTable } from './format.ts';
import type { PolicyReport, RunReport, SweepReport } from './types.ts';

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

export function renderRunTable(report: RunReport): string {
  const hasCold = report.policies.some((p) => p.coldTtftMs !== null);
  const hasSteady = report.policies.some((p) => p.steadyTtftMs !== null);
  // Only scenarios with rank failures or scale changes retry or fail requests.
  const hasFaults = report.policies.some((p) => p.retried > 0 || p.failed > 0);
  const header = [
    'policy',
    'hit rate',
    'TTFT p50',
    'p90',
    'p99',
    'mean',
    ...(hasCold ? ['cold mean'] : []),
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
  const title =
    (report.command === 'replay'
      ? `replay of ${String(report.scenarioOptions.file ?? report.scenario)}, `
      : `scenario ${report.scenario}, `) +
    `${report.ranks} ranks, profile ${report.profile}, seed ${String(report.seed)}` +
    (report.skippedLines ? `, ${report.skippedLines} invalid trace lines skipped` : '');
  return `${title}\n(TTFT and queueing in ms; cold = requests that found nothing cached, count in parentheses)\n\n${renderTable(header, rows)}\n`;
}

export function renderSweepTable(report: SweepReport): string {
  const header = [
    'window',
    'prefix len',
    'hit rate',
    'TTFT p50',
    'p99',
    'mean',
    'req/s',
    'imbalance',
    '',
  ];
  const rows = report.grid.map((c) => [
    String(c.window),
    String(c.prefixLength),
    fmtPct(c.result.hitRate),
    fmtMs(c.result.ttftMs.p50),
    fmtMs(c.result.ttftMs.p99),
    fmtMs(c.result.ttftMs.mean),
    fmtNum(c.result.throughputRps, 3),
    fmtNum(c.result.imbalance, 2),
    c.window === report.best.window && c.prefixLength === report.best.prefixLength ? '<- best' : '',
  ]);
  const title =
    `sweep ${report.policy} on ${report.scenario}, ${report.ranks} ranks, profile ${report.profile}, ` +
    `seed ${String(report.seed)}, objective ${report.objective}`;
  return `${title}\n\n${renderTable(header, rows)}\n\nbest: window=${report.best.window} prefix-length=${report.best.prefixLength}\n${report.reason}\n`;
}
