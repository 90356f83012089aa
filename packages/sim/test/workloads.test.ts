import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { buildWorkload, scenarioNames } from '../src/workloads/registry.ts';
import type { WorkloadRequest } from '../src/workloads/types.ts';

const sharedPrefixLen = (a: ArrayLike<number>, b: ArrayLike<number>) => {
  let i = 0;
  while (i < a.length && i < b.length && a[i] === b[i]) i++;
  return i;
};
/** Order-sensitive digest of every request's tokens, for cheap equality of large plans. */
const digest = (reqs: WorkloadRequest[]) =>
  reqs.map((r) => {
    const ids = r.inputIds;
    let h = ids.length;
    for (let i = 0; i < ids.length; i++) h = (Math.imul(h, 31) + ids[i]!) | 0;
    return h;
  });
const all = (plan: { clients: WorkloadRequest[][]; requests: WorkloadRequest[] }) => [
  ...plan.clients.flat(),
  ...plan.requests,
];

describe('scenario registry', () => {
  it('lists the built-in scenarios and rejects unknown names and options with the valid ones', () => {
    expect(scenarioNames()).toEqual(
      expect.arrayContaining([
        'seed-sequential',
        'seed-concurrent',
        'agentic',
        'shared-prefix',
        'replay',
      ]),
    );
    expect(() => buildWorkload('nope', {}, 1)).toThrow(/unknown scenario 'nope'.*seed-sequential/);
    expect(() => buildWorkload('seed-sequential', { request: 3 }, 1)).toThrow(
      /unknown option 'request'.*requests/,
    );
    expect(() => buildWorkload('seed-sequential', { requests: 0 }, 1)).toThrow(
      /requests must be an integer >= 1/,
    );
    expect(() =>
      buildWorkload('seed-sequential', { turnMinTokens: 9, turnMaxTokens: 3 }, 1),
    ).toThrow(/turnMaxTokens \(3\) must be >= turnMinTokens/);
  });

  it('builds every scenario identically from the same seed and differently from another', () => {
    const small: Record<string, Record<string, unknown>> = {
      'seed-sequential': { requests: 5 },
      'seed-concurrent': { requestsPerAgent: 5 },
      agentic: { sessions: 5 },
      'shared-prefix': { groups: 3, promptsPerGroup: 2 },
      replay: { limit: 20 },
    };
    for (const [name, opts] of Object.entries(small)) {
      const a = all(buildWorkload(name, opts, 7));
      const b = all(buildWorkload(name, opts, 7));
      const c = all(buildWorkload(name, opts, 8));
      expect(a.length).toBeGreaterThan(0);
      expect(digest(a)).toEqual(digest(b));
      expect(a.map((r) => [r.thinkMs, r.arrivalMs, r.outputTokens])).toEqual(
        b.map((r) => [r.thinkMs, r.arrivalMs, r.outputTokens]),
      );
      expect(digest(a)).not.toEqual(digest(c));
      for (const r of a) {
        let ok = true;
        for (const t of r.inputIds) if (t < 1 || t >= 30000) ok = false;
        expect(ok).toBe(true);
      }
    }
  });
});

describe('seed scenarios', () => {
  it('seed-sequential: 30 requests on 16 ranks sharing exactly the 22,651-token prefix', () => {
    const plan = buildWorkload('seed-sequential', {}, 1);
    expect(plan.mode).toBe('closed');
    expect(plan.ranks).toBe(16);
    const reqs = plan.clients[0]!;
    expect(reqs).toHaveLength(30);
    for (let i = 1; i < reqs.length; i++) {
      expect(sharedPrefixLen(reqs[0]!.inputIds, reqs[i]!.inputIds)).toBe(22_651);
      expect(reqs[i]!.thinkMs).toBeGreaterThan(0);
    }
  });

  it('seed-sequential accumulate=true carries earlier turns and replies', () => {
    const reqs = buildWorkload('seed-sequential', { accumulate: true, requests: 5 }, 1).clients[0]!;
    for (let i = 1; i < reqs.length; i++) {
      const prev = reqs[i - 1]!;
      const carried = [...prev.inputIds, ...prev.outputIds!];
      expect([...reqs[i]!.inputIds.subarray(0, carried.length)]).toEqual(carried);
      expect(reqs[i]!.inputIds.length).toBeGreaterThan(carried.length);
    }
  });

  it('seed-concurrent: 4 agents, histories grow by reply + tool output each turn', () => {
    const plan = buildWorkload('seed-concurrent', {}, 1);
    expect(plan.clients).toHaveLength(4);
    expect(plan.durationMs).toBeGreaterThan(plan.warmupMs!);
    const agent = plan.clients[1]!;
    const first = plan.clients[0]![0]!;
    expect(sharedPrefixLen(first.inputIds, agent[0]!.inputIds)).toBeGreaterThanOrEqual(22_651);
    for (let i = 1; i < 20; i++) {
      const prev = agent[i - 1]!;
      expect(agent[i]!.sessionKey).toBe(prev.sessionKey);
      expect(agent[i]!.inputIds.length).toBeGreaterThan(prev.inputIds.length + prev.outputTokens);
      expect([
        ...agent[i]!.inputIds.subarray(
          prev.inputIds.length,
          prev.inputIds.length + prev.outputTokens,
        ),
      ]).toEqual([...prev.outputIds!]);
    }
    // Session 2 starts over from the shared prefix.
    expect(agent[20]!.sessionKey).not.toBe(agent[19]!.sessionKey);
    expect(agent[20]!.inputIds.length).toBeLessThan(22_651 + 200);
  });
});

