// Number formatting shared by the text table, CSV and HTML so they all agree.

export function fmtMs(ms: number | undefined | null): string {
  if (ms === undefined || ms === null || !Number.isFinite(ms)) return '-';
  return ms >= 100 ? Math.round(ms).toString() : ms.toFixed(1);
}

export function fmtPct(ratio: number | undefined | null): string {
  if (ratio === undefined || ratio === null || !Number.isFinite(ratio)) return '-';
  return `${(ratio * 100).toFixed(1)}%`;
}

export function fmtNum(x: number | undefined | null, digits = 2): string {
  if (x === undefined || x === null || !Number.isFinite(x)) return '-';
  return x.toFixed(digits);
}

/** Integers with thousands separators, fixed locale so output is the same everywhere. */
export function fmtInt(x: number | undefined | null): string {
  if (x === undefined || x === null || !Number.isFinite(x)) return '-';
  return Math.round(x)
    .toString()
    .replace(/\B(?=(\d{3})+(?!\d))/g, ',');
}

/**
 * Left-aligns the first column and right-aligns the rest; a rule under the header.
 * Plain ASCII so it survives logs and copy-paste.
 */
export function renderTable(
  header: readonly string[],
  rows: readonly (readonly string[])[],
): string {
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => (r[i] ?? '').length)));
  const line = (cells: readonly string[]) =>
    cells
      .map((c, i) => (i === 0 ? c.padEnd(widths[i] ?? 0) : c.padStart(widths[i] ?? 0)))
      .join('  ')
      .trimEnd();
  const rule = widths.map((w) => '-'.repeat(w)).join('  ');
  return [line(header), rule, ...rows.map(line)].join('\n');
}
