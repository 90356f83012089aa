// Text rendering of predicted vs observed. The error column is relative,
// (predicted - observed) / observed, except for the hit rate, where percentage points are
// what the acceptance bound speaks in, so both are shown.
import { renderTable } from '@kvroute/sim/report';
import type { ComparisonRow } from './stats.ts';

export function formatValue(v: number, unit: ComparisonRow['unit']): string {
  if (!Number.isFinite(v)) return '-';
  switch (unit) {
    case 'ratio':
      return `${(v * 100).toFixed(1)}%`;
    case 'ms':
      return Math.abs(v) < 10 ? `${v.toFixed(2)} ms` : `${v.toFixed(0)} ms`;
    case 'rps':
      return `${v.toFixed(3)} req/s`;
    case 'count':
      return String(Math.round(v));
  }
}

function signed(v: number, digits: number): string {
  const s = v.toFixed(digits);
  return v > 0 ? `+${s}` : s;
}

export function formatError(row: ComparisonRow): string {
  if (row.unit === 'count') return row.absError === 0 ? '0' : signed(row.absError, 0);
  const rel = Number.isFinite(row.relError) ? `${signed(row.relError * 100, 1)}%` : '-';
  if (row.unit === 'ratio') {
    if (!Number.isFinite(row.absError)) return '-';
    return `${signed(row.absError, 1)} pt (${rel})`;
  }
  return rel;
}

export function renderComparison(rows: readonly ComparisonRow[], policyLabel: string): string {
  return renderTable(
    ['metric', `predicted (${policyLabel})`, 'observed', 'error'],
    rows.map((r) => [
      r.label,
      formatValue(r.predicted, r.unit),
      formatValue(r.observed, r.unit),
      formatError(r),
    ]),
  );
}
