// Cutting a scenario's plan down to what a validation run sends. Both the live run and the
// simulation get the same cut plan, so the comparison stays like for like.
import type { PlanRequest, ValidatePlan } from './types.ts';

export interface ScaleOptions {
  /** Keep the first N requests the scenario sends: closed loop by nominal start (each
   * client's think times summed; ties: earlier turns first), open loop by arrival. */
  requests?: number;
  /** Closed loop: keep the first C clients. Open loop: not a cut (it bounds in-flight requests). */
  concurrency?: number;
}

export function scalePlan<P extends ValidatePlan>(plan: P, opts: ScaleOptions): P {
  if (plan.mode === 'closed') {
    let clients = plan.clients;
    if (opts.concurrency !== undefined) clients = clients.slice(0, opts.concurrency);
    if (opts.requests !== undefined) {
      // Nominal start: the client's think times summed, service time left out (unknown
      // before the run). The N earliest are what the scenario sends first; within a client
      // nominal starts only grow, so each client keeps a prefix of its session.
      const order: { r: PlanRequest; at: number; client: number; seq: number }[] = [];
      clients.forEach((c, client) => {
        let at = 0;
        c.forEach((r, seq) => {
          at += r.thinkMs ?? 0;
          order.push({ r, at, client, seq });
        });
      });
      order.sort((a, b) => a.at - b.at || a.seq - b.seq || a.client - b.client);
      const keep = new Set(order.slice(0, opts.requests).map((o) => o.r));
      clients = clients.map((c) => c.filter((r) => keep.has(r))).filter((c) => c.length > 0);
    }
    const kept = new Set(clients.flat().map((r) => r.id));
    return { ...plan, clients, requests: plan.requests.filter((r) => kept.has(r.id)) };
  }
  const requests =
    opts.requests !== undefined ? plan.requests.slice(0, opts.requests) : plan.requests;
  return { ...plan, requests };
}

/** The plan restricted to the given request ids (an interrupted run's completed requests). */
export function restrictPlan<P extends ValidatePlan>(plan: P, ids: ReadonlySet<number>): P {
  if (plan.mode === 'closed') {
    const clients = plan.clients
      .map((c) => c.filter((r) => ids.has(r.id)))
      .filter((c) => c.length > 0);
    return { ...plan, clients, requests: plan.requests.filter((r) => ids.has(r.id)) };
  }
  return { ...plan, requests: plan.requests.filter((r) => ids.has(r.id)) };
}

/**
 * A plain PlanRequest with exactly the plan fields of `r` (a workload request, or a
 * recording's line), its token ids copied into a Uint32Array; other fields are dropped.
 */
export function copyPlanRequest(r: PlanRequest): PlanRequest {
  const q: PlanRequest = {
    id: r.id,
    clientId: r.clientId,
    inputIds: Uint32Array.from(r.inputIds),
    outputTokens: r.outputTokens,
    sessionKey: r.sessionKey,
  };
  if (r.thinkMs !== undefined) q.thinkMs = r.thinkMs;
  if (r.arrivalMs !== undefined) q.arrivalMs = r.arrivalMs;
  if (r.routingKey !== undefined) q.routingKey = r.routingKey;
  if (r.tenant !== undefined) q.tenant = r.tenant;
  return q;
}

/**
 * The plan with each request replaced by `fn(request)`. A request listed in both `clients`
 * and `requests` stays one object in the result.
 */
function mapRequests<P extends ValidatePlan>(plan: P, fn: (r: PlanRequest) => PlanRequest): P {
  const byId = new Map<number, PlanRequest>();
  const get = (r: PlanRequest) => {
    let q = byId.get(r.id);
    if (!q) {
      q = fn(r);
      byId.set(r.id, q);
    }
    return q;
  };
  return {
    ...plan,
    clients: plan.clients.map((c) => c.map(get)),
    requests: plan.requests.map(get),
  };
}

/**
 * Plain copies of a workload plan's requests, token ids read once into arrays (a replay
 * plan builds them on access) and without `outputIds`: a live engine generates its own
 * reply tokens, so the plan's replies can never be in its cache. The simulator then caches
 * what the target can match (the input), not the plan's imaginary replies.
 */
export function materializePlan<P extends ValidatePlan>(plan: P): P {
  return mapRequests(plan, copyPlanRequest);
}

/** The plan with every request's token ids replaced (e.g. by what a chat target sees). */
export function mapInputIds<P extends ValidatePlan>(
  plan: P,
  fn: (ids: ArrayLike<number>) => Uint32Array,
): P {
  return mapRequests(plan, (r) => ({ ...r, inputIds: fn(r.inputIds) }));
}
