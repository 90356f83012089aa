import type { PolicySwitch, TraceLine, TraceStart } from './trace-file.ts';
import type { GroupSelection } from './trace-groups.ts';

// Workload plans: pre-generated, deterministic from the seed, content never dependent on
// timing, so the simulator, the validate harness and e2e tests can replay the same plan.

export interface WorkloadRequest {
  id: number;
  clientId: number;
  /** Synthetic token ids in [1, 30000). May be a getter that builds the array on access. */
  inputIds: Uint32Array;
  outputTokens: number;
  /**
   * The reply's token ids when a later request carries them (multi-turn sessions): the rank
   * caches input + output at the end, as SGLang does, so the next turn can hit them.
   */
  outputIds?: Uint32Array;
  /** Closed loop: delay after the client's previous request completed (first: after t=0). */
  thinkMs?: number;
  /** Open loop: arrival time. */
  arrivalMs?: number;
  /**
   * Open loop, a session's later turn: sent `gapMs` after the plan's request `id` completes
   * instead of at `arrivalMs` (which keeps the time it was recorded at, for reports), as an
   * agent sends its next turn only once it has the previous answer (a recorded trace's
   * sessions, replayed closed loop).
   */
  after?: { id: number; gapMs: number };
  routingKey?: string;
  /** Prefix/session identity for keys-moved metrics. */
  sessionKey: string;
  tenant?: string;
}

export interface ClusterEvent {
  atMs: number;
  /** policy-switch: from atMs on, the router routes with `policy` (a hot reload). */
  kind: 'rank-down' | 'rank-up' | 'set-ranks' | 'policy-switch';
  rank?: number;
  ranks?: number;
  /** For policy-switch: the dispatcher config switched to ({method, ...options}). */
  policy?: { method: string; [option: string]: unknown };
}

export interface WorkloadPlan {
  scenario: string;
  mode: 'closed' | 'open';
  /** Default rank count. */
  ranks: number;
  /** Closed loop: each client's ordered requests. */
  clients: WorkloadRequest[][];
  /**
   * Closed loop: at most this many clients run at once; the others wait in order and each
   * starts when a running one has finished its last request (a benchmark that runs N
   * sessions at a time from a queue). Default: every client from the start.
   */
  activeClients?: number;
  /** Open loop: sorted by arrivalMs. */
  requests: WorkloadRequest[];
  events: ClusterEvent[];
  /** Closed loop: no new request starts after this time. */
  durationMs?: number;
  /** Throughput and steady-state TTFT count only what happens after this time. */
  warmupMs?: number;
  /** The options the plan was built with, defaults filled in. */
  options?: Record<string, unknown>;
  /** Replay: trace lines skipped with skipInvalid. */
  skippedLines?: number;
  /** What the commands print on stderr about the plan (e.g. a recording the replay cannot follow). */
  warnings?: string[];
  /** Replay of a trace the router recorded: how it was recorded and what it observed. */
  recorded?: RecordedTrace;
}

/** A recorded trace behind a replay plan; `lines[i]` is request `i`'s line. */
export interface RecordedTrace {
  start: TraceStart;
  /** Policy switches, timestamps on the plan's clock (divided by the speedup). */
  switches: PolicySwitch[];
  lines: TraceLine[];
  speedup: number;
  /** Requests replayed closed loop: sent their think gap after their session's previous turn. */
  closedLoop: number;
  /** A recording with worker groups: the one group replayed (its ranks renumbered 0..k-1). */
  group?: GroupSelection;
}

export interface ScenarioDefinition {
  name: string;
  description: string;
  /** Every option with its default; buildWorkload rejects names not listed here. */
  defaults: Record<string, unknown>;
  build(options: Record<string, unknown>, seed: string | number): WorkloadPlan;
}
