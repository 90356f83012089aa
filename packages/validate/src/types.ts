// Shapes the validate harness works on. The plan types are the structural subset of
// sim-core's WorkloadPlan that the harness reads, so a plan from
// `buildWorkload` or one rebuilt from a recording both fit.

export type ApiKind = 'generate' | 'completions' | 'chat';

export interface PlanRequest {
  id: number;
  clientId: number;
  inputIds: ArrayLike<number>;
  outputTokens: number;
  thinkMs?: number;
  arrivalMs?: number;
  routingKey?: string;
  sessionKey: string;
  tenant?: string;
}

export interface ValidatePlan {
  scenario: string;
  mode: 'closed' | 'open';
  ranks: number;
  clients: PlanRequest[][];
  requests: PlanRequest[];
  /** Closed loop: no request starts after this plan time. */
  durationMs?: number;
}

/** What one request did against the live target. Times are ms since the run started. */
export interface Observation {
  id: number;
  clientId: number;
  /** HTTP status; 0 when no response arrived (connection refused, reset, timeout, aborted). */
  status: number;
  ok: boolean;
  error?: string;
  startMs: number;
  /** Send to first content chunk; absent when no content arrived. */
  ttftMs?: number;
  /** Send to end of the response (or to the failure). */
  e2eMs: number;
  /** As reported by the target; absent when it did not say. */
  promptTokens?: number;
  cachedTokens?: number;
  outputTokens?: number;
  /** The rank that served it, when the response said (router header or meta_info). */
  rank?: number;
}

/** One request's outcome in the common form both sides are summarised from. */
export type { OutcomeRecord } from '@kvroute/sim/report';
