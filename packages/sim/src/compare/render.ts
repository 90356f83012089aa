// Renders a PolicyComparison as the committed Markdown and a self-contained HTML page (tables
// plus vega-lite charts rendered to inline SVG by the report module's renderSvg).
import type { TopLevelSpec } from 'vega-lite';
import { escapeHtml, renderSvg } from '../report/html.ts';
import type { LoadCurve } from './load-curve.ts';
import type { PolicyComparison, PolicyRow, ScenarioResult } from './policy-comparison.ts';
import { NEW_METHODS, RECOMMENDED } from './policy-comparison.ts';
import { recommend } from './recommend.ts';

const pct = (x: number) => `${(x * 100).toFixed(1)}%`;
const ms = (x: number | null) => (x === null ? 'n/a' : `${Math.round(x)}`);

const HEADER = [
  'method',
  'hit rate',
  'TTFT p50 ms',
  'TTFT p99 ms',
  'TTFT mean ms',
  'steady p50 ms',
  'imbalance',
  'busiest rank busy',
  'keys moved',
  'retried',
];

function movedCell(r: PolicyRow): string {
  if (r.keysMoved.length === 0) return '-';
  return r.keysMoved
    .map(
      (k) =>
        `${pct(k.fraction)} (${k.moved}/${k.sessions}${k.collateral !== k.moved ? `, collateral ${k.collateral}` : ''})`,
    )
    .join(' ; ');
}

function cells(r: PolicyRow): string[] {
  return [
    NEW_METHODS.includes(r.policy as (typeof NEW_METHODS)[number]) ? `**${r.policy}**` : r.policy,
    pct(r.hitRate),
    ms(r.ttftP50),
    ms(r.ttftP99),
    ms(r.ttftMean),
    ms(r.steadyP50),
    r.imbalance.toFixed(2),
    pct(r.maxBusy),
    movedCell(r),
    String(r.retried),
  ];
}

function mdTable(header: string[], rows: string[][]): string {
  const line = (c: string[]) => `| ${c.join(' | ')} |`;
  return [line(header), line(header.map(() => '---')), ...rows.map(line)].join('\n');
}

const RECOMMEND_HEADER = ['workload', 'load', 'use', 'why (measured)'];

function recommendRows(c: PolicyComparison): string[][] {
  return recommend(c.scenarios, c.loadCurves).map((r) => [
    r.workload,
    r.load,
    `\`${r.method}\``,
    r.why,
  ]);
}

const RECOMMEND_INTRO =
  'The method with the lowest TTFT p99 for each workload and load (within 5% counts as a tie, won by the higher hit rate); each row holds only for the load it names. Without a measured workload to go by, use the recommended default.';

function scenarioMd(s: ScenarioResult): string {
  const parts = [`### ${s.title}`, ''];
  const opts = Object.entries(s.options)
    .filter(([k]) => k !== 'file')
    .map(([k, v]) => `${k}=${String(v)}`)
    .join(', ');
  parts.push(
    `Scenario \`${s.scenario}\`, ${s.ranks} ranks, ${s.requests} requests. Options: ${opts}.`,
  );
  if (s.events.length > 0) parts.push(`Events: ${s.events.join('; ')}.`);
  if (s.bound) {
    parts.push(
      `One-big-cache bound (one radix cache of ${s.bound.capacityTokens.toLocaleString('en-US')} tokens = all ranks' KV): **${pct(s.bound.hitRate)}** token hit rate.`,
    );
  }
  parts.push('', mdTable(HEADER, s.rows.map(cells)), '');
  return parts.join('\n');
}

