// JSON output. Numbers that are not integers are rounded to 6 decimals so the output is
// readable and does not carry float noise; NaN and infinities (e.g. a percentile over no
// requests) become null, as JSON.stringify does anyway.
import type { RunReport, SweepLoadReport, SweepReport } from './types.ts';

function round6(_key: string, value: unknown): unknown {
  if (typeof value === 'number' && !Number.isInteger(value) && Number.isFinite(value)) {
    return Math.round(value * 1e6) / 1e6;
  }
  return value;
}

export function toJson(report: RunReport | SweepReport | SweepLoadReport): string {
  return `${JSON.stringify(report, round6, 2)}\n`;
}
