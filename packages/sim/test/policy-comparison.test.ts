import { mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { oneBigCacheBound } from '../src/compare/bound.ts';
import { keysMoved } from '../src/compare/keys-moved.ts';
import { main } from '../src/compare/main.ts';
import {
  judgeTargets,
  type PolicyComparison,
  type PolicyRow,
  runPolicyComparison,
  type ScenarioResult,
} from '../src/compare/policy-comparison.ts';
import { recommend } from '../src/compare/recommend.ts';
import { renderHtml, renderMarkdown } from '../src/compare/render.ts';
import { getProfile } from '../src/cost/profiles.ts';
import type { RequestRecord } from '../src/metrics/types.ts';
import { simulatePlan } from '../src/simulate.ts';
import { buildWorkload } from '../src/workloads/registry.ts';
import type { WorkloadPlan } from '../src/workloads/types.ts';

const rec = (sessionKey: string, arrivalMs: number, rank: number): RequestRecord => ({
  id: 0,
  clientId: 0,
  sessionKey,
  arrivalMs,
  rank,
  reason: 'x',
  inputTokens: 1,
  cachedTokens: 0,
  outputTokens: 1,
  queueMs: 0,
  ttftMs: 1,
  endMs: arrivalMs + 1,
  retries: 0,
});

describe('keysMoved', () => {
  it('compares each session last rank before the change with its first rank after it', () => {
    const records = [
      rec('a', 10, 1),
      rec('a', 50, 2), // last before 100: rank 2
      rec('a', 150, 2), // first after: rank 2 -> stays
      rec('a', 200, 5),
      rec('b', 20, 3),
      rec('b', 120, 4), // moved, rank 3 went away: orphaned
      rec('c', 30, 0),
      rec('c', 130, 6), // moved although rank 0 stayed: collateral
      rec('d', 40, 1), // no request after: not counted
      rec('e', 160, 1), // no request before: not counted
    ];
    expect(keysMoved(records, 100, [3])).toEqual({
      atMs: 100,
      sessions: 3,
      moved: 2,
      fraction: 2 / 3,
      orphaned: 1,
      collateral: 1,
    });
    expect(keysMoved([], 100).fraction).toBe(0);
  });
});

describe('oneBigCacheBound', () => {
  const single = (inputs: number[][]): WorkloadPlan => ({
    scenario: 't',
    mode: 'open',
    ranks: 1,
    clients: [],
    requests: inputs.map((ids, i) => ({
      id: i,
      clientId: i,
      inputIds: Uint32Array.from(ids),
      outputTokens: 1,
      arrivalMs: i,
      sessionKey: String(i),
    })),
    events: [],
  });

  it('counts the tokens a single cache would have found, in arrival order', () => {
    const b = oneBigCacheBound(
      single([
        [1, 2, 3, 4],
        [1, 2, 3, 9],
        [1, 2, 7],
      ]),
      1000,
    );
    expect(b.inputTokens).toBe(11);
    expect(b.cachedTokens).toBe(3 + 2);
    expect(b.hitRate).toBeCloseTo(5 / 11);
  });

  it('loses hits when capacity is short, and no policy beats it on the replay', () => {
    const small = oneBigCacheBound(
      single([
        [1, 2, 3, 4],
        [5, 6, 7, 8],
        [1, 2, 3, 4],
      ]),
      5,
    );
    expect(small.cachedTokens).toBeLessThan(4);
    const plan = buildWorkload('replay', { limit: 300 }, 1);
    const profile = getProfile('h200-llama-3.1-8b');
    const bound = oneBigCacheBound(plan, profile.kvCapacityTokens * plan.ranks);
    for (const method of ['prefix_match', 'cache_aware']) {
      const run = simulatePlan(plan, { policy: { method }, profile, seed: 1 });
      expect(run.summary.hitRate).toBeLessThanOrEqual(bound.hitRate + 1e-9);
    }
  });
});

describe('policy comparison report', () => {
  it('writes the same report on one thread and on worker threads', async () => {
    const opts = { quick: true, methods: ['cache_aware'] };
    const serial = await runPolicyComparison({ ...opts, workers: 1 });
    const parallel = await runPolicyComparison({ ...opts, workers: 2 });
    expect(renderMarkdown(parallel)).toBe(renderMarkdown(serial));
    expect(parallel).toEqual(serial);
  }, 180_000);

  it('refuses a --jobs that is not an integer >= 1', async () => {
    let err = '';
    const io = {
      stdout: { write: () => true },
      stderr: {
        write: (s: string) => {
          err += s;
          return true;
        },
      },
      cwd: process.cwd(),
    };
    expect(await main(['--jobs', '0'], io)).toBe(2);
    expect(err).toContain('--jobs must be an integer >= 1');
  });

  it('runs every scenario, judges the targets and renders Markdown and HTML', async () => {
    const c = await runPolicyComparison({
      quick: true,
      methods: ['round_robin', 'total_tokens', 'prefix_match', 'cache_aware'],
    });
    expect(c.scenarios.map((s) => s.scenario)).toEqual(
      expect.arrayContaining([
        'hot-prefix',
        'rank-failure',
        'scale-out',
        'agentic',
        'seed-sequential',
        'replay',
      ]),
    );
    expect(c.scenarios.filter((s) => s.scenario === 'replay').map((s) => s.id)).toContain(
      'replay-x8',
    );
    for (const s of c.scenarios) expect(s.rows.map((r) => r.policy)).toHaveLength(4);
    const scale = c.scenarios.find((s) => s.id === 'scale-out')!;
    expect(scale.rows[0]!.keysMoved).toHaveLength(1);
    const failure = c.scenarios.find((s) => s.id === 'rank-failure')!;
    expect(failure.rows[0]!.keysMoved).toHaveLength(2);
    expect(c.targets.length).toBeGreaterThan(5);
    expect(c.targets.every((t) => t.method === 'cache_aware')).toBe(true);
    expect(judgeTargets(c)).toEqual(c.targets);
    // No per-scenario tuning: every row is the method's plain defaults on that scenario's plan.
    const profile = getProfile('h200-llama-3.1-8b');
    for (const s of c.scenarios.filter((x) => ['hot-prefix', 'scale-out'].includes(x.id))) {
      const plan = buildWorkload(s.scenario, s.options, 1);
      const run = simulatePlan(plan, { policy: { method: 'cache_aware' }, profile, seed: 1 });
      const r = s.rows.find((x) => x.policy === 'cache_aware')!;
      expect([r.hitRate, r.ttftP99, r.imbalance]).toEqual([
        run.summary.hitRate,
        run.summary.ttftMs.p99,
        run.summary.imbalance,
      ]);
    }
    const md = renderMarkdown(c);
    // The page opens with the plain recommendation, ahead of the internal targets table.
    expect(md.indexOf('## Which policy for which workload and load')).toBeGreaterThan(0);
    expect(md.indexOf('## Which policy for which workload and load')).toBeLessThan(
      md.indexOf('## Targets'),
    );
    expect(md).toContain('## Targets');
    expect(md).toContain('One-big-cache bound');
    expect(md).toMatch(/\| (met|\*\*missed\*\*) \|/);
    const html = await renderHtml(c);
    expect(html).toContain('<svg');
    expect(html).not.toMatch(/<script[^>]+src=/);
    // The log-scale TTFT chart draws points (bars on a log scale rendered empty).
    expect(html).toMatch(/class="mark-symbol[^"]*"[^>]*>\s*<path[^>]* d="M/);
    // The HTML carries the same findings as the Markdown ("see findings" must resolve).
    expect(html).toContain('<h2>Findings</h2>');
    expect(html).toContain('<b>Recommended default: <code>cache_aware</code>.</b>');
    // Load curves: each scenario at every multiplier, every load method, crossovers named.
    expect(c.loadCurves.map((l) => l.id)).toEqual(['load-hot-prefix', 'load-agentic']);
    for (const l of c.loadCurves) {
      expect(l.points.map((p) => p.multiplier)).toEqual([0.5, 1, 2, 4]);
      for (const p of l.points) expect(p.rows.length).toBe(4);
      expect(
        l.best
          .filter((b) => b.metric === 'ttftP99')
          .flatMap((b) => b.multipliers)
          .sort(),
      ).toEqual([0.5, 1, 2, 4]);
    }
    const loadText = renderMarkdown(c);
    expect(loadText).toContain('## Across offered load');
    expect(loadText).toMatch(/Best TTFT p99: `\w+` at x/);
  }, 120_000);

  it('rejects unknown methods with the valid names (exit 2)', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'kvroute-compare-'));
    const err: string[] = [];
    const io = {
      stdout: { write: () => true },
      stderr: { write: (s: string) => err.push(s) },
      cwd: dir,
    };
    expect(await main(['--methods', 'nope', '--out-dir', dir], io)).toBe(2);
    expect(await main(['--bogus'], io)).toBe(2);
    expect(err.join('')).toMatch(/unknown method 'nope'.*cache_aware/);
    expect(() => readFileSync(join(dir, 'policy-comparison.md'))).toThrow();
  });
});

