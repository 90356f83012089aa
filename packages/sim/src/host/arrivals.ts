// When requests are sent. Open loop: at the plan's arrival times, except a request that comes
// `after` another, which is sent its gap after that one completed (a replayed session's next
// turn). Closed loop: each client sends its next request think time after its previous one
// completed. Either way an optional
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
  /**
   * Open loop, once the run is over: requests never sent because the request they come
   * `after` never completed (they failed with it).
   */
  readonly stranded: number;
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

  // Open loop: the requests sent when another completes, by that one's id.
  const followers = new Map<number, WorkloadRequest[]>();
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
    const timed = linkFollowers(plan.requests, followers);
    // One pending arrival at a time keeps the heap small for 10k+ request traces.
    let i = 0;
    const arrive = () => {
      // Every request due now is sent in this one event, so arrivals at the same instant all
      // precede the ranks' step kicks and join one step, as SGLang drains its input queue.
      const now = q.now();
      const due = i;
      i++;
      while (i < timed.length && (timed[i]!.arrivalMs ?? 0) <= now) i++;
      const next = timed[i];
      if (next !== undefined) q.at(Math.max(now, next.arrivalMs ?? 0), arrive);
      for (let k = due; k < i; k++) offer(timed[k]!);
    };
    const first = timed[0];
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
    get stranded() {
      return plan.mode === 'open' ? total - issued - (held.length - heldHead) : 0;
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
      if (plan.mode !== 'closed') {
        for (const f of followers.get(req.id) ?? []) q.at(t + f.after!.gapMs, () => offer(f));
        return;
      }
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
 * Fills `followers` (request id -> the requests sent after it completes) and returns the
 * requests sent at their arrival times: the plan's own array when none waits for another.
 */
function linkFollowers(
  requests: readonly WorkloadRequest[],
  followers: Map<number, WorkloadRequest[]>,
): readonly WorkloadRequest[] {
  if (!requests.some((r) => r.after !== undefined)) return requests;
  const seen = new Set<number>();
  const timed: WorkloadRequest[] = [];
  for (const r of requests) {
    const a = r.after;
    // Only an earlier request can release a later one, so no request waits on itself or on a
    // cycle. One whose request is not earlier in the plan (a plan cut to its first N
    // requests, or to some ids) is sent at its own arrival time.
    if (a === undefined || !seen.has(a.id)) timed.push(r);
    else {
      if (!(Number.isFinite(a.gapMs) && a.gapMs >= 0)) {
        throw new RangeError(
          `request ${r.id}: gap after request ${a.id} must be >= 0 ms, got ${a.gapMs}`,
        );
      }
      const list = followers.get(a.id);
      if (list) list.push(r);
      else followers.set(a.id, [r]);
    }
    seen.add(r.id);
  }
  return timed;
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