export const NOTES = `## Findings

- **Recommended default: \`cache_aware\`.** It indexes the whole prompt (chained 256-token window hashes, learned from its own decisions), so a session follows its history and a tenant's prompt is reused wherever it already lives; it leaves a rank only when that rank is over the bound (1.25 x mean in-flight tokens + 64k tokens) and then picks the cheapest rank by uncached prefill + queued tokens, so a hot prompt spreads over just as many ranks as its load needs. Ties on load go to the rank whose cache churns least, which evens out LRU pressure: that is what lifts the replay's hit rate to the one-big-cache bound's neighbourhood.
- **\`consistent_hash\`** (bounded loads, epsilon 0.25, the classic bound without slack) fixes prefix_match's hot spots (hot-prefix and compressed-replay p99 far below prefix_match's) but pays in hits: at light load a purely relative bound walks a key off its rank whenever that rank holds one long request more than the others, and its key is only the first 4,096 tokens. Its \`slack\` option (e.g. 65536) recovers part of that; it stays as the stateless choice (several router replicas agree without sharing state).
- **Keys moved** are observed, not computed from a hash: a session counts as moved when its first request after the change ran elsewhere, whatever the reason (a hash changing its mind, or load). The scale-out target is read literally as 1.5/N with N = 12 ranks after the change. A balanced hash (prefix_match's modulo, consistent_hash) must move at least the new ranks' share (4/12 = 33%) to use them; cache_aware keeps live sessions with their cache and lets the new ranks take new sessions and overflow, so they fill as load needs them (at light load they can stay idle).
- **Seed-sequential** steady state is TTFT p50 after the first 16 requests; with one sequential client every cache-affine method keeps the prefix on one rank, so they tie.
- **Busy**: a rank is busy while it runs a prefill or decode step; the compressed replay uses the smallest tried speed-up at which round_robin's busiest rank is >= 70% busy, and x8.

## How to read this

- **hit rate**: cached input tokens / input tokens (token-weighted, as SGLang reports \`cached_tokens\`).
- **imbalance**: busiest rank's prefill tokens / mean over ranks. **busiest rank busy**: fraction of the run the busiest rank spent in prefill or decode steps.
- **keys moved**: of the sessions active on both sides of a cluster change, the share whose first request after it ran on another rank than their last one before it (rank-failure: at the failure ; at the return). "collateral" counts moved sessions whose rank did not go away. It measures what the method did, including moves its load balancing makes anyway.
- **steady p50**: TTFT p50 after the first \`ranks\` requests (the seed scenarios' steady state).
- Methods run with their defaults in every scenario (no per-scenario tuning); no routing-key affinity, so the methods alone are compared.
`;

/** The settings line when options were set on the command line (absent: every default). */
function settingsNote(c: PolicyComparison): string {
  const set = Object.entries(c.methodOptions ?? {});
  if (set.length === 0) return '';
  return `\nMethod options set for every method that reads them: ${set.map(([k, v]) => `\`${k}=${v}\``).join(', ')}; all others at their defaults.\n`;
}

const METRIC_NAMES = {
  ttftP50: 'TTFT p50',
  ttftP99: 'TTFT p99',
  throughputRps: 'throughput',
} as const;

/** Policies against offered load: one table per scenario, the crossovers, where each wins. */
export function loadMd(curves: readonly LoadCurve[]): string {
  const out: string[] = ['## Across offered load', ''];
  out.push(
    "The same requests sent open loop (Poisson) at multiples of the scenario's own pace. A policy's advantage holds for the loads it was measured at; crossovers name where the best policy changes.",
    '',
  );
  for (const c of curves) {
    out.push(`### ${c.title}`, '');
    out.push(`Own pace (x1): ${c.baseRateRps} requests/s.`, '');
    const { header, rows } = loadTable(c);
    out.push('Each cell: TTFT p50 / p99, throughput.', '');
    out.push(mdTable(header, rows), '');
    out.push(loadFindings(c), '');
  }
  return out.join('\n');
}

function loadTable(c: LoadCurve): { header: string[]; rows: string[][] } {
  return {
    header: ['load', ...c.points[0]!.rows.map((r) => r.policy)],
    rows: c.points.map((p) => [
      `x${p.multiplier} (${p.rateRps} req/s)`,
      ...p.rows.map(
        (r) =>
          `${Math.round(r.ttftP50)} / ${Math.round(r.ttftP99)} ms, ${r.throughputRps.toFixed(2)} req/s`,
      ),
    ]),
  };
}

/** Crossovers and the load range each metric's best policy holds for, as Markdown bullets. */
function loadFindings(c: LoadCurve): string {
  const out: string[] = [];
  if (c.crossovers.length === 0) {
    out.push('- No crossover: the best policy on each metric is the same at every load tried.');
  } else {
    for (const x of c.crossovers) {
      out.push(
        `- Crossover on ${METRIC_NAMES[x.metric]} between x${x.from} and x${x.to}: \`${x.before}\` is best below, \`${x.after}\` above.`,
      );
    }
  }
  for (const b of c.best) {
    out.push(`- Best ${METRIC_NAMES[b.metric]}: \`${b.policy}\` at x${b.multipliers.join(', x')}.`);
  }
  return out.join('\n');
}

