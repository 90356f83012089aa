import { describe, expect, it } from 'vitest';
import { ecdfPoints } from '../src/report/charts.ts';
import { runToCsv, sweepToCsv } from '../src/report/csv.ts';
import { renderRunHtml, renderSweepHtml } from '../src/report/html.ts';
import { toJson } from '../src/report/json.ts';
import { chooseBest, sweepNotes } from '../src/report/sweep-choice.ts';
import { renderRunTable, renderSweepTable } from '../src/report/table.ts';
import {
  policyReport,
  REQUIRED_POLICY_KEYS,
  runReport,
  sweepCell,
  sweepReport,
} from './report-fixtures.ts';

const three = () =>
  runReport([
    policyReport('round_robin', { hitRate: 0.03 }),
    policyReport('total_tokens', { hitRate: 0.5 }),
    policyReport('prefix_match', { hitRate: 0.9, options: { window: 256, prefixLength: 4096 } }),
  ]);

describe('text table', () => {
  it('has one row per policy with formatted figures and a labelled header', () => {
    const out = renderRunTable(three());
    const lines = out.trimEnd().split('\n');
    expect(lines[0]).toContain('seed-sequential');
    const header = lines.find((l) => l.startsWith('policy'))!;
    for (const col of [
      'hit rate',
      'TTFT p50',
      'p90',
      'p99',
      'mean',
      'cold mean',
      'steady p50',
      'req/s',
      'tok/s',
      'imbalance',
      'evicted tok',
      'queue mean',
    ]) {
      expect(header).toContain(col);
    }
    const rows = lines.slice(lines.indexOf(header) + 2);
    expect(rows).toHaveLength(3);
    expect(rows[0]).toMatch(
      /^round_robin\s+3\.0%\s+1000\s+2000\s+3000\s+1500\s+7400 \(2\)\s+1290\s+0\.167\s+3,800\s+1\.25\s+0\s+0\.5$/,
    );
    expect(rows[2]).toContain('prefix_match (window=256, prefixLength=4096)');
    expect(rows[2]).toContain('90.0%');
  });

  it('shows retried and failed requests only when some policy had any', () => {
    expect(renderRunTable(three())).not.toContain('retried');
    const out = renderRunTable(
      runReport([
        policyReport('round_robin', { retried: 3, failed: 1 }),
        policyReport('prefix_match'),
      ]),
    );
    const lines = out.split('\n');
    expect(lines.find((l) => l.startsWith('policy'))).toMatch(/queue mean\s+retried\s+failed$/);
    expect(lines.find((l) => l.startsWith('round_robin'))).toMatch(/\s3\s+1$/);
    expect(lines.find((l) => l.startsWith('prefix_match'))).toMatch(/\s0\s+0$/);
  });

  it('drops the cold and steady columns when no policy has them', () => {
    const out = renderRunTable(
      runReport([policyReport('round_robin', { coldTtftMs: null, steadyTtftMs: null })]),
    );
    expect(out).not.toContain('cold mean');
    expect(out).not.toContain('steady p50');
  });

  it('marks the best sweep cell and prints the reason', () => {
    const a = sweepCell(64, 1024, 900, 500, 0.8);
    const b = sweepCell(128, 1024, 800, 450, 0.7);
    const out = renderSweepTable(sweepReport([a, b], b, 'lowest p99'));
    const bestLine = out.split('\n').find((l) => l.includes('<- best'))!;
    expect(bestLine).toMatch(/^prefix_match\s+128\s+1024\s+70\.0%/);
    expect(out).toContain('best: prefix_match window=128 prefix-length=1024');
    // The winner as a router config, printed under the verdict.
    expect(out).toContain(
      'router config (kvroute-router --config FILE):\nload-balance-method: prefix_match',
    );
    expect(out).toContain('lowest p99');
  });
});