describe('agentic and shared-prefix', () => {
  it('agentic: Poisson session starts, Zipf tenants whose sessions share the tenant prefix', () => {
    const plan = buildWorkload('agentic', { sessions: 60 }, 3);
    const starts = plan.clients.map((c) => c[0]!.thinkMs!);
    expect(starts).toEqual([...starts].sort((a, b) => a - b));
    const byTenant = new Map<string, number>();
    for (const c of plan.clients)
      byTenant.set(c[0]!.tenant!, (byTenant.get(c[0]!.tenant!) ?? 0) + 1);
    const counts = [...byTenant.values()].sort((a, b) => b - a);
    expect(counts[0]!).toBeGreaterThan(60 / 8); // the top tenant beats a uniform share
    const t0 = plan.clients.filter((c) => c[0]!.tenant === 'tenant-0');
    expect(sharedPrefixLen(t0[0]![0]!.inputIds, t0[1]![0]!.inputIds)).toBeGreaterThanOrEqual(4000);
  });

  it('shared-prefix: groups x prompts, one system prompt per group, sorted arrivals', () => {
    const plan = buildWorkload(
      'shared-prefix',
      { groups: 4, promptsPerGroup: 3, systemPromptTokens: 100, questionTokens: 10 },
      1,
    );
    expect(plan.mode).toBe('open');
    expect(plan.requests).toHaveLength(12);
    const arr = plan.requests.map((r) => r.arrivalMs!);
    expect(arr).toEqual([...arr].sort((a, b) => a - b));
    const g = plan.requests.filter((r) => r.sessionKey === plan.requests[0]!.sessionKey);
    expect(g).toHaveLength(3);
    expect(sharedPrefixLen(g[0]!.inputIds, g[1]!.inputIds)).toBeGreaterThanOrEqual(100);
  });
});

describe('replay', () => {
  it('replays the Mooncake trace out of the box; equal hash ids give equal token blocks', () => {
    const plan = buildWorkload('replay', { limit: 50 }, 1);
    expect(plan.requests).toHaveLength(50);
    const [a, b] = [plan.requests[0]!, plan.requests[1]!];
    expect(a.inputIds.length).toBe(6758);
    expect(b.inputIds.length).toBe(7322);
    // Both start with hash id 0, then diverge: exactly one 512-token block in common
    // (plus chance agreement of a token or two).
    const common = sharedPrefixLen(a.inputIds, b.inputIds);
    expect(common).toBeGreaterThanOrEqual(512);
    expect(common).toBeLessThan(520);
    expect(a.outputTokens).toBe(500);
    const fast = buildWorkload('replay', { limit: 50, speedup: 2 }, 1);
    expect(fast.requests[49]!.arrivalMs).toBeCloseTo(plan.requests[49]!.arrivalMs! / 2, 9);
  });

  it('names file and line of a malformed trace line, or skips and counts with skipInvalid', () => {
    const dir = mkdtempSync(join(tmpdir(), 'kvroute-trace-'));
    const file = join(dir, 't.jsonl');
    writeFileSync(
      file,
      [
        '{"timestamp": 0, "input_length": 600, "output_length": 5, "hash_ids": [1, 2]}',
        '{"timestamp": 5, "input_length": 600, "output_length": 5, "hash_ids": [1]}',
        'not json',
        '{"timestamp": 9, "input_length": 10, "output_length": 1, "hash_ids": [7]}',
      ].join('\n'),
    );
    expect(() => buildWorkload('replay', { file }, 1)).toThrow(/t\.jsonl:2: hash_ids has 1 ids/);
    const plan = buildWorkload('replay', { file, skipInvalid: true }, 1);
    expect(plan.requests).toHaveLength(2);
    expect(plan.skippedLines).toBe(2);
    expect(() => buildWorkload('replay', { file: join(dir, 'missing.jsonl') }, 1)).toThrow(
      /cannot read/,
    );
  });
});