function loadHtml(curves: readonly LoadCurve[]): string {
  if (curves.length === 0) return '';
  return `<h2>Across offered load</h2><p>${escapeHtml("The same requests sent open loop (Poisson) at multiples of the scenario's own pace; each cell is TTFT p50 / p99 and throughput.")}</p>${curves
    .map((c) => {
      const { header, rows } = loadTable(c);
      return `<h3>${escapeHtml(c.title)}</h3><p>${escapeHtml(`Own pace (x1): ${c.baseRateRps} requests/s.`)}</p>${htmlTable(header, rows)}${notesHtml(loadFindings(c))}`;
    })
    .join('\n')}`;
}

export function renderMarkdown(c: PolicyComparison): string {
  const out: string[] = [];
  out.push('# Policy comparison');
  out.push('');
  out.push(
    `Generated by \`pnpm compare\`${c.quick ? ' (QUICK sizes: a smoke run, not the real figures)' : ''} with profile \`${c.profile}\`, seed ${String(c.seed)}; simulated, deterministic (the same command reproduces this file byte for byte). Methods: ${c.methods.map((m) => `\`${m}\``).join(', ')}. Recommended default: **\`${RECOMMENDED}\`**.${settingsNote(c)}`,
  );
  out.push('');
  out.push('## Which policy for which workload and load');
  out.push('');
  out.push(RECOMMEND_INTRO);
  out.push('');
  out.push(mdTable(RECOMMEND_HEADER, recommendRows(c)));
  out.push('');
  out.push('## Targets');
  out.push('');
  out.push(
    mdTable(
      ['target', 'method', 'measured', 'result', 'why'],
      c.targets.map((t) => [t.target, t.method, t.measured, t.met ? 'met' : '**missed**', t.why]),
    ),
  );
  out.push('');
  if (c.busySpeedup !== null) {
    out.push(
      `Replay speed-up at which round_robin's busiest rank is >= 70% busy: **x${c.busySpeedup}** (searched: ${c.busySearch.map((b) => `x${b.speedup} ${pct(b.maxBusy)}`).join(', ')}).`,
    );
  } else {
    out.push(
      `No tried speed-up made round_robin's busiest rank >= 70% busy (searched: ${c.busySearch.map((b) => `x${b.speedup} ${pct(b.maxBusy)}`).join(', ')}).`,
    );
  }
  out.push('');
  out.push('## Results by scenario');
  out.push('');
  for (const s of c.scenarios) out.push(scenarioMd(s));
  if (c.loadCurves.length > 0) out.push(loadMd(c.loadCurves));
  out.push(NOTES);
  return `${out.join('\n')}\n`;
}

function barSpec(title: string, field: 'hitRate' | 'ttftP99', c: PolicyComparison): TopLevelSpec {
  const values = c.scenarios.flatMap((s) =>
    s.rows.map((r) => ({ scenario: s.id, method: r.policy, value: r[field] })),
  );
  return {
    $schema: 'https://vega.github.io/schema/vega-lite/v5.json',
    title,
    data: { values },
    // Bars need a zero baseline, which a log scale does not have (they render empty), so the
    // log-scale TTFT chart uses points.
    mark: field === 'hitRate' ? 'bar' : { type: 'point', filled: true, size: 60 },
    width: 70,
    height: 160,
    encoding: {
      column: { field: 'scenario', type: 'nominal', title: null },
      x: { field: 'method', type: 'nominal', axis: { labelAngle: -60 }, title: null },
      y: {
        field: 'value',
        type: 'quantitative',
        title: field === 'hitRate' ? 'token hit rate' : 'TTFT p99 (ms)',
        ...(field === 'hitRate' ? { axis: { format: '%' } } : { scale: { type: 'log' } }),
      },
      color: { field: 'method', type: 'nominal', legend: null },
    },
  } as TopLevelSpec;
}