describe('JSON', () => {
  it('keeps the documented keys in a stable order', () => {
    const parsed = JSON.parse(toJson(three()));
    expect(Object.keys(parsed)).toEqual([
      'format',
      'command',
      'scenario',
      'scenarioOptions',
      'ranks',
      'profile',
      'seed',
      'policies',
    ]);
    const p = parsed.policies[0];
    for (const k of REQUIRED_POLICY_KEYS) {
      expect(p).toHaveProperty(k);
    }
    expect(Object.keys(p.ttftMs)).toEqual(['p50', 'p90', 'p99', 'mean']);
  });

  it('rounds float noise to 6 decimals and turns non-finite numbers into null', () => {
    const r = runReport([
      policyReport('round_robin', { throughputRps: 1 / 3, imbalance: Number.NaN }),
    ]);
    const parsed = JSON.parse(toJson(r));
    expect(parsed.policies[0].throughputRps).toBe(0.333333);
    expect(parsed.policies[0].imbalance).toBeNull();
  });

  it('is byte-identical for equal input', () => {
    expect(toJson(three())).toBe(toJson(three()));
  });
});

describe('CSV', () => {
  it('writes a header and one row per policy, quoting JSON options', () => {
    const lines = runToCsv(three()).trimEnd().split('\n');
    expect(lines).toHaveLength(4);
    expect(lines[0]!.split(',').slice(0, 8)).toEqual([
      'scenario',
      'ranks',
      'profile',
      'seed',
      'policy',
      'options',
      'requests',
      'hit_rate',
    ]);
    expect(lines[3]).toContain('"{""window"":256,""prefixLength"":4096}"');
    expect(lines[1]!.split(',')[7]).toBe('0.03');
  });

  it('writes one sweep row per cell with the best flagged', () => {
    const a = sweepCell(64, 1024, 900, 500, 0.8);
    const b = sweepCell(128, 1024, 800, 450, 0.7);
    const lines = sweepToCsv(sweepReport([a, b], b))
      .trimEnd()
      .split('\n');
    expect(lines).toHaveLength(3);
    const header = lines[0]!.split(',');
    const bestCol = header.indexOf('best');
    expect(lines.slice(1).map((l) => l.split(',')[bestCol])).toEqual(['0', '1']);
  });
});

