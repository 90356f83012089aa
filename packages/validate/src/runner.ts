// Plays a workload plan against a live target in real time, with the plan's own timing
// model: closed-loop clients wait for their previous request and then think, open-loop
// requests leave at their arrival times. `timeScale` stretches plan time into wall time the
// same way the mock worker's --time-scale does, so observed times are divided by it again.
import { setMaxListeners } from 'node:events';
import { performance } from 'node:perf_hooks';
import { setTimeout as sleep } from 'node:timers/promises';
import type { SendResult } from './http-driver.ts';
import type { Observation, PlanRequest, ValidatePlan } from './types.ts';

export interface Sender {
  send(req: PlanRequest, signal?: AbortSignal): Promise<SendResult>;
}

export interface DriveOptions {
  /** Wall ms per plan ms (default 1). */
  timeScale?: number;
  /** At most this many requests in flight at once (open loop; closed loop is bounded by its clients). */
  maxInFlight?: number;
  signal?: AbortSignal;
  /** Called as each request finishes, in completion order (for recording and progress). */
  onResult?(obs: Observation, req: PlanRequest): void;
}

export interface DriveResult {
  observations: Observation[];
  /** Requests that were never sent because the run was interrupted. */
  unsent: number;
  interrupted: boolean;
  wallMs: number;
  /** Open loop only: requests that left later than planned because maxInFlight was reached. */
  delayedByConcurrency: number;
}

/** A FIFO counting semaphore. */
class Gate {
  private free: number;
  private readonly waiters: (() => void)[] = [];
  constructor(n: number) {
    this.free = n;
  }
  get saturated(): boolean {
    return this.free <= 0;
  }
  async acquire(): Promise<void> {
    if (this.free > 0) {
      this.free--;
      return;
    }
    await new Promise<void>((resolve) => this.waiters.push(resolve));
  }
  release(): void {
    const next = this.waiters.shift();
    if (next) next();
    else this.free++;
  }
  /** Wakes every waiter (on abort), so nothing is left pending. */
  drain(): void {
    for (const w of this.waiters.splice(0)) w();
  }
}

/** Counts requests in a plan for its mode. */
export function planSize(plan: ValidatePlan): number {
  return plan.mode === 'closed'
    ? plan.clients.reduce((n, c) => n + c.length, 0)
    : plan.requests.length;
}

export async function drivePlan(
  plan: ValidatePlan,
  sender: Sender,
  opts: DriveOptions = {},
): Promise<DriveResult> {
  const scale = opts.timeScale ?? 1;
  const gate = new Gate(opts.maxInFlight ?? Number.POSITIVE_INFINITY);
  const signal = opts.signal;
  const t0 = performance.now();
  const observations: Observation[] = [];
  let delayed = 0;
  // Every in-flight request and every sleeping client listens on the one signal.
  if (signal) setMaxListeners(0, signal);
  const onAbort = () => gate.drain();
  signal?.addEventListener('abort', onAbort, { once: true });

  const waitUntil = async (planMs: number) => {
    const wait = t0 + planMs * scale - performance.now();
    if (wait > 0) await sleep(wait, undefined, { signal }).catch(() => undefined);
  };

  const one = async (req: PlanRequest): Promise<void> => {
    const res = await sender.send(req, signal);
    const obs: Observation = {
      id: req.id,
      clientId: req.clientId,
      status: res.status,
      ok: res.ok,
      startMs: (res.sentAt - t0) / scale,
      e2eMs: (res.endAt - res.sentAt) / scale,
    };
    if (res.error !== undefined) obs.error = res.error;
    if (res.firstContentAt !== undefined) obs.ttftMs = (res.firstContentAt - res.sentAt) / scale;
    if (res.promptTokens !== undefined) obs.promptTokens = res.promptTokens;
    if (res.cachedTokens !== undefined) obs.cachedTokens = res.cachedTokens;
    if (res.outputTokens !== undefined) obs.outputTokens = res.outputTokens;
    if (res.rank !== undefined) obs.rank = res.rank;
    // A request cut short by our own interrupt says nothing about the target.
    if (signal?.aborted && !obs.ok) return;
    observations.push(obs);
    opts.onResult?.(obs, req);
  };

  if (plan.mode === 'closed') {
    // As the simulator: a client's first request leaves thinkMs after the start, each later
    // one thinkMs after the previous completed; none starts after durationMs (plan time).
    const limit = plan.durationMs;
    await Promise.all(
      plan.clients.map(async (client) => {
        for (const req of client) {
          if (signal?.aborted) return;
          const think = (req.thinkMs ?? 0) * scale;
          const planAt = (performance.now() + think - t0) / scale;
          if (limit !== undefined && planAt > limit) return;
          if (think > 0) await sleep(think, undefined, { signal }).catch(() => undefined);
          if (signal?.aborted) return;
          await gate.acquire();
          try {
            if (signal?.aborted) return;
            await one(req);
          } finally {
            gate.release();
          }
        }
      }),
    );
  } else {
    const pending: Promise<void>[] = [];
    for (const req of plan.requests) {
      if (signal?.aborted) break;
      await waitUntil(req.arrivalMs ?? 0);
      if (signal?.aborted) break;
      if (gate.saturated) delayed++;
      await gate.acquire();
      if (signal?.aborted) break;
      pending.push(one(req).finally(() => gate.release()));
    }
    await Promise.all(pending);
  }
  signal?.removeEventListener('abort', onAbort);
  observations.sort((a, b) => a.startMs - b.startMs || a.id - b.id);
  return {
    observations,
    unsent: planSize(plan) - observations.length,
    interrupted: signal?.aborted ?? false,
    wallMs: performance.now() - t0,
    delayedByConcurrency: delayed,
  };
}
