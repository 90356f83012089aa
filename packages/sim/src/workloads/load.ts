// Load transforms of a workload plan, for comparisons across offered load. The requests (and
// so the cache behaviour) stay the same; only when they are sent changes.
import { stream } from './random.ts';
import type { WorkloadPlan, WorkloadRequest } from './types.ts';

/**
 * The plan's requests in the order a client would send them: open plans by arrival; closed
 * plans by each request's earliest possible send time (its client's think times summed),
 * so a session's turns stay in order.
 */
function sendOrder(plan: WorkloadPlan): WorkloadRequest[] {
  if (plan.mode === 'open') return plan.requests.slice();
  const keyed: { r: WorkloadRequest; t: number; c: number; i: number }[] = [];
  plan.clients.forEach((list, c) => {
    let t = 0;
    list.forEach((r, i) => {
      t += r.thinkMs ?? 0;
      keyed.push({ r, t, c, i });
    });
  });
  keyed.sort((a, b) => a.t - b.t || a.c - b.c || a.i - b.i);
  return keyed.map((k) => k.r);
}

/**
 * Open loop at `rps` requests per second: the plan's requests in send order with Poisson
 * arrivals from a stream of their own (same seed, same times).
 */
export function withRequestRate(
  plan: WorkloadPlan,
  rps: number,
  seed: string | number,
): WorkloadPlan {
  if (typeof rps !== 'number' || !Number.isFinite(rps) || rps <= 0) {
    throw new RangeError(`request rate must be a number > 0 (requests/s), got ${String(rps)}`);
  }
  const rand = stream(seed, 'request-rate');
  const gap = 1000 / rps;
  let t = 0;
  const requests = sendOrder(plan).map((r) => {
    t += rand.exp(gap);
    // A copy, so the original plan (and its getters) stays untouched for other runs; open
    // loop, so no request waits for another's completion (a replayed session's `after`).
    return Object.create(r, {
      arrivalMs: { value: t, enumerable: true },
      after: { value: undefined, enumerable: true },
    }) as WorkloadRequest;
  });
  return {
    ...plan,
    mode: 'open',
    clients: [],
    requests,
    // A closed plan's duration and warm-up are client-time notions; open runs to completion.
    durationMs: undefined,
    warmupMs: undefined,
  };
}

/** An open plan's offered rate in requests/s (requests over the arrival span). */
export function offeredRate(plan: WorkloadPlan): number | undefined {
  if (plan.mode !== 'open' || plan.requests.length < 2) return undefined;
  const first = plan.requests[0]!.arrivalMs ?? 0;
  const last = plan.requests[plan.requests.length - 1]!.arrivalMs ?? 0;
  return last > first ? ((plan.requests.length - 1) * 1000) / (last - first) : undefined;
}