describe('sweep choice', () => {
  it('picks the lowest p99 and shows the hit-rate trade-off', () => {
    const grid = [
      sweepCell(64, 1024, 900, 500, 0.95, 2.0),
      sweepCell(128, 1024, 800, 450, 0.7, 1.1),
      sweepCell(256, 2048, 1200, 600, 0.6),
    ];
    const { best, reason } = chooseBest(grid, 'ttft-p99');
    expect([best.window, best.prefixLength]).toEqual([128, 1024]);
    expect(reason).toContain('lowest TTFT p99, 800 ms, of 3 settings');
    expect(reason).toContain('highest: 1200 ms at prefix_match window=256 prefix-length=2048');
    expect(reason).toContain(
      'Trade-off: prefix_match window=64 prefix-length=1024 caches more (hit rate 95.0% vs 70.0%)',
    );
    expect(reason).toContain('concentrate work on fewer ranks');
  });

  it('never picks a setting under which no request completed (its latencies are 0 over nothing)', () => {
    const dead = sweepCell(512, 1024, 0, 0, 0);
    dead.result = { ...dead.result, requests: 0, failed: 30 };
    const grid = [sweepCell(64, 1024, 900, 500, 0.9), dead, sweepCell(128, 1024, 800, 450, 0.8)];
    const { best, reason } = chooseBest(grid, 'ttft-p99');
    expect(best.window).toBe(128);
    expect(reason).toMatch(/^1 of 3 settings completed no request and are left out\. /);
    // With a hit-rate constraint too, both are said, and the constraint counts what is left.
    expect(chooseBest(grid, 'ttft-p99', 20).reason).toContain('; 2 of 2 settings qualify');
    // When none completed a request, the choice is still made, among all of them.
    const allDead = grid.map((c) => ({ ...c, result: { ...c.result, requests: 0 } }));
    expect(() => chooseBest(allDead, 'ttft-p99')).not.toThrow();
  });

  it('breaks near-ties on the primary metric by the secondary one', () => {
    const grid = [
      sweepCell(64, 1024, 6000, 2000, 0.9),
      sweepCell(128, 1024, 6010, 1500, 0.9),
      sweepCell(256, 1024, 7000, 1000, 0.9),
    ];
    const { best, reason } = chooseBest(grid, 'ttft-p99');
    expect(best.window).toBe(128);
    // The pick is not the cell with the lowest p99: the verdict names that one and says the
    // pick is within the tolerance of it, never that the pick has the lowest.
    expect(reason).not.toMatch(/window=128 prefix-length=1024 has the lowest TTFT p99/);
    expect(reason).toContain(
      'The lowest TTFT p99 of 3 settings is 6000 ms, at prefix_match window=64 prefix-length=1024 (highest: 7000 ms',
    );
    expect(reason).toContain(
      'prefix_match window=128 prefix-length=1024 is within 1% of that, at 6010 ms, as is 1 other setting; of these 2 it has the lowest mean TTFT (1500 ms).',
    );
    expect(reason).toContain('nothing is traded away');
  });

  it('counts the settings within the tolerance of the lowest value, the pick left out', () => {
    // As an audit found on agentic: four cells at 218.4 ms, the pick at 220 ms with the lowest
    // mean, and 222 ms, within 1% of the pick's 220 but not of the lowest 218.4.
    const grid = [
      sweepCell(64, 1024, 218.4, 84, 0.9),
      sweepCell(128, 1024, 222, 83.8, 0.9),
      sweepCell(256, 1024, 218.4, 83.5, 0.9),
      sweepCell(512, 1024, 220, 83.1, 0.9),
      sweepCell(64, 2048, 218.4, 83.6, 0.9),
      sweepCell(128, 2048, 218.4, 83.8, 0.9),
      sweepCell(256, 2048, 283, 85, 0.9),
    ];
    const { best, reason } = chooseBest(grid, 'ttft-p99');
    expect([best.window, best.prefixLength]).toEqual([512, 1024]);
    expect(reason).toContain(
      'The lowest TTFT p99 of 7 settings is 218 ms, at prefix_match window=64 prefix-length=1024 and 3 others (highest: 283 ms at prefix_match window=256 prefix-length=2048).',
    );
    expect(reason).toContain(
      'prefix_match window=512 prefix-length=1024 is within 1% of that, at 220 ms, as are 4 other settings; of these 5 it has the lowest mean TTFT (83.1 ms).',
    );

    // A pick at the lowest value: the others within 1% of it, itself not counted.
    const atLowest = chooseBest(grid.slice(0, 3), 'ttft-p99');
    expect(atLowest.best.window).toBe(256);
    expect(atLowest.reason).toContain(
      'prefix_match window=256 prefix-length=1024 has the lowest TTFT p99, 218 ms, of 3 settings',
    );
    expect(atLowest.reason).toContain(
      '1 other setting is within 1% of it on TTFT p99; of these 2 it has the lowest mean TTFT (83.5 ms).',
    );
  });

  it('optimises hit rate when asked, then prefers the lower p99', () => {
    const grid = [
      sweepCell(64, 1024, 900, 500, 0.95),
      sweepCell(128, 8192, 700, 450, 0.9505),
      sweepCell(256, 2048, 300, 300, 0.5),
    ];
    const { best, reason } = chooseBest(grid, 'hit-rate');
    expect([best.window, best.prefixLength]).toEqual([128, 8192]);
    expect(reason).toContain('highest token hit rate');
    expect(reason).toContain(
      'Trade-off: prefix_match window=256 prefix-length=2048 has a lower TTFT p99 (300 ms vs 700 ms)',
    );
  });

  it('says when other settings give exactly the same results', () => {
    const grid = [
      sweepCell(64, 2048, 200, 80, 0.9),
      sweepCell(128, 2048, 200, 80, 0.9),
      sweepCell(64, 4096, 250, 90, 0.9),
    ];
    const { best, reason } = chooseBest(grid, 'ttft-p99');
    expect([best.window, best.prefixLength]).toEqual([64, 2048]);
    expect(reason).toContain(
      'prefix_match window=128 prefix-length=2048 give the same results, so the choice among them does not matter',
    );
    expect(chooseBest([grid[0]!, grid[2]!], 'ttft-p99').reason).not.toContain('same results');
  });

  it('maximises throughput, and minimises TTFT p50 under a hit-rate constraint', () => {
    const fast = sweepCell(64, 1024, 900, 500, 0.8);
    fast.result.throughputTokPerS = 9000;
    fast.result.ttftMs.p50 = 100;
    const cached = sweepCell(128, 1024, 800, 450, 0.95);
    cached.result.throughputTokPerS = 8000;
    cached.result.ttftMs.p50 = 300;
    const grid = [fast, cached];
    const t = chooseBest(grid, 'throughput');
    expect(t.best).toBe(fast);
    expect(t.reason).toContain('highest throughput, 9,000 tok/s, of 2 settings');
    expect(chooseBest(grid, 'ttft-p50').best).toBe(fast);
    // Within 5 points of the best hit rate (95%): only the cached cell qualifies.
    const c = chooseBest(grid, 'ttft-p50', 5);
    expect(c.best).toBe(cached);
    expect(c.reason).toMatch(
      /^Constraint: hit rate within 5 points of the best \(95\.0% at prefix_match window=128 prefix-length=1024\); 1 of 2 settings qualify\./,
    );
    expect(chooseBest(grid, 'ttft-p50', 20).best).toBe(fast);
  });

  it('compares the chosen cell with the reference and the current setting', () => {
    const best = sweepCell(64, 1024, 500, 300, 0.9);
    const current = sweepCell(512, 8192, 900, 600, 0.7);
    const ref = sweepCell(256, 4096, 400, 250, 0.9).result;
    ref.policy = 'cache_aware';
    const notes = sweepNotes(best, ref, 'ttft-p99', current);
    expect(notes).toContain(
      'The recommended default, cache_aware with its default options, gets TTFT p99 400 ms',
    );
    expect(notes).toContain('better than the chosen setting');
    expect(notes).toContain(
      'The current setting, prefix_match window=512 prefix-length=8192, gets TTFT p99 900 ms (hit rate 70.0%): behind it.',
    );
  });

  it('rejects an empty grid', () => {
    expect(() => chooseBest([], 'ttft-mean')).toThrow(/empty/);
  });
});

