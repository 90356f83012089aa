// When requests are sent. Open loop: at the plan's arrival times. Closed loop: each client
// sends its next request think time after its previous one completed. Either way an optional
// client concurrency cap (benchmark clients' --max-concurrency) holds a request back until
// fewer than that many are in flight, as a semaphore in front of the endpoint would; a
// request's arrival is when it is actually sent, which is where TTFT is measured from.
import type { Scheduler } from '../engine/event-queue.ts';
import type { WorkloadPlan, WorkloadRequest } from '../workloads/types.ts';

export interface ArrivalOptions {
  /** At most this many requests in flight; the rest wait, in order, to be sent. */
  maxConcurrency?: number;
}

export interface Arrivals {
  /** Requests in the plan (closed loop: every client's list; some may never be sent). */
  readonly total: number;
  /** Requests sent so far. */
  readonly issued: number;
  /** Requests ready to send but held back by the concurrency cap. */
  readonly held: number;
  /** Tell the source a request completed: frees a concurrency slot, starts a client's next turn. */
  complete(req: WorkloadRequest, timeMs: number): void;
}

export function checkMaxConcurrency(v: unknown): number | undefined {
  if (v === undefined) return undefined;
  if (typeof v !== 'number' || !Number.isInteger(v) || v < 1) {
    throw new RangeError(`maxConcurrency must be an integer >= 1, got ${JSON.stringify(v)}`);
  }
  return v;
}

export function scheduleArrivals(
  plan: WorkloadPlan,
  q: Scheduler,
  send: (req: WorkloadRequest) => void,
  opts: ArrivalOptions = {},
): Arrivals {
  const cap = checkMaxConcurrency(opts.maxConcurrency) ?? Number.POSITIVE_INFINITY;
  let inFlight = 0;
  let issued = 0;
  const held: WorkloadRequest[] = [];
  let heldHead = 0;
  const offer = (req: WorkloadRequest) => {
    if (inFlight >= cap) {
      held.push(req);
      return;
    }
    inFlight++;
    issued++;
    send(req);
  };

  // Closed loop bookkeeping: which client a request belongs to, and its next index.
  const nextIndex = new Map<number, number>();
  const clientOf = new Map<WorkloadRequest, number>();
  const startClient = (c: number, idx: number, after: number) => {
    const req = plan.clients[c]![idx];
    if (req === undefined) return;
    const at = after + (req.thinkMs ?? 0);
    if (plan.durationMs !== undefined && at > plan.durationMs) return;
    nextIndex.set(c, idx + 1);
    q.at(at, () => offer(req));
  };

  let total = 0;
  // Clients started so far; the rest wait for a free slot (plan.activeClients), in order.
  let started = 0;
  const startNext = (after: number) => {
    // An empty client would hold its slot forever: skip it.
    while (started < plan.clients.length && plan.clients[started]!.length === 0) started++;
    if (started < plan.clients.length) startClient(started++, 0, after);
  };
  if (plan.mode === 'closed') {
    const active = plan.activeClients ?? plan.clients.length;
    if (!Number.isInteger(active) || active < 1) {
      throw new RangeError(`activeClients must be an integer >= 1, got ${plan.activeClients}`);
    }
    plan.clients.forEach((list, c) => {
      total += list.length;
      for (const r of list) clientOf.set(r, c);
    });
    for (let i = 0; i < active; i++) startNext(0);
  } else {
    total = plan.requests.length;
    // One pending arrival at a time keeps the heap small for 10k+ request traces.
    let i = 0;
    const arrive = () => {
      // Every request due now is sent in this one event, so arrivals at the same instant all
      // precede the ranks' step kicks and join one step, as SGLang drains its input queue.
      const now = q.now();
      const due = i;
      i++;
      while (i < plan.requests.length && (plan.requests[i]!.arrivalMs ?? 0) <= now) i++;
      const next = plan.requests[i];
      if (next !== undefined) q.at(Math.max(now, next.arrivalMs ?? 0), arrive);
      for (let k = due; k < i; k++) offer(plan.requests[k]!);
    };
    const first = plan.requests[0];
    if (first !== undefined) q.at(first.arrivalMs ?? 0, arrive);
  }

  return {
    total,
    get issued() {
      return issued;
    },
    get held() {
      return held.length - heldHead;
    },
    complete(req, t) {
      inFlight--;
      if (heldHead < held.length) {
        const next = held[heldHead]!;
        held[heldHead++] = undefined as unknown as WorkloadRequest;
        if (heldHead > 1024 && heldHead * 2 > held.length) {
          held.splice(0, heldHead);
          heldHead = 0;
        }
        inFlight++;
        issued++;
        send(next);
      }
      if (plan.mode !== 'closed') return;
      const c = clientOf.get(req);
      if (c === undefined) return;
      const list = plan.clients[c] as WorkloadRequest[];
      const next = nextIndex.get(c) ?? 0;
      if (next < list.length) startClient(c, next, t);
      // This client is done: its slot goes to the next waiting client.
      else if (req === list[list.length - 1]) startNext(t);
    },
  };
}

/**
 * The run's progress for an `onProgress` callback, reported at most once per percent:
 * finished requests over the plan's, or for a closed plan with a duration, simulated time
 * over that duration when it is further along.
 */
export function progressReporter(
  plan: WorkloadPlan,
  q: Scheduler,
  arrivals: Arrivals,
  finished: () => number,
  onProgress: ((fraction: number) => void) | undefined,
): () => void {
  if (!onProgress) return () => {};
  let last = -1;
  return () => {
    const total = arrivals.total;
    let f = total === 0 ? 1 : finished() / total;
    if (plan.mode === 'closed' && plan.durationMs !== undefined) {
      f = Math.max(f, Math.min(1, q.now() / plan.durationMs));
    }
    const pct = Math.floor(f * 100);
    if (pct > last) {
      last = pct;
      onProgress(f);
    }
  };
}