/** A row with only the fields the targets read set; the rest neutral. */
const prow = (policy: string, f: Partial<PolicyRow> = {}): PolicyRow => ({
  policy,
  requests: 100,
  failed: 0,
  retried: 0,
  hitRate: 0.5,
  ttftP50: 100,
  ttftP99: 1000,
  ttftMean: 100,
  steadyP50: 100,
  steadyMean: 100,
  imbalance: 1,
  maxBusy: 0.5,
  keysMoved: [],
  reasons: {},
  ...f,
});

const scen = (
  id: string,
  scenario: string,
  rows: PolicyRow[],
  extra: Partial<ScenarioResult> = {},
) =>
  ({
    id,
    title: id,
    scenario,
    options: {},
    ranks: 16,
    requests: 100,
    events: [],
    rows,
    ...extra,
  }) as ScenarioResult;

const moved = (fraction: number) => ({
  atMs: 1,
  sessions: 100,
  moved: Math.round(fraction * 100),
  fraction,
  orphaned: 0,
  collateral: 0,
});

describe('judgeTargets', () => {
  // consistent_hash sits at or just inside every bound, cache_aware just outside it.
  const c: PolicyComparison = {
    profile: 'p',
    seed: 1,
    methods: ['round_robin', 'total_tokens', 'prefix_match', 'consistent_hash', 'cache_aware'],
    quick: false,
    busySpeedup: 2,
    busySearch: [],
    loadCurves: [],
    targets: [],
    scenarios: [
      scen('hot-prefix', 'hot-prefix', [
        prow('prefix_match', { ttftP99: 1000, hitRate: 0.8 }),
        prow('consistent_hash', { ttftP99: 500, hitRate: 0.73 }),
        prow('cache_aware', { ttftP99: 501, hitRate: 0.71 }),
      ]),
      scen('seed-sequential', 'seed-sequential', [
        prow('prefix_match', { steadyP50: 100 }),
        prow('consistent_hash', { steadyP50: 105 }),
        prow('cache_aware', { steadyP50: 105.5 }),
      ]),
      scen(
        'replay-x2',
        'replay',
        [
          prow('round_robin', { ttftP99: 900 }),
          prow('total_tokens', { ttftP99: 800 }),
          prow('prefix_match', { ttftP99: 1000, hitRate: 0.3, imbalance: 1.2 }),
          prow('consistent_hash', { ttftP99: 790, hitRate: 0.286 }),
          prow('cache_aware', { ttftP99: 801, hitRate: 0.284 }),
        ],
        { bound: { capacityTokens: 1, inputTokens: 1, cachedTokens: 0.3, hitRate: 0.3 } },
      ),
      scen(
        'scale-out',
        'scale-out',
        [
          prow('consistent_hash', { keysMoved: [moved(0.125)] }),
          prow('cache_aware', { keysMoved: [moved(0.13)] }),
        ],
        { ranks: 8, options: { toRanks: 12 } },
      ),
    ],
  };
  const targets = judgeTargets(c);
  const get = (method: string, prefix: string) => {
    const t = targets.find((x) => x.method === method && x.target.startsWith(prefix));
    if (!t) throw new Error(`no target ${prefix} for ${method}`);
    return t;
  };

  it('judges each load-aware target per new method, met inside its bound, missed just outside', () => {
    expect(targets.map((t) => t.method)).not.toContain('prefix_match');
    for (const prefix of [
      'hot-prefix:',
      'seed-sequential:',
      'replay-x2: token hit rate',
      'replay-x2: TTFT p99 >= 20%',
      'replay-x2: TTFT p99 never worse',
      'scale-out:',
    ]) {
      expect(get('consistent_hash', prefix).met, prefix).toBe(true);
      expect(get('cache_aware', prefix).met, prefix).toBe(false);
    }
    expect(targets).toHaveLength(12);
  });

  it('says why each missed target was missed, from the numbers', () => {
    expect(get('cache_aware', 'hot-prefix:').why).toMatch(/too few ranks.*cold prefills/);
    expect(get('cache_aware', 'hot-prefix:').measured).toContain('0.50x');
    expect(get('cache_aware', 'replay-x2: TTFT p99 >= 20%').why).toMatch(/imbalance 1\.20/);
    expect(get('cache_aware', 'replay-x2: TTFT p99 never worse').why).toBe(
      'worse than total_tokens',
    );
    expect(get('cache_aware', 'scale-out:').why).toMatch(/33\.3%/);
    for (const t of targets) expect(t.why.length).toBeGreaterThan(10);
  });

  it('judges no compression target on the replay at its own pace', () => {
    const own = {
      ...c,
      scenarios: c.scenarios.map((s) => (s.id === 'replay-x2' ? { ...s, id: 'replay-x1' } : s)),
    };
    expect(judgeTargets(own).some((t) => t.target.startsWith('replay-x1: TTFT p99 >= 20%'))).toBe(
      false,
    );
  });
});

