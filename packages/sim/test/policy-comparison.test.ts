import { mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { oneBigCacheBound } from '../src/compare/bound.ts';
import { keysMoved } from '../src/compare/keys-moved.ts';
import { main } from '../src/compare/main.ts';
import { judgeTargets, runPolicyComparison } from '../src/compare/policy-comparison.ts';
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
  it('runs every scenario, judges the targets and renders Markdown and HTML', async () => {
    const c = runPolicyComparison({
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
    const md = renderMarkdown(c);
    expect(md).toContain('## Targets (issue 5)');
    expect(md).toContain('One-big-cache bound');
    expect(md).toMatch(/\| (met|\*\*missed\*\*) \|/);
    const html = await renderHtml(c);
    expect(html).toContain('<svg');
    expect(html).not.toMatch(/<script[^>]+src=/);
  });

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
