// Hand-made report objects for renderer tests: the renderers must not depend on the engine.
import type { PolicyReport, RunReport, SweepCell, SweepReport } from '../src/report/types.ts';

/** The keys required in every `policies[]` entry of the JSON output. */
export const REQUIRED_POLICY_KEYS = [
  'policy',
  'options',
  'hitRate',
  'ttftMs',
  'coldTtftMs',
  'steadyTtftMs',
  'throughputRps',
  'imbalance',
  'requests',
] as const;

export function policyReport(policy: string, over: Partial<PolicyReport> = {}): PolicyReport {
  return {
    policy,
    options: {},
    requests: 30,
    failed: 0,
    retried: 0,
    hitRate: 0.5,
    ttftMs: { p50: 1000, p90: 2000, p99: 3000, mean: 1500 },
    coldTtftMs: { count: 2, p50: 7400, p90: 7400, p99: 7400, mean: 7400 },
    steadyTtftMs: { count: 28, p50: 1290, p90: 1400, p99: 1500, mean: 1300 },
    warmupTtftMs: { count: 2, p50: 7400, p90: 7400, p99: 7400, mean: 7400 },
    throughputRps: 0.1666666667,
    throughputTokPerS: 3800.123,
    inputTokPerS: 3700,
    outputTokPerS: 100.123,
    imbalance: 1.25,
    evictions: 0,
    evictedNodes: 0,
    queueingMs: { p50: 0, p90: 1, p99: 2, mean: 0.5 },
    perRank: [
      {
        rank: 0,
        requests: 20,
        prefillTokens: 30000,
        cachedTokens: 400000,
        prefillBusyMs: 1,
        decodeBusyMs: 2,
        evictedTokens: 0,
      },
      {
        rank: 1,
        requests: 10,
        prefillTokens: 20000,
        cachedTokens: 100000,
        prefillBusyMs: 1,
        decodeBusyMs: 2,
        evictedTokens: 0,
      },
    ],
    reasons: { 'round-robin': 30 },
    durationMs: 180000,
    events: 1234,
    ...over,
  };
}

export function runReport(policies: PolicyReport[]): RunReport {
  return {
    format: 'kvroute-sim-report/v1',
    command: 'run',
    scenario: 'seed-sequential',
    scenarioOptions: { requests: 30 },
    ranks: 2,
    profile: 'seed-qwen3-moe-dp16',
    seed: 1,
    policies,
  };
}

export function sweepCell(
  window: number,
  prefixLength: number,
  p99: number,
  mean: number,
  hitRate: number,
  imbalance = 1,
): SweepCell {
  return {
    method: 'prefix_match',
    options: { window, prefixLength },
    window,
    prefixLength,
    result: policyReport('prefix_match', {
      options: { window, prefixLength },
      hitRate,
      imbalance,
      ttftMs: { p50: mean, p90: p99, p99, mean },
    }),
  };
}

export function sweepReport(grid: SweepCell[], best: SweepCell, reason = 'because'): SweepReport {
  const axis = (option: 'window' | 'prefixLength') => ({
    option,
    flag: option === 'window' ? 'window' : 'prefix-length',
    methods: ['prefix_match'],
    values: [...new Set(grid.map((c) => c.options[option]!))],
    source: 'given' as const,
  });
  return {
    format: 'kvroute-sim-sweep/v1',
    command: 'sweep',
    scenario: 'agentic',
    scenarioOptions: {},
    ranks: 16,
    profile: 'h200-llama-3.1-8b',
    seed: 1,
    policy: 'prefix_match',
    policies: ['prefix_match'],
    objective: 'ttft-p99',
    axes: [axis('window'), axis('prefixLength')],
    windows: [...new Set(grid.map((c) => c.window!))],
    prefixLengths: [...new Set(grid.map((c) => c.prefixLength!))],
    grid,
    rejected: [],
    best: { method: best.method, options: best.options },
    reason,
    routerConfig: 'load-balance-method: prefix_match\n',
  };
}
