// The report shapes the CLI prints, writes as JSON/CSV and draws as HTML. The JSON keys
// are a public contract (documented in the package README, "JSON output"): add keys,
// never rename or remove them.

import type { ComparisonResult, RouterModel } from '../compare.ts';
import type { PolicyRunSummary } from '../metrics/types.ts';
import type { Confidence } from '../replay-observed.ts';

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

/** What a sweep minimises (maximises for hit rate and throughput). */
export type SweepObjective = 'ttft-p99' | 'ttft-p50' | 'ttft-mean' | 'hit-rate' | 'throughput';

/** A method option a sweep turned, and the values it tried. */
export interface SweepAxisReport {
  /** Option name (camelCase). */
  option: string;
  /** Its flag and router YAML key (`max-prefix-tokens`). */
  flag: string;
  /** Methods of the sweep that read it. */
  methods: string[];
  values: (number | string)[];
  /** `given` on the command line, or the method schema's own sweep values. */
  source: 'given' | 'schema';
}

export interface SweepCell {
  /** Method name. */
  method: string;
  /** The options this cell set (the method's other options are at their defaults). */
  options: Record<string, number | string>;
  /** The cell's window and prefix length when its method reads them (v1 readers). */
  window?: number;
  prefixLength?: number;
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
  /** The swept methods, comma-separated (one name for a one-method sweep). */
  policy: string;
  policies: string[];
  objective: SweepObjective;
  /** Constraint: only cells within this many hit-rate points of the best hit rate compete. */
  hitRateWithin?: number;
  axes: SweepAxisReport[];
  /** Window and prefix-length values of kept cells (v1 readers; empty when not swept). */
  windows: number[];
  prefixLengths: number[];
  /** Every setting tried, in order: methods as listed, then the first axis fastest. */
  grid: SweepCell[];
  /** Settings the method refuses as a whole (e.g. prefix length below the window), with why. */
  rejected: { method: string; options: Record<string, number | string>; error: string }[];
  best: { method: string; options: Record<string, number | string> } & Partial<
    Pick<SweepCell, 'window' | 'prefixLength'>
  >;
  /** Why this cell won, what it trades away, idle ranks, and how the reference compares. */
  reason: string;
  /** The recommended default method with its default options on the same workload. */
  reference?: PolicyReport;
  /** The setting deployed now (`--current`), run on the same workload. */
  current?: SweepCell;
  /** The winner as a kvroute-router YAML config snippet. */
  routerConfig: string;
  /** Router replicas, index source, event lag and load polls, when any was set. */
  router?: RouterModel;
  /**
   * Sweeps of a recorded trace: predicted vs observed on the setting it was recorded with
   * (hit rate in points, TTFT p50/p99 relative), also stated at the end of `reason`.
   */
  confidence?: Confidence;
}

/** `sweep --load`: the whole grid at several offered loads. */
export interface SweepLoadReport {
  format: 'kvroute-sim-sweep-load/v1';
  axis: 'rate' | 'concurrency';
  /** Requests per second or concurrency the multipliers multiply. */
  base: number;
  points: {
    multiplier: number;
    value: number;
    best: SweepReport['best'];
    report: SweepReport;
  }[];
  /** Where the best setting changes between neighbouring loads, in words. */
  changes: string[];
  /** The first load point's winner as a router config (the load listed first is the plan). */
  routerConfig: string;
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
  /** e.g. 'rank 3 down', 'scale to 12 ranks', 'switch to prefix_match window=64'. */
  label: string;
  /** 'cluster' (a rank down or back, a scale-out; red) or 'policy' (a policy switch; blue). */
  kind?: 'cluster' | 'policy';
}

/** What the HTML run report draws beyond the JSON report and the samples. */
export interface RunExtras {
  markers?: RunMarker[];
  /** Hit rate of one cache with all ranks' capacity replaying the same requests. */
  boundHitRate?: number;
}
