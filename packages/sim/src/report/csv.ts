// CSV output: one row per policy (run, replay) or per grid cell (sweep), columns in a
// fixed order so spreadsheets and scripts can rely on them.
import { optionFlag } from '@kvroute/policy';
import { isBestCell } from './sweep-choice.ts';
import { sweepOptionColumns } from './table.ts';
import type { PolicyReport, RunReport, SweepReport } from './types.ts';

function cell(v: unknown): string {
  if (v === null || v === undefined) return '';
  if (typeof v === 'number') {
    if (!Number.isFinite(v)) return '';
    return Number.isInteger(v) ? String(v) : String(Math.round(v * 1e6) / 1e6);
  }
  const s = typeof v === 'string' ? v : JSON.stringify(v);
  return /[",\n\r]/.test(s) ? `"${s.replaceAll('"', '""')}"` : s;
}

const POLICY_COLUMNS: [string, (p: PolicyReport) => unknown][] = [
  ['policy', (p) => p.policy],
  ['options', (p) => p.options],
  ['requests', (p) => p.requests],
  ['hit_rate', (p) => p.hitRate],
  ['ttft_p50_ms', (p) => p.ttftMs.p50],
  ['ttft_p90_ms', (p) => p.ttftMs.p90],
  ['ttft_p99_ms', (p) => p.ttftMs.p99],
  ['ttft_mean_ms', (p) => p.ttftMs.mean],
  ['cold_count', (p) => p.coldTtftMs?.count],
  ['cold_ttft_mean_ms', (p) => p.coldTtftMs?.mean],
  ['steady_count', (p) => p.steadyTtftMs?.count],
  ['steady_ttft_p50_ms', (p) => p.steadyTtftMs?.p50],
  ['steady_ttft_p99_ms', (p) => p.steadyTtftMs?.p99],
  ['steady_ttft_mean_ms', (p) => p.steadyTtftMs?.mean],
  ['throughput_rps', (p) => p.throughputRps],
  ['throughput_tok_per_s', (p) => p.throughputTokPerS],
  ['imbalance', (p) => p.imbalance],
  ['evicted_tokens', (p) => p.evictions],
  ['queueing_p50_ms', (p) => p.queueingMs.p50],
  ['queueing_p99_ms', (p) => p.queueingMs.p99],
  ['queueing_mean_ms', (p) => p.queueingMs.mean],
  ['duration_ms', (p) => p.durationMs],
];

function rows(header: string[], body: unknown[][]): string {
  return `${[header, ...body].map((r) => r.map(cell).join(',')).join('\n')}\n`;
}

export function runToCsv(report: RunReport): string {
  return rows(
    ['scenario', 'ranks', 'profile', 'seed', ...POLICY_COLUMNS.map(([h]) => h)],
    report.policies.map((p) => [
      report.scenario,
      report.ranks,
      report.profile,
      report.seed,
      ...POLICY_COLUMNS.map(([, f]) => f(p)),
    ]),
  );
}

/** One row per grid cell: one column per swept option (`prefix_length`), empty where unread. */
export function sweepToCsv(report: SweepReport): string {
  const options = sweepOptionColumns(report);
  return rows(
    [
      'scenario',
      'ranks',
      'profile',
      'seed',
      ...options.map((o) => optionFlag(o).replaceAll('-', '_')),
      'best',
      ...POLICY_COLUMNS.map(([h]) => h),
    ],
    report.grid.map((c) => [
      report.scenario,
      report.ranks,
      report.profile,
      report.seed,
      ...options.map((o) => c.options[o]),
      isBestCell(report, c) ? 1 : 0,
      ...POLICY_COLUMNS.map(([, f]) => f(c.result)),
    ]),
  );
}
