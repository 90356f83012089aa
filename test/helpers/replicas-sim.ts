// The simulator's prediction of the router-replicas e2e (helpers/replicas.ts): the same
// prompts (the approximate tokenizer is exact here: the mock worker and the router use it
// too), four ranks with the mock worker's cost profile, cache_aware, a closed loop of
// `concurrency` clients each running whole sessions turn after turn, requests spread
// round-robin over the replicas.
import { approximateTokenIds } from '@kvroute/protocol';
import {
  costModelFromSpec,
  getProfileSpec,
  simulatePlan,
  stream,
  type WorkloadPlan,
  type WorkloadRequest,
} from '@kvroute/sim';
import {
  DEFAULT_WORKLOAD,
  type IndexSource,
  type RunResult,
  sessionsOf,
  turnPrompts,
  type Workload,
} from './replicas.ts';

export type SimIndexSource = 'learned' | 'events' | 'oracle';

/** The routers' cache_aware pendingMs: its default. */
const PENDING_MS = 10_000;

/** The mock workers' profile (startEventWorkers uses the mock worker's default). */
export const E2E_PROFILE = 'h200-llama-3.1-8b';

/**
 * The e2e's client as a closed-loop plan: one client per session, `concurrency` of them
 * running at once and the next session starting when one ends, as the e2e's client loops
 * take sessions from one queue. A session's turns, and a loop's next session, follow the
 * previous response after `thinkMs` (jittered 0.5x-1.5x by the seed); the first
 * `concurrency` sessions start together at 0.
 */
export function e2ePlan(
  workload: Workload = DEFAULT_WORKLOAD,
  thinkMs = 0,
  seed: string | number = 1,
): WorkloadPlan {
  const jitter = stream(seed, 'e2e-turn-gap');
  const clients: WorkloadRequest[][] = [];
  let id = 0;
  for (const s of sessionsOf(workload)) {
    const c = clients.length;
    const list: WorkloadRequest[] = [];
    for (const text of turnPrompts(s, workload)) {
      const first = c < workload.concurrency && list.length === 0;
      list.push({
        id: id++,
        clientId: c,
        inputIds: approximateTokenIds(text),
        // One new token, as the e2e asks: the response time is the time to first token.
        outputTokens: 1,
        thinkMs: first ? 0 : thinkMs * (0.5 + jitter()),
        sessionKey: `session-${s.id}`,
        tenant: `tenant-${Math.floor(s.id / workload.sessionsPerTenant)}`,
      });
    }
    clients.push(list);
  }
  return {
    scenario: 'e2e-replicas',
    mode: 'closed',
    ranks: 4,
    clients,
    activeClients: workload.concurrency,
    requests: [],
    events: [],
  };
}

/** What the e2e measured about its own timing, in wall ms, and its mock workers' time scale. */
export interface E2eTiming {
  /** Mean time a client waited for a response (router, HTTP and engine). */
  responseMs: number;
  /** Of it, send to the worker storing the prompt's blocks (router, forwarding, engine). */
  sendToStoreMs: number;
  /** And the rest: the store to the answer at the client, which sends the next turn at once. */
  storeToAnswerMs: number;
  /** Mean KV event lag, publish to apply. */
  eventLagMs: number;
  /** Wall ms per model ms of the mock workers. */
  timeScale: number;
}

export interface Prediction {
  replicas: number;
  source: SimIndexSource;
  requests: number;
  /** Mean token hit rate over the seeds, and its range. */
  hitRate: number;
  min: number;
  max: number;
}

/**
 * The simulator's hit rate for the e2e at `timing`. The simulator has no HTTP hops, so the
 * e2e's host time enters as model time (wall ms / time scale) where it happens: a request
 * reaches its rank's queue send -> store after the routing decision (the profile's
 * overheadMs), the session's next turn is routed store -> answer after the engine stored the
 * blocks (the think time, jittered 0.5x-1.5x by the seed: which replica sees which turn
 * depends on how the sessions interleave), and events arrive one event lag after the store.
 * So a replica that did not route the previous turn sees its blocks in time only if the lag
 * is shorter than store -> answer, as in the e2e. Averaged over `seeds` interleavings.
 */
