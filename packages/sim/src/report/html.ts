// One self-contained HTML file: inline CSS, charts as inline SVG rendered headlessly by
// vega (renderer 'none' + toSVG needs no canvas and no DOM), no scripts, so it opens
// offline and from a mail attachment alike.
import type { TopLevelSpec } from 'vega-lite';
import {
  hitRateSpec,
  rankLoadSpec,
  sweepHeatmapSpec,
  tradeOffSpec,
  ttftCdfSpec,
  ttftTimelineSpec,
} from './charts.ts';
import { isBestCell, settingLabel } from './sweep-choice.ts';
import { runColumns, sweepColumns } from './table.ts';
import type { PolicySamples, RunExtras, RunReport, SweepReport } from './types.ts';

// vega and vega-lite load on the first chart, not with this module: their module graph took
// about 250 ms, and every run, sweep and compare imports this file whether or not it writes
// HTML (the sweep's worker threads start only after it).
let renderers: Promise<[typeof import('vega'), typeof import('vega-lite')]> | undefined;

export async function renderSvg(spec: TopLevelSpec): Promise<string> {
  renderers ??= Promise.all([import('vega'), import('vega-lite')]);
  const [{ parse, View }, { compile }] = await renderers;
  const vgSpec = compile({ ...spec, config: { font: 'sans-serif', ...(spec.config ?? {}) } }).spec;
  const view = new View(parse(vgSpec), { renderer: 'none' });
  try {
    return await view.toSVG();
  } finally {
    view.finalize();
  }
}

export function escapeHtml(s: string): string {
  return s.replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);
}

const STYLE = `
body { font-family: system-ui, sans-serif; margin: 2rem auto; max-width: 1100px; color: #222; padding: 0 1rem; }
h1 { font-size: 1.4rem; } h2 { font-size: 1.1rem; margin-top: 2rem; }
table { border-collapse: collapse; font-size: 0.85rem; }
th, td { border-bottom: 1px solid #ddd; padding: 0.3rem 0.5rem; text-align: right; white-space: nowrap; }
th { white-space: normal; vertical-align: bottom; }
.table { overflow-x: auto; }
th:first-child, td:first-child { text-align: left; }
.meta { color: #555; font-size: 0.9rem; }
.chart { margin: 1rem 0; overflow-x: auto; }
.best { font-weight: bold; background: #eef7ee; }
.extra td { color: #555; background: #f6f6f6; }
`;

/** The page shell every HTML report shares; `style` is the report's own CSS. */
/**
 * The page shell every HTML report shares: the base style, then `extraStyle` (rules a page
 * adds or overrides, later rules winning), so the reports look alike and the base is written
 * once.
 */
export function htmlPage(title: string, body: string, extraStyle = ''): string {
  const style = STYLE + extraStyle;
  return `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>${escapeHtml(title)}</title>
<style>${style}</style>
</head>
<body>
${body}
</body>
</html>
`;
}

function htmlTable(header: string[], rows: string[][], rowClass?: (i: number) => string): string {
  const th = header.map((h) => `<th>${escapeHtml(h)}</th>`).join('');
  const trs = rows
    .map((r, i) => {
      const cls = rowClass?.(i) ?? '';
      return `<tr${cls ? ` class="${cls}"` : ''}>${r.map((c) => `<td>${escapeHtml(c)}</td>`).join('')}</tr>`;
    })
    .join('\n');
  // Headers wrap and a table wider than the page scrolls on its own, not the page.
  return `<div class="table"><table>\n<thead><tr>${th}</tr></thead>\n<tbody>\n${trs}\n</tbody>\n</table></div>`;
}

async function chart(spec: TopLevelSpec): Promise<string> {
  return `<div class="chart">${await renderSvg(spec)}</div>`;
}

export async function renderRunHtml(
  report: RunReport,
  samples: readonly PolicySamples[],
  extras: RunExtras = {},
): Promise<string> {
  const title = `kvroute-sim: ${report.scenario}`;
  const { header, rows } = runColumns(report, 'html');
  const meta = `${report.command === 'replay' ? 'Replay of' : 'Scenario'} <b>${escapeHtml(report.command === 'replay' ? String(report.scenarioOptions.file ?? report.scenario) : report.scenario)}</b>, ${report.ranks} ranks, cost profile <b>${escapeHtml(report.profile)}</b>, seed ${escapeHtml(String(report.seed))}.${report.skippedLines ? ` ${report.skippedLines} invalid trace lines skipped.` : ''} Times in ms of simulated time.`;
  const timeline = ttftTimelineSpec(report.policies, samples, extras.markers ?? []);
  const body = [
    `<h1>${escapeHtml(title)}</h1>`,
    `<p class="meta">${meta}</p>`,
    htmlTable(header, rows),
    '<h2>Time to first token</h2>',
    await chart(ttftCdfSpec(report.policies, samples)),
    ...(timeline ? [await chart(timeline)] : []),
    '<h2>Cache hit rate</h2>',
    await chart(hitRateSpec(report.policies)),
    await chart(tradeOffSpec(report.policies, extras.boundHitRate)),
    '<h2>Per-rank load</h2>',
    await chart(rankLoadSpec(report.policies)),
  ].join('\n');
  return htmlPage(title, body);
}

export async function renderSweepHtml(report: SweepReport): Promise<string> {
  const title = `kvroute-sim sweep: ${report.policy} on ${report.scenario}`;
  const bestIndex = report.grid.findIndex((c) => isBestCell(report, c));
  const { header, rows } = sweepColumns(report, 'html');
  const best = report.grid[bestIndex];
  const heatmaps: string[] = [];
  for (const method of report.policies) {
    for (const metric of ['ttftP99', 'ttftMean', 'hitRate'] as const) {
      const spec = sweepHeatmapSpec(report, metric, method);
      if (spec !== null) heatmaps.push(await chart(spec));
    }
  }
  const constraint =
    report.hitRateWithin !== undefined
      ? ` with hit rate within ${report.hitRateWithin} points of the best`
      : '';
  const body = [
    `<h1>${escapeHtml(title)}</h1>`,
    `<p class="meta">${report.ranks} ranks, cost profile <b>${escapeHtml(report.profile)}</b>, seed ${escapeHtml(String(report.seed))}, objective <b>${report.objective}</b>${escapeHtml(constraint)}.</p>`,
    `<p><b>Best: ${escapeHtml(settingLabel(report.best))}.</b> ${escapeHtml(report.reason)}</p>`,
    `<h2>Router config</h2>\n<pre>${escapeHtml(report.routerConfig)}</pre>`,
    '<h2>Grid</h2>',
    ...heatmaps,
    htmlTable(header, rows, (i) =>
      i === bestIndex ? 'best' : i >= report.grid.length ? 'extra' : '',
    ),
    ...(report.rejected.length > 0
      ? [
          `<p class="meta">${report.rejected.length} setting(s) left out, refused by the method, e.g. ${escapeHtml(settingLabel(report.rejected[0]!))}: ${escapeHtml(report.rejected[0]!.error)}</p>`,
        ]
      : []),
    ...(best
      ? ['<h2>Per-rank load at the best setting</h2>', await chart(rankLoadSpec([best.result]))]
      : []),
  ].join('\n');
  return htmlPage(title, body);
}