describe('recommend', () => {
  it('picks the lowest TTFT p99, gives 5% ties to the higher hit rate, and names each load range', () => {
    const scenarios = [
      scen('hot-prefix', 'hot-prefix', [
        prow('prefix_match', { ttftP99: 1000, hitRate: 0.9 }),
        prow('consistent_hash', { ttftP99: 500, hitRate: 0.7 }),
        prow('cache_aware', { ttftP99: 520, hitRate: 0.8 }),
      ]),
      scen('replay-x8', 'replay', [
        prow('round_robin', { ttftP99: 900, hitRate: 0.1 }),
        prow('cache_aware', { ttftP99: 400, hitRate: 0.3 }),
      ]),
    ];
    const pt = (multiplier: number, p99: Record<string, number>) => ({
      multiplier,
      rateRps: multiplier * 2,
      rows: Object.entries(p99).map(([policy, ttftP99]) => ({
        policy,
        ttftP50: 1,
        ttftP99,
        throughputRps: 1,
      })),
    });
    const curve = {
      id: 'load-x',
      title: 'X against load',
      baseRateRps: 2,
      crossovers: [],
      best: [],
      points: [
        pt(0.5, { a: 10, b: 20 }),
        pt(1, { a: 11, b: 20 }),
        pt(2, { a: 50, b: 30 }),
        pt(4, { a: 90, b: 60 }),
      ],
    };
    const r = recommend(scenarios, [curve]);
    // 520 is within 5% of 500 and cache_aware holds more of the cache.
    expect(r[0]).toMatchObject({ method: 'cache_aware' });
    expect(r[0]!.why).toContain('next best `consistent_hash` 500 ms');
    expect(r[1]).toMatchObject({ method: 'cache_aware', load: "x8 the trace's pace" });
    expect(r.slice(2).map((x) => [x.method, x.load])).toEqual([
      ['a', 'x0.5-x1 (1-2 req/s)'],
      ['b', 'x2-x4 (4-8 req/s)'],
    ]);
  });
});