export function predictReplicas(
  replicas: number,
  source: SimIndexSource,
  timing: E2eTiming,
  opts: { workload?: Workload; seeds?: readonly number[] } = {},
): Prediction {
  const seeds = opts.seeds ?? [1, 2, 3, 4, 5, 6, 7, 8];
  const rates: number[] = [];
  let requests = 0;
  for (const seed of seeds) {
    const plan = e2ePlan(opts.workload, timing.storeToAnswerMs / timing.timeScale, seed);
    const { summary } = simulatePlan(plan, {
      // The router's cache_aware counts wall ms; the model's clock runs 1 / timeScale faster.
      policy: { method: 'cache_aware', pendingMs: PENDING_MS / timing.timeScale },
      profile: costModelFromSpec({
        ...getProfileSpec(E2E_PROFILE),
        overheadMs: timing.sendToStoreMs / timing.timeScale,
      }),
      seed,
      replicas,
      indexSource: source,
      ...(source === 'events' ? { eventLagMs: timing.eventLagMs / timing.timeScale } : {}),
    });
    rates.push(summary.hitRate);
    requests = summary.requests;
  }
  return {
    replicas,
    source,
    requests,
    hitRate: rates.reduce((a, b) => a + b, 0) / rates.length,
    min: Math.min(...rates),
    max: Math.max(...rates),
  };
}

/** One run of the e2e comparison (scripts/replicas.ts --record), as recorded. */
export interface RecordedRun {
  recordedAt?: string;
  timeScale: number;
  rows: readonly Pick<
    RunResult,
    | 'replicas'
    | 'source'
    | 'requests'
    | 'hitRate'
    | 'ttftMeanMs'
    | 'eventLagMs'
    | 'sendToStoreMs'
    | 'storeToAnswerMs'
  >[];
}

export interface ModeComparison {
  replicas: number;
  source: IndexSource;
  /** The e2e's hit rate in each run, and their mean. */
  e2e: number[];
  e2eMean: number;
  /** The timing the prediction used: the mode's mean over the runs, wall ms. */
  timing: E2eTiming;
  sim: Prediction;
  /** sim - e2e mean, in percentage points. */
  gapPt: number;
}

/** Per setup (replicas x index source): the e2e's runs against the simulator at their timing. */
export function comparePredictions(runs: readonly RecordedRun[]): ModeComparison[] {
  const first = runs[0];
  if (first === undefined) throw new Error('no recorded e2e runs to compare with');
  const out: ModeComparison[] = [];
  for (const { replicas, source } of first.rows) {
    const rows = runs.map((run) => {
      const row = run.rows.find((r) => r.replicas === replicas && r.source === source);
      if (row === undefined) throw new Error(`a recorded run has no ${replicas} x ${source} row`);
      return { row, timeScale: run.timeScale };
    });
    const mean = (xs: number[]) => xs.reduce((a, b) => a + b, 0) / xs.length;
    const timing: E2eTiming = {
      responseMs: mean(rows.map((r) => r.row.ttftMeanMs)),
      sendToStoreMs: mean(rows.map((r) => r.row.sendToStoreMs)),
      storeToAnswerMs: mean(rows.map((r) => r.row.storeToAnswerMs)),
      eventLagMs: mean(rows.map((r) => r.row.eventLagMs)),
      timeScale: mean(rows.map((r) => r.timeScale)),
    };
    const e2e = rows.map((r) => r.row.hitRate);
    const sim = predictReplicas(replicas, source, timing);
    out.push({
      replicas,
      source,
      e2e,
      e2eMean: mean(e2e),
      timing,
      sim,
      gapPt: 100 * (sim.hitRate - mean(e2e)),
    });
  }
  return out;
}

const pct = (x: number) => `${(100 * x).toFixed(1)}%`;

export function formatPredictions(runs: readonly RecordedRun[]): string {
  const lines = [
    '| setup | e2e hit rate (runs) | e2e mean | sim (8 interleavings) | sim - e2e | timing: send -> store -> answer, event lag (wall ms) |',
    '| --- | --- | ---: | ---: | ---: | --- |',
  ];
  for (const c of comparePredictions(runs)) {
    lines.push(
      `| ${c.replicas} router${c.replicas > 1 ? 's' : ''}, ${c.source} | ${c.e2e.map(pct).join(', ')} | ${pct(c.e2eMean)} | ${pct(c.sim.hitRate)} (${pct(c.sim.min)}-${pct(c.sim.max)}) | ${c.gapPt >= 0 ? '+' : ''}${c.gapPt.toFixed(1)} pt | ${c.timing.sendToStoreMs.toFixed(1)} + ${c.timing.storeToAnswerMs.toFixed(1)}, ${c.timing.eventLagMs.toFixed(1)} |`,
    );
  }
  return lines.join('\n');
}
