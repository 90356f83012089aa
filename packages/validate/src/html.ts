// The validate report as one self-contained HTML page: the side-by-side table and two
// charts (TTFT distributions, per-request TTFT), rendered to inline SVG like the run report.

import { ecdfPoints, escapeHtml, htmlPage, renderSvg } from '@kvroute/sim/report';
import type { TopLevelSpec } from 'vega-lite';
import { formatError, formatValue } from './render.ts';
import type { ValidateReport } from './report.ts';

// Added to the simulator's page style: notes read like the meta line.
const STYLE = `
.note { color: #555; font-size: 0.9rem; }
`;

function ecdf(
  values: readonly number[],
  side: string,
): { side: string; ttftMs: number; share: number }[] {
  return ecdfPoints(values, 300).map((p) => ({ side, ttftMs: p.x, share: p.y }));
}

export function ttftCdfSpec(report: ValidateReport): TopLevelSpec {
  const pred = report.perRequest.flatMap((r) =>
    r.predicted?.ttftMs !== undefined ? [r.predicted.ttftMs] : [],
  );
  const obs = report.perRequest.flatMap((r) =>
    r.observed.ttftMs !== undefined && r.observed.ok ? [r.observed.ttftMs] : [],
  );
  const values = [...ecdf(pred, 'predicted'), ...ecdf(obs, 'observed')];
  return {
    title: 'TTFT distribution, predicted vs observed (cumulative share of requests)',
    width: 560,
    height: 260,
    data: { values },
    mark: { type: 'line', interpolate: 'step-after' },
    encoding: {
      x: { field: 'ttftMs', type: 'quantitative', title: 'TTFT (ms)' },
      y: {
        field: 'share',
        type: 'quantitative',
        title: 'share of requests',
        axis: { format: '%' },
      },
      color: {
        field: 'side',
        type: 'nominal',
        scale: { domain: ['predicted', 'observed'] },
        title: null,
      },
    },
  };
}

export function perRequestSpec(report: ValidateReport): TopLevelSpec {
  const values = report.perRequest.flatMap((r, i) => {
    const out: { n: number; side: string; ttftMs: number }[] = [];
    if (r.predicted?.ttftMs !== undefined)
      out.push({ n: i, side: 'predicted', ttftMs: r.predicted.ttftMs });
    if (r.observed.ok && r.observed.ttftMs !== undefined)
      out.push({ n: i, side: 'observed', ttftMs: r.observed.ttftMs });
    return out;
  });
  return {
    title: 'TTFT per request, in send order',
    width: 560,
    height: 240,
    data: { values },
    mark: { type: 'point', filled: true, size: 24 },
    encoding: {
      x: { field: 'n', type: 'quantitative', title: 'request (send order)' },
      y: { field: 'ttftMs', type: 'quantitative', title: 'TTFT (ms)' },
      color: {
        field: 'side',
        type: 'nominal',
        scale: { domain: ['predicted', 'observed'] },
        title: null,
      },
      shape: {
        field: 'side',
        type: 'nominal',
        scale: { domain: ['predicted', 'observed'] },
        title: null,
      },
    },
  };
}

export async function renderValidateHtml(report: ValidateReport): Promise<string> {
  const title = `kvroute-sim validate: ${report.scenario} against ${report.target}`;
  const rows = report.comparison
    .map(
      (r) =>
        `<tr><td>${escapeHtml(r.label)}</td><td>${escapeHtml(formatValue(r.predicted, r.unit))}</td><td>${escapeHtml(formatValue(r.observed, r.unit))}</td><td>${escapeHtml(formatError(r))}</td></tr>`,
    )
    .join('\n');
  const meta = [
    `Scenario <b>${escapeHtml(report.scenario)}</b> (seed ${escapeHtml(String(report.seed))}, ${report.requests.planned} requests planned, ${report.requests.completed} completed${report.interrupted ? ', <b>interrupted</b>' : ''}),`,
    `sent to <b>${escapeHtml(report.endpoint)}</b> as <code>${escapeHtml(report.api)}</code>;`,
    `prediction: policy <b>${escapeHtml(report.policy.label)}</b> on ${report.ranks} ranks with cost profile <b>${escapeHtml(report.profile)}</b>.`,
    `Times in ms${report.timeScale !== 1 ? ` of plan time (wall time divided by the time scale ${report.timeScale})` : ''}.`,
  ].join(' ');
  const notes = report.notes.map((n) => `<li>${escapeHtml(n)}</li>`).join('\n');
  const body = [
    `<h1>${escapeHtml(title)}</h1>`,
    `<p class="meta">${meta}</p>`,
    `<table>\n<thead><tr><th>metric</th><th>predicted</th><th>observed</th><th>error</th></tr></thead>\n<tbody>\n${rows}\n</tbody>\n</table>`,
    '<p class="note">Error is (predicted - observed) / observed; for the hit rate also the difference in percentage points.</p>',
    notes ? `<ul class="note">${notes}</ul>` : '',
    '<h2>Time to first token</h2>',
    `<div class="chart">${await renderSvg(ttftCdfSpec(report))}</div>`,
    `<div class="chart">${await renderSvg(perRequestSpec(report))}</div>`,
  ].join('\n');
  return htmlPage(title, body, STYLE);
}
