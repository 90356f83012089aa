// The report shapes the CLI prints, writes as JSON/CSV and draws as HTML. The JSON keys
// are a public contract (documented in the package README, "JSON output"): add keys,
// never rename or remove them.

import type { ComparisonResult, RouterModel } from '../compare.ts';
import type { PolicyRunSummary } from '../metrics/types.ts';

export type { LatencyStats, RankSummary, SubsetLatency } from '../metrics/types.ts';

/**
 * One policy's results on one workload: sim-core's summary as is (its keys are part of the
 * same contract), with `options` set to what the command line gave this policy.
 */
export type PolicyReport = PolicyRunSummary;

export interface RunReport {
  format: 'kvroute-sim-report/v1';
  command: 'run' | 'replay';
  scenario: string;
  /** Scenario options as passed (`--set`, replay file, speed-up). */
  scenarioOptions: Record<string, unknown>;
  ranks: number;
  profile: string;
  seed: string | number;
  /** The rank model and client load every policy ran with (preset resolved). */
  engine?: ComparisonResult['engine'];
  policies: PolicyReport[];
  /** Replay only: trace lines skipped with --skip-invalid (0 without it). */
  skippedLines?: number;
  /** Router replicas, index source, event lag and load polls, when any was set. */
  router?: RouterModel;
}

export type SweepObjective = 'ttft-p99' | 'ttft-mean' | 'hit-rate';

export interface SweepCell {
  window: number;
  prefixLength: number;
  result: PolicyReport;
}

export interface SweepReport {
  format: 'kvroute-sim-sweep/v1';
  command: 'sweep';
  scenario: string;
  scenarioOptions: Record<string, unknown>;
  ranks: number;
  profile: string;
  seed: string | number;
  policy: string;
  objective: SweepObjective;
  windows: number[];
  prefixLengths: number[];
  /** Row-major: for each prefix length, for each window. */
  grid: SweepCell[];
  best: { window: number; prefixLength: number };
  /** Why this cell won, what it trades away, idle ranks, and how the reference compares. */
  reason: string;
  /** The recommended default method with its default options on the same workload. */
  reference?: PolicyReport;
  /** Router replicas, index source, event lag and load polls, when any was set. */
  router?: RouterModel;
}

/**
 * What the HTML report needs beyond the JSON: per-request samples, which are too large
 * for the JSON output. Keyed like `RunReport.policies`.
 */
export interface PolicySamples {
  policy: string;
  ttftMs: number[];
  /** TTFT of each completed request in arrival order, for the per-request chart. */
  ttftByArrivalMs?: number[];
  /** Arrival time (ms) of each request of ttftByArrivalMs, for the TTFT-over-time chart. */
  arrivalMs?: number[];
}

/** Something that happened to the cluster during a run, drawn on time charts. */
export interface RunMarker {
  atMs: number;
  /** e.g. 'rank 3 down', 'scale to 12 ranks', 'policy switch'. */
  label: string;
}

/** What the HTML run report draws beyond the JSON report and the samples. */
export interface RunExtras {
  markers?: RunMarker[];
  /** Hit rate of one cache with all ranks' capacity replaying the same requests. */
  boundHitRate?: number;
}
