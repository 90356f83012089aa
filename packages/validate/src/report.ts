// The validate report: everything the run measured and predicted, as the JSON written by
// `--json` (keys are a public contract: add, never rename) and the input of the text and
// HTML renderings.
import {
  type ComparisonRow,
  compareSummaries,
  type RunSummary,
  rankAgreement,
  summarize,
} from './stats.ts';
import type { Observation, OutcomeRecord, PlanRequest } from './types.ts';

export const REPORT_FORMAT = 'kvroute-validate/v1';

export interface PredictedRequest {
  rank?: number;
  startMs: number;
  ttftMs?: number;
  endMs: number;
  promptTokens: number;
  cachedTokens: number;
}

export interface PerRequest {
  id: number;
  clientId: number;
  inputTokens: number;
  outputTokens: number;
  predicted?: PredictedRequest;
  observed: Omit<Observation, 'id' | 'clientId'>;
}

export interface ValidateReport {
  format: typeof REPORT_FORMAT;
  target: string;
  endpoint: string;
  api: string;
  scenario: string;
  scenarioOptions: Record<string, unknown>;
  seed: string | number;
  replayOf?: string;
  ranks: number;
  profile: string;
  timeScale: number;
  policy: { label: string; config: Record<string, unknown> };
  /** Rank-model settings the prediction used (kvCapacityTokens, pageSize, chunkedPrefillSize) and where each came from. */
  rankModel: Record<string, { value: number; source: string }>;
  requests: { planned: number; completed: number; failed: number };
  interrupted: boolean;
  predicted: RunSummary;
  observed: RunSummary;
  comparison: ComparisonRow[];
  /** Requests the target attributed to a rank, and how many of those the prediction placed on the same rank. */
  rankAgreement: { compared: number; same: number };
  notes: string[];
  perRequest: PerRequest[];
}

export function observedOutcomes(
  obs: readonly Observation[],
  byId: ReadonlyMap<number, PlanRequest>,
): OutcomeRecord[] {
  return obs.map((o) => {
    const rec: OutcomeRecord = {
      id: o.id,
      ok: o.ok,
      startMs: o.startMs,
      endMs: o.startMs + o.e2eMs,
      promptTokens: o.promptTokens ?? byId.get(o.id)?.inputIds.length ?? 0,
      cachedTokens: o.cachedTokens ?? 0,
    };
    if (o.ttftMs !== undefined) rec.ttftMs = o.ttftMs;
    if (o.rank !== undefined) rec.rank = o.rank;
    return rec;
  });
}

export interface ReportInput {
  head: Omit<
    ValidateReport,
    'format' | 'requests' | 'predicted' | 'observed' | 'comparison' | 'rankAgreement' | 'perRequest'
  >;
  planned: number;
  plan: ReadonlyMap<number, PlanRequest>;
  observations: readonly Observation[];
  predicted: readonly OutcomeRecord[];
}

export function buildReport(input: ReportInput): ValidateReport {
  const observedRecs = observedOutcomes(input.observations, input.plan);
  const observed = summarize(observedRecs);
  const predicted = summarize(input.predicted);
  const predById = new Map(input.predicted.map((r) => [r.id, r]));
  const perRequest: PerRequest[] = input.observations.map((o) => {
    const { id, clientId, ...rest } = o;
    const req = input.plan.get(id);
    const p = predById.get(id);
    const row: PerRequest = {
      id,
      clientId,
      inputTokens: req?.inputIds.length ?? 0,
      outputTokens: req?.outputTokens ?? 0,
      observed: rest,
    };
    if (p) {
      const pr: PredictedRequest = {
        startMs: p.startMs,
        endMs: p.endMs,
        promptTokens: p.promptTokens,
        cachedTokens: p.cachedTokens,
      };
      if (p.rank !== undefined) pr.rank = p.rank;
      if (p.ttftMs !== undefined) pr.ttftMs = p.ttftMs;
      row.predicted = pr;
    }
    return row;
  });
  return {
    format: REPORT_FORMAT,
    ...input.head,
    requests: {
      planned: input.planned,
      completed: observed.ok,
      failed: observed.errors,
    },
    predicted,
    observed,
    comparison: compareSummaries(predicted, observed),
    rankAgreement: rankAgreement(input.predicted, observedRecs),
    perRequest,
  };
}
