// The one-big-cache upper bound: the token hit rate a single radix cache holding
// the KV capacity of all ranks together would reach replaying the same requests in arrival
// order. No routing can beat it: splitting the capacity over ranks can only lose hits (a
// prefix cached on one rank is a miss on another). It ignores time (no locking, no requests
// overlapping), so it is an optimistic bound, not a simulation.
import { RadixCache } from '../cache/radix-cache.ts';
import { concat } from '../workloads/random.ts';
import type { WorkloadPlan, WorkloadRequest } from '../workloads/types.ts';

export interface CacheBound {
  capacityTokens: number;
  inputTokens: number;
  cachedTokens: number;
  /** cachedTokens / inputTokens. */
  hitRate: number;
}

/** Requests in the order a single cache would see them: open loop by arrival; closed loop round-robin by turn. */
function ordered(plan: WorkloadPlan): WorkloadRequest[] {
  if (plan.mode === 'open') return plan.requests;
  // Closed loop has no fixed times; interleave clients turn by turn, by first-turn delay.
  const out: WorkloadRequest[] = [];
  const clients = [...plan.clients].sort((a, b) => (a[0]?.thinkMs ?? 0) - (b[0]?.thinkMs ?? 0));
  const turns = Math.max(0, ...clients.map((c) => c.length));
  for (let t = 0; t < turns; t++) for (const c of clients) if (c[t]) out.push(c[t]!);
  return out;
}

export function oneBigCacheBound(plan: WorkloadPlan, capacityTokens: number): CacheBound {
  const cache = new RadixCache({ capacityTokens });
  let inputTokens = 0;
  let cachedTokens = 0;
  for (const req of ordered(plan)) {
    const ids = req.inputIds;
    const matched = cache.match(ids).matchedTokens;
    inputTokens += ids.length;
    cachedTokens += matched;
    // As a rank does at the end of a request: cache the prompt and, when known, the reply.
    const full = req.outputIds && req.outputIds.length > 0 ? concat([ids, req.outputIds]) : ids;
    const need = full.length - matched;
    const room = capacityTokens - cache.used;
    if (need > room) cache.evict(need - room);
    cache.insert(full);
  }
  return {
    capacityTokens,
    inputTokens,
    cachedTokens,
    hitRate: inputTokens === 0 ? 0 : cachedTokens / inputTokens,
  };
}