/** The Markdown notes (headings, bullets, **bold**, `code`) as HTML, so both reports say the same. */
function notesHtml(md: string): string {
  const inline = (text: string) =>
    escapeHtml(text)
      .replace(/\*\*(.+?)\*\*/g, '<b>$1</b>')
      .replace(/`([^`]+)`/g, '<code>$1</code>');
  const html: string[] = [];
  let inList = false;
  for (const line of md.split('\n')) {
    const bullet = line.startsWith('- ');
    if (inList && !bullet) html.push('</ul>');
    if (bullet && !inList) html.push('<ul>');
    inList = bullet;
    if (bullet) html.push(`<li>${inline(line.slice(2))}</li>`);
    else if (line.startsWith('## ')) html.push(`<h2>${inline(line.slice(3))}</h2>`);
    else if (line.trim() !== '') html.push(`<p>${inline(line)}</p>`);
  }
  if (inList) html.push('</ul>');
  return html.join('\n');
}

function htmlTable(header: string[], rows: string[][]): string {
  const strip = (s: string) => escapeHtml(s.replace(/\*\*/g, ''));
  return `<table><thead><tr>${header.map((h) => `<th>${strip(h)}</th>`).join('')}</tr></thead><tbody>${rows
    .map((r) => `<tr>${r.map((x) => `<td>${strip(x)}</td>`).join('')}</tr>`)
    .join('')}</tbody></table>`;
}

const STYLE = `body{font-family:system-ui,sans-serif;margin:2rem auto;max-width:1200px;color:#222;padding:0 1rem}
table{border-collapse:collapse;font-size:.8rem;margin:.5rem 0 1.5rem}th,td{border-bottom:1px solid #ddd;padding:.25rem .5rem;text-align:right}
th:first-child,td:first-child{text-align:left}li{margin:.3rem 0;line-height:1.4}.missed{color:#b00;font-weight:bold}.met{color:#070}svg{max-width:100%;height:auto}`;

export async function renderHtml(c: PolicyComparison): Promise<string> {
  const hit = await renderSvg(barSpec('Token hit rate by scenario', 'hitRate', c));
  const p99 = await renderSvg(barSpec('TTFT p99 by scenario (log scale)', 'ttftP99', c));
  const targets = `<table><thead><tr><th>target</th><th>method</th><th>measured</th><th>result</th><th>why</th></tr></thead><tbody>${c.targets
    .map(
      (t) =>
        `<tr><td>${escapeHtml(t.target)}</td><td>${escapeHtml(t.method)}</td><td>${escapeHtml(t.measured)}</td><td class="${t.met ? 'met' : 'missed'}">${t.met ? 'met' : 'missed'}</td><td>${escapeHtml(t.why)}</td></tr>`,
    )
    .join('')}</tbody></table>`;
  const sections = c.scenarios
    .map((s) => {
      const extra = [
        ...s.events,
        ...(s.bound ? [`one-big-cache bound: ${pct(s.bound.hitRate)}`] : []),
      ];
      return `<h3>${escapeHtml(s.title)}</h3><p>${escapeHtml(`${s.ranks} ranks, ${s.requests} requests. ${extra.join('; ')}`)}</p>${htmlTable(HEADER, s.rows.map(cells))}`;
    })
    .join('\n');
  return `<!doctype html><html lang="en"><head><meta charset="utf-8"><title>kvroute policy comparison</title><style>${STYLE}</style></head><body>
<h1>kvroute policy comparison</h1>
<p>Profile ${escapeHtml(c.profile)}, seed ${escapeHtml(String(c.seed))}${c.quick ? ' (QUICK sizes)' : ''}. Recommended default: <b>${RECOMMENDED}</b>. Regenerate with <code>pnpm compare</code>.</p>
<h2>Which policy for which workload and load</h2><p>${escapeHtml(RECOMMEND_INTRO)}</p>${htmlTable(
    RECOMMEND_HEADER,
    recommendRows(c).map((r) => r.map((x) => x.replace(/`/g, ''))),
  )}
<h2>Targets</h2>${targets}
<h2>Charts</h2>${hit}${p99}
<h2>Results by scenario</h2>${sections}
${loadHtml(c.loadCurves)}
${notesHtml(NOTES)}
</body></html>
`;
}
