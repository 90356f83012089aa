// Colocated against prefill/decode-disaggregated, on one pre-generated workload: the rows a
// layout report shows (TTFT, inter-token latency, throughput per layout). Plain data, no
// rendering, so the CLI, tests and the e2e prediction read the same figures.
import type { DispatcherConfig } from '@kvroute/policy';
import type { CostModel } from '../cost/cost-model.ts';
import type { KvLink } from '../cost/kv-transfer.ts';
import { latencyStats } from '../metrics/summary.ts';
import type { LatencyStats, PolicyRunResult } from '../metrics/types.ts';
import { type RankOverrides, simulatePlan } from '../simulate.ts';
import type { WorkloadPlan } from '../workloads/types.ts';
import { type KvStoreOptions, type PdRunResult, recordItlMs, simulatePd } from './simulate-pd.ts';

export interface LayoutRow {
  layout: 'colocated' | 'pd';
  /** 'colocated x8', 'pd 2:6' (prefill:decode). */
  label: string;
  gpus: number;
  /** Colocated: every rank prefills; PD: the prefill ranks. */
  prefillRanks: number;
  /** Colocated: 0 (no separate decode servers). */
  decodeRanks: number;
  /** The method that places requests (PD: the prefill side's). */
  policy: string;
  /** PD only: the decode side's method. */
  decodePolicy?: string;
  requests: number;
  failed: number;
  hitRate: number;
  ttftMs: LatencyStats;
  /** Per-request mean inter-token latency (requests with more than one output token). */
  itlMs: LatencyStats;
  /** PD only: link queueing + KV transfer per request. */
  transferMs?: LatencyStats;
  /** PD only: wait for KV room on the decode rank. */
  decodeWaitMs?: LatencyStats;
  throughputRps: number;
  throughputTokPerS: number;
  outputTokPerS: number;
  /** Output tokens per second per GPU: what the layout buys per GPU. */
  outputTokPerSPerGpu: number;
  /** Every request's TTFT, for distribution charts (not written to JSON). */
  ttftSamples: number[];
}

export interface LayoutComparisonOptions {
  profile: CostModel;
  seed: string | number;
  prefillPolicy: DispatcherConfig;
  decodePolicy: DispatcherConfig;
  /** PD splits to run, as [prefill ranks, decode ranks]. */
  splits: readonly (readonly [number, number])[];
  /**
   * Colocated rank counts to run with the prefill method: by default every split's GPU
   * count (the same hardware) and every split's prefill rank count (the same prefill GPUs,
   * which the hit-rate target compares against).
   */
  colocatedRanks?: readonly number[];
  link?: KvLink;
  /** Conditional disaggregation on the PD runs (simulatePd's localPrefillTokens). */
  localPrefillTokens?: number;
  /** A KV store shared by the prefill ranks, decode offload included (simulatePd's kvStore). */
  kvStore?: KvStoreOptions;
  rank?: RankOverrides;
  maxConcurrency?: number;
  onProgress?(fraction: number): void;
}

export interface HitRateTarget {
  /** The PD split whose prefill side is compared. */
  split: [number, number];
  pdHitRate: number;
  /** Colocated, prefill method, on as many ranks as the PD layout has prefill ranks. */
  colocatedHitRate: number;
  met: boolean;
  /**
   * Input tokens that are a previous turn's reply, as a share of all input tokens: colocated
   * serving caches them, a prefill server never sees them, so PD can trail colocated by up
   * to this much on hit rate with nothing wrong in its routing.
   */
  replyShare: number;
}

/**
 * Share of input tokens that repeat the same client's previous reply right after the
 * previous prompt (multi-turn sessions): what only the server that generated the reply has
 * in its cache.
 */
export function replyShare(plan: WorkloadPlan): number {
  let input = 0;
  let reply = 0;
  const lists = plan.mode === 'closed' ? plan.clients : [];
  for (const list of lists) {
    for (let i = 0; i < list.length; i++) {
      const ids = list[i]!.inputIds;
      input += ids.length;
      const prev = list[i - 1];
      const out = prev?.outputIds;
      if (prev === undefined || out === undefined) continue;
      const at = prev.inputIds.length;
      let k = 0;
      while (k < out.length && at + k < ids.length && ids[at + k] === out[k]) k++;
      reply += k;
    }
  }
  if (plan.mode !== 'closed') for (const r of plan.requests) input += r.inputIds.length;
  return input === 0 ? 0 : reply / input;
}

