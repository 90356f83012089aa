// The rank-model and load flags through the CLI: presets resolved into the report, the
// closed-loop concurrency cap and the open-loop request rate applied, bad values refused.
import { describe, expect, it } from 'vitest';
import { getProfile } from '../src/cost/profiles.ts';
import { resolveEngine } from '../src/entities/presets.ts';
import { withRequestRate } from '../src/workloads/load.ts';
import { buildWorkload } from '../src/workloads/registry.ts';
import { runSimCli } from './helpers/cli.ts';

const cli = (args: string[]) => runSimCli(args);

const SMALL = [
  'run',
  '--scenario',
  'agentic',
  '--ranks',
  '2',
  '--set',
  'sessions=6',
  '--set',
  'turnsMax=3',
  '--policies',
  'round_robin',
  '--json',
  '-',
];

describe('engine presets', () => {
  it('sglang by default; vllm preempts, pages by 16 and derives a smaller pool (activations inside the fraction)', () => {
    const p = getProfile('h200-llama-3.1-8b');
    const s = resolveEngine(p);
    expect(s).toMatchObject({ engine: 'sglang', admission: 'optimistic', pageSize: 1 });
    expect(s.kvCapacityTokens).toBe(p.kvCapacityTokens);
    expect(s.maxRunningRequests).toBeGreaterThanOrEqual(2048);
    const v = resolveEngine(p, { engine: 'vllm' });
    expect(v).toMatchObject({ admission: 'preempt', pageSize: 16, maxRunningRequests: 1024 });
    expect(v.kvCapacityTokens).not.toBe(p.kvCapacityTokens);
    expect(resolveEngine(p, { engine: 'vllm', kvCapacityTokens: 1234 }).kvCapacityTokens).toBe(
      1234,
    );
    expect(resolveEngine(p, { memFraction: 0.5 }).kvCapacityTokens).toBeLessThan(
      p.kvCapacityTokens,
    );
  });
});

describe('CLI flags', () => {
  it('writes the resolved engine into the JSON report', async () => {
    const r = await cli([
      ...SMALL,
      '--engine',
      'vllm',
      '--max-running-requests',
      '8',
      '--host-kv-tokens',
      '100000',
    ]);
    expect(r.stderr).toBe('');
    expect(r.code).toBe(0);
    const report = JSON.parse(r.stdout);
    expect(report.engine).toMatchObject({
      engine: 'vllm',
      admission: 'preempt',
      maxRunningRequests: 8,
      pageSize: 16,
    });
    expect(report.engine.hostKv.capacityTokens).toBe(100000);
    expect(report.engine.hostKv.loadTokensPerMs).toBeGreaterThan(0);
  });

  it('--max-concurrency 1 runs one request at a time: no two overlap', async () => {
    const r = await cli([...SMALL, '--max-concurrency', '1']);
    expect(r.code).toBe(0);
    const report = JSON.parse(r.stdout);
    expect(report.engine.maxConcurrency).toBe(1);
    // Queueing can only come from the rank; with one request in flight there is none.
    expect(report.policies[0].queueingMs.p99).toBe(0);
  });

  it('--request-rate turns the plan into Poisson arrivals at that rate', async () => {
    const plan = buildWorkload('agentic', { sessions: 40, turnsMax: 3, ranks: 2 }, 1);
    const open = withRequestRate(plan, 5, 1);
    expect(open.mode).toBe('open');
    const n = open.requests.length;
    const span = open.requests[n - 1]!.arrivalMs! - open.requests[0]!.arrivalMs!;
    expect(((n - 1) * 1000) / span).toBeGreaterThan(3.5);
    expect(((n - 1) * 1000) / span).toBeLessThan(7);
    // Same seed, same times; the plan it came from is untouched.
    expect(withRequestRate(plan, 5, 1).requests.map((r) => r.arrivalMs)).toEqual(
      open.requests.map((r) => r.arrivalMs),
    );
    expect(plan.mode).toBe('closed');
    const r = await cli([...SMALL, '--request-rate', '50']);
    expect(r.code).toBe(0);
    expect(JSON.parse(r.stdout).engine.requestRate).toBe(50);
  });

  it('refuses bad values with the flag named', async () => {
    for (const [flag, value, msg] of [
      ['--engine', 'trt', /engine/],
      ['--admission', 'lazy', /admission/],
      ['--max-concurrency', '0', /--max-concurrency must be a positive integer/],
      ['--request-rate', '0', /--request-rate must be a positive number/],
      ['--mem-fraction', '1.5', /--mem-fraction must be in \(0, 1\]/],
      ['--host-kv-eviction', 'lru', /need --host-kv-tokens/],
    ] as const) {
      const r = await cli([...SMALL, flag, value]);
      expect(r.code).toBe(2);
      expect(r.stderr).toMatch(msg);
    }
  });
});

describe('sweep --load', () => {
  const SWEEP = [
    'sweep',
    '--scenario',
    'agentic',
    '--ranks',
    '2',
    '--set',
    'sessions=6',
    '--set',
    'turnsMax=3',
    '--window',
    '64',
    '--prefix-length',
    '1024,4096',
  ];
  it('runs the grid at each load and names the best setting at each', async () => {
    const r = await cli([...SWEEP, '--load', 'rate:1,4', '--json', '-']);
    expect(r.code, r.stderr).toBe(0);
    const doc = JSON.parse(r.stdout);
    expect(doc.format).toBe('kvroute-sim-sweep-load/v1');
    expect(doc.axis).toBe('rate');
    expect(doc.points.map((p: { multiplier: number }) => p.multiplier)).toEqual([1, 4]);
    expect(doc.points[1].value).toBeCloseTo(doc.base * 4, 6);
    for (const p of doc.points) expect(p.report.grid).toHaveLength(2);
    const c = await cli([...SWEEP, '--load', 'concurrency:1,2', '--max-concurrency', '2']);
    expect(c.code, c.stderr).toBe(0);
    expect(c.stdout).toMatch(/== load x2 \(4 in flight\) ==/);
  });

  it('refuses a bad axis, bad multipliers, and concurrency without a base', async () => {
    for (const [load, msg] of [
      ['speed:1,2', /--load must be rate:LIST or concurrency:LIST/],
      ['rate:1,x', /multipliers must be positive numbers/],
      ['concurrency:1,2', /give it/],
    ] as const) {
      const r = await cli([...SWEEP, '--load', load]);
      expect(r.code).toBe(2);
      expect(r.stderr).toMatch(msg);
    }
  });
});