describe('ECDF points', () => {
  it('is monotone, ends at 1 and keeps the extremes while capping the size', () => {
    const values = Array.from({ length: 1001 }, (_, i) => (i * 7919) % 1001);
    const pts = ecdfPoints(values, 100);
    expect(pts.length).toBeLessThanOrEqual(101);
    expect(pts[0]).toEqual({ x: 0, y: 1 / 1001 });
    expect(pts.at(-1)).toEqual({ x: 1000, y: 1 });
    for (let i = 1; i < pts.length; i++) {
      expect(pts[i]!.x).toBeGreaterThanOrEqual(pts[i - 1]!.x);
      expect(pts[i]!.y).toBeGreaterThan(pts[i - 1]!.y);
    }
    expect(ecdfPoints([])).toEqual([]);
  });
});

function assertSelfContained(html: string): void {
  expect(html.startsWith('<!doctype html>')).toBe(true);
  expect(html).not.toMatch(/<script/i);
  expect(html).not.toMatch(/<link/i);
  expect(html).not.toMatch(/\b(src|href)\s*=\s*["']?https?:/i);
  expect(html).not.toMatch(/@import|url\(\s*["']?https?:/i);
}

describe('HTML', () => {
  it('renders a self-contained page with inline SVG charts for every policy', async () => {
    const report = three();
    const samples = report.policies.map((p, i) => ({
      policy: p.policy,
      ttftMs: [7400, 1290 + i * 100, 1300 + i * 100, 2740],
    }));
    const html = await renderRunHtml(report, samples);
    assertSelfContained(html);
    expect(html.match(/<svg/g)?.length).toBe(4);
    expect(html).toContain('TTFT distribution per policy');
    expect(html).toContain('Token hit rate per policy');
    expect(html).toContain('Per-rank load');
    for (const name of [
      'round_robin',
      'total_tokens',
      'prefix_match (window=256, prefixLength=4096)',
    ])
      expect(html).toContain(name);
    // The hit-rate bars are labelled with their values.
    expect(html).toContain('90.0%');
  });

  it('adds the per-request TTFT chart when arrival-ordered samples are given and few enough', async () => {
    const { ttftTimelineSpec, MAX_TIMELINE_REQUESTS } = await import('../src/report/charts.ts');
    const report = three();
    const samples = report.policies.map((p) => ({
      policy: p.policy,
      ttftMs: [7400, 1290],
      ttftByArrivalMs: [7400, 1290],
    }));
    const html = await renderRunHtml(report, samples);
    expect(html.match(/<svg/g)?.length).toBe(5);
    expect(html).toContain('TTFT of each request, in arrival order');
    const spec = ttftTimelineSpec(report.policies, samples) as {
      data: { values: { request: number; ttftMs: number }[] };
    };
    expect(spec.data.values.slice(0, 2)).toEqual([
      { policy: 'round_robin', request: 1, ttftMs: 7400 },
      { policy: 'round_robin', request: 2, ttftMs: 1290 },
    ]);
    // Above MAX_TIMELINE_REQUESTS the chart no longer disappears: it bins by arrival time
    // (p50 and p99 per bin) and marks the cluster's events.
    const n = MAX_TIMELINE_REQUESTS + 1;
    const many = Array.from({ length: n }, (_, k) => (k < n / 2 ? 100 : 900));
    const arrivals = Array.from({ length: n }, (_, k) => k * 10);
    const binned = ttftTimelineSpec(
      report.policies,
      [{ policy: 'round_robin', ttftMs: many, ttftByArrivalMs: many, arrivalMs: arrivals }],
      [{ atMs: 5000, label: 'rank 3 down' }],
    ) as unknown as {
      title: string;
      layer: { data: { values: { stat?: string; ttftMs?: number; label?: string }[] } }[];
    };
    expect(binned.title).toMatch(/TTFT over time: p50 and p99/);
    const points = binned.layer[0]!.data.values;
    expect(points.filter((v) => v.stat === 'p50').length).toBe(60);
    expect(points.some((v) => v.ttftMs === 100) && points.some((v) => v.ttftMs === 900)).toBe(true);
    expect(binned.layer[1]!.data.values).toEqual([{ timeS: 5, label: 'rank 3 down' }]);
    // Policy switches are marked too, in their own colour, beside the cluster's events.
    const switched = ttftTimelineSpec(
      report.policies,
      [{ policy: 'round_robin', ttftMs: many, ttftByArrivalMs: many, arrivalMs: arrivals }],
      [
        { atMs: 5000, label: 'rank 3 down', kind: 'cluster' },
        { atMs: 7000, label: 'switch to prefix_match window=64', kind: 'policy' },
      ],
    ) as unknown as {
      layer: { mark: { type: string; color?: string }; data: { values: object[] } }[];
    };
    const rules = switched.layer.filter((l) => l.mark.type === 'rule');
    expect(rules.map((l) => [l.mark.color, l.data.values])).toEqual([
      ['#c00', [{ timeS: 5, label: 'rank 3 down' }]],
      ['#1f5fbf', [{ timeS: 7, label: 'switch to prefix_match window=64' }]],
    ]);
    // The per-request chart places a marker before the first request arriving after it.
    const few = ttftTimelineSpec(
      report.policies,
      [
        {
          policy: 'round_robin',
          ttftMs: [5, 6, 7],
          ttftByArrivalMs: [5, 6, 7],
          arrivalMs: [0, 10, 20],
        },
      ],
      [{ atMs: 15, label: 'switch to total_tokens', kind: 'policy' }],
    ) as unknown as { layer: { mark: { type: string }; data: { values: object[] } }[] };
    expect(few.layer.find((l) => l.mark.type === 'rule')!.data.values).toEqual([
      { request: 2.5, label: 'switch to total_tokens' },
    ]);
    // Too many requests and no arrival times to bin by: nothing honest to draw.
    expect(
      ttftTimelineSpec(report.policies, [
        { policy: 'round_robin', ttftMs: many, ttftByArrivalMs: many },
      ]),
    ).toBeNull();
    expect(ttftTimelineSpec(report.policies, [{ policy: 'round_robin', ttftMs: [1] }])).toBeNull();
  });

  it('escapes names so a scenario cannot inject markup', async () => {
    const r = three();
    r.scenario = '<img onerror=x>';
    const html = await renderRunHtml(
      r,
      r.policies.map((p) => ({ policy: p.policy, ttftMs: [1] })),
    );
    expect(html).not.toContain('<img');
    expect(html).toContain('&#60;img onerror=x&#62;');
  });

  it('renders the sweep as heatmaps with the best cell outlined', async () => {
    const grid = [
      sweepCell(64, 1024, 900, 500, 0.8),
      sweepCell(128, 1024, 800, 450, 0.7),
      sweepCell(64, 2048, 950, 520, 0.85),
      sweepCell(128, 2048, 1000, 530, 0.9),
    ];
    const html = await renderSweepHtml(sweepReport(grid, grid[1]!, 'lowest p99'));
    assertSelfContained(html);
    expect(html.match(/<svg/g)?.length).toBe(4);
    expect(html).toContain('prefix_match sweep: TTFT p99 (ms)');
    expect(html).toContain('<tr class="best"><td>prefix_match</td><td>128</td><td>1024</td>');
    // Heatmap cells are labelled with their values.
    expect(html).toContain('>800<');
  });

  it('shows the current and reference settings in the HTML table, as the text table does', async () => {
    const grid = [sweepCell(64, 1024, 900, 500, 0.8), sweepCell(128, 1024, 800, 450, 0.7)];
    const current = { method: 'round_robin', options: {}, result: policyReport('round_robin') };
    const report = {
      ...sweepReport(grid, grid[1]!),
      current,
      reference: policyReport('cache_aware', { ttftMs: { p50: 70, p90: 600, p99: 700, mean: 80 } }),
    };
    const html = await renderSweepHtml(report);
    expect(html).toMatch(/<tr class="extra"><td>round_robin<\/td>.*<td>current<\/td><\/tr>/);
    expect(html).toMatch(
      /<tr class="extra"><td>cache_aware \(defaults\)<\/td>.*<td>700<\/td>.*<td>reference<\/td><\/tr>/,
    );
    expect(html).toMatch(/<tr class="best"><td>prefix_match<\/td><td>128<\/td>.*<td>best<\/td>/);
  });
});

describe('TTFT chart axis', () => {
  it('switches to a log axis when TTFTs span more than 20x', async () => {
    const { ttftCdfSpec } = await import('../src/report/charts.ts');
    const policies = [policyReport('round_robin')];
    type Cdf = {
      layer: {
        encoding: { x: { scale?: { type?: string; domain?: number[] }; title: string } };
        data: { values: { stat?: string; ttftMs: number }[] };
      }[];
    };
    const wide = ttftCdfSpec(policies, [
      { policy: 'round_robin', ttftMs: [20, 100, 30000] },
    ]) as unknown as Cdf;
    const x = wide.layer[0]!.encoding.x;
    expect(x.scale?.type).toBe('log');
    expect(x.title).toContain('log scale');
    // The axis is fitted to the data, not a fixed 10-10,000 ms.
    expect(x.scale?.domain).toEqual([20, 30000]);
    // p50 and p99 of each policy are marked on the curve.
    expect(wide.layer[1]!.data.values.map((v) => v.stat)).toEqual(['p50', 'p99']);
    const narrow = ttftCdfSpec(policies, [
      { policy: 'round_robin', ttftMs: [1290, 7400] },
    ]) as unknown as Cdf;
    expect(narrow.layer[0]!.encoding.x.scale?.type).toBeUndefined();
    expect(narrow.layer[0]!.encoding.x.scale?.domain).toEqual([0, 7400]);
  });

  it('titles a replay by its trace file', () => {
    const r = runReport([policyReport('round_robin')]);
    r.command = 'replay';
    r.scenario = 'replay';
    r.scenarioOptions = { file: 'trace.jsonl' };
    expect(renderRunTable(r).split('\n')[0]).toBe(
      'replay of trace.jsonl, 2 ranks, profile seed-qwen3-moe-dp16, seed 1',
    );
  });
});

describe('chart legibility', () => {
  /** The inline SVG whose title contains `title`. */
  const svgTitled = (html: string, title: string) =>
    html.split('<svg').find((s) => s.includes(title)) ?? '';

  it('policies at one spot of the trade-off chart get their labels on separate lines', async () => {
    const same = { hitRate: 0.94, ttftMs: { p50: 80, p90: 150, p99: 200, mean: 90 } };
    const report = runReport([
      policyReport('round_robin', {
        hitRate: 0.7,
        ttftMs: { p50: 200, p90: 500, p99: 700, mean: 250 },
      }),
      policyReport('prefix_match', same),
      policyReport('cache_aware', same),
    ]);
    const samples = report.policies.map((p) => ({ policy: p.policy, ttftMs: [80, 200] }));
    const svg = svgTitled(await renderRunHtml(report, samples), 'Hit rate vs TTFT p99');
    // The point labels (11px; the legend's are 10px), by name: their y positions.
    const ys = new Map(
      [
        ...svg.matchAll(
          /translate\(([\d.]+),([\d.]+)\)"[^>]*font-size="11px"[^>]*>([a-z_]+)<\/text>/g,
        ),
      ].map((m) => [m[3], Number(m[2])]),
    );
    ys.delete('policy'); // the legend's title
    expect([...ys.keys()].sort()).toEqual(['cache_aware', 'prefix_match', 'round_robin']);
    expect(Math.abs(ys.get('prefix_match')! - ys.get('cache_aware')!)).toBeGreaterThanOrEqual(12);
  });

  it('the TTFT-over-time legend draws p50 and p99 as visible strokes', async () => {
    const { ttftTimelineSpec } = await import('../src/report/charts.ts');
    const report = three();
    const { MAX_TIMELINE_REQUESTS } = await import('../src/report/charts.ts');
    const n = MAX_TIMELINE_REQUESTS + 1;
    const samples = report.policies.map((p) => ({
      policy: p.policy,
      ttftMs: [1000, 2000],
      ttftByArrivalMs: Array.from({ length: n }, (_, i) => 1000 + (i % 7)),
      arrivalMs: Array.from({ length: n }, (_, i) => i * 10),
    }));
    const spec = ttftTimelineSpec(report.policies, samples) as unknown as {
      layer: { encoding?: { strokeDash?: { legend?: Record<string, unknown> } } }[];
    };
    const legend = spec.layer.find((l) => l.encoding?.strokeDash)?.encoding?.strokeDash?.legend;
    expect(legend).toMatchObject({ symbolType: 'stroke', symbolFillColor: 'transparent' });
    const svg = svgTitled(await renderRunHtml(report, samples), 'TTFT over time');
    const entry = svg.slice(svg.indexOf("titled 'percentile'"));
    expect(entry).toMatch(/role-legend-symbol[^>]*><path [^>]*stroke="#444"/);
  });

  it('a table wider than the page scrolls in its own box, with headers that wrap', async () => {
    const html = await renderRunHtml(three(), []);
    expect(html).toContain('<div class="table"><table>');
    expect(html).toMatch(/\.table \{ overflow-x: auto; \}/);
    expect(html).toMatch(/th \{ white-space: normal;/);
  });

  it('sweep heatmaps: the hit-rate legend in percent, white figures on dark cells', async () => {
    const cells = [64, 128, 256].map((window, i) =>
      sweepCell(window, 4096, 200 + i, 110, 0.9 + i * 0.01),
    );
    const html = await renderSweepHtml(sweepReport(cells, cells[0]!));
    const hit = svgTitled(html, 'token hit rate (higher is better)');
    expect(hit).toContain('>100%</text>');
    expect(hit).not.toContain('>1.0</text>');
    // 90-92% sit in the darkest third of the 0-100% scale: their figures are white.
    expect(hit).toMatch(/fill="white"[^>]*>9[012]\.0%<\/text>/);
  });
});