export interface LayoutComparison {
  rows: LayoutRow[];
  /** Per PD split: does cache-aware prefill keep the colocated hit rate on its prefill GPUs? */
  targets: HitRateTarget[];
}

function colocatedRow(ranks: number, run: PolicyRunResult): LayoutRow {
  const s = run.summary;
  const itl = run.records.filter((r) => r.outputTokens > 1).map(recordItlMs);
  return {
    layout: 'colocated',
    label: `colocated x${ranks}`,
    gpus: ranks,
    prefillRanks: ranks,
    decodeRanks: 0,
    policy: s.policy,
    requests: s.requests,
    failed: s.failed,
    hitRate: s.hitRate,
    ttftMs: s.ttftMs,
    itlMs: latencyStats(itl),
    throughputRps: s.throughputRps,
    throughputTokPerS: s.throughputTokPerS,
    outputTokPerS: s.outputTokPerS,
    outputTokPerSPerGpu: Math.round((s.outputTokPerS / ranks) * 1000) / 1000,
    ttftSamples: run.records.map((r) => r.ttftMs),
  };
}

function pdRow(run: PdRunResult): LayoutRow {
  const s = run.summary;
  const pd = run.pd;
  return {
    layout: 'pd',
    label: `pd ${pd.prefillRanks}:${pd.decodeRanks}`,
    gpus: pd.gpus,
    prefillRanks: pd.prefillRanks,
    decodeRanks: pd.decodeRanks,
    policy: pd.prefillPolicy,
    decodePolicy: pd.decodePolicy,
    requests: s.requests,
    failed: s.failed,
    hitRate: s.hitRate,
    ttftMs: s.ttftMs,
    itlMs: pd.itlMs,
    transferMs: pd.transferMs,
    decodeWaitMs: pd.decodeWaitMs,
    throughputRps: s.throughputRps,
    throughputTokPerS: s.throughputTokPerS,
    outputTokPerS: s.outputTokPerS,
    outputTokPerSPerGpu: Math.round((s.outputTokPerS / pd.gpus) * 1000) / 1000,
    ttftSamples: run.records.map((r) => r.ttftMs),
  };
}

/** Runs the colocated rows, then the PD splits, on the same plan. */
export function compareLayouts(plan: WorkloadPlan, o: LayoutComparisonOptions): LayoutComparison {
  if (o.splits.length === 0) throw new RangeError('compareLayouts: give at least one PD split');
  const colocated =
    o.colocatedRanks ??
    [...new Set(o.splits.flatMap(([p, d]) => [p + d, p]))].sort((a, b) => b - a);
  const total = colocated.length + o.splits.length;
  let done = 0;
  const part = (f: number) => o.onProgress?.((done + f) / total);
  const rows: LayoutRow[] = [];
  const colocatedHit = new Map<number, number>();
  for (const ranks of colocated) {
    const run = simulatePlan(plan, {
      policy: o.prefillPolicy,
      ranks,
      profile: o.profile,
      seed: o.seed,
      ...(o.rank ? { rank: o.rank } : {}),
      ...(o.maxConcurrency !== undefined ? { maxConcurrency: o.maxConcurrency } : {}),
      onProgress: part,
    });
    rows.push(colocatedRow(ranks, run));
    colocatedHit.set(ranks, run.summary.hitRate);
    done++;
  }
  const targets: HitRateTarget[] = [];
  const replies = replyShare(plan);
  for (const [p, d] of o.splits) {
    const run = simulatePd(plan, {
      prefillPolicy: o.prefillPolicy,
      decodePolicy: o.decodePolicy,
      prefillRanks: p,
      decodeRanks: d,
      profile: o.profile,
      seed: o.seed,
      ...(o.link ? { link: o.link } : {}),
      ...(o.localPrefillTokens !== undefined ? { localPrefillTokens: o.localPrefillTokens } : {}),
      ...(o.kvStore !== undefined ? { kvStore: o.kvStore } : {}),
      ...(o.rank ? { rank: o.rank } : {}),
      ...(o.maxConcurrency !== undefined ? { maxConcurrency: o.maxConcurrency } : {}),
      onProgress: part,
    });
    rows.push(pdRow(run));
    const base = colocatedHit.get(p);
    if (base !== undefined) {
      targets.push({
        split: [p, d],
        pdHitRate: run.summary.hitRate,
        colocatedHitRate: base,
        met: run.summary.hitRate >= base,
        replyShare: Math.round(replies * 1e6) / 1e6,
      });
    }
    done++;
  }
  return { rows, targets };
}
