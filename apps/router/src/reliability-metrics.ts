// The failure-model metrics, on the router's registry: where upstream failures happen (before
// or after the client saw a byte, and why), ejections, admission refusals and the queue. Labels
// carry rank numbers and causes, never worker URLs.
import { Counter, Gauge, type Registry } from 'prom-client';
import type { Admission } from './admission.ts';
import type { RankTable } from './rank-table.ts';

export interface ReliabilityMetrics {
  failure(rank: string, phase: 'before-client-bytes' | 'after-client-bytes', cause: string): void;
  rejected(status: number): void;
}

export function createReliabilityMetrics(
  registry: Registry,
  table: RankTable,
  admission: Admission,
  ejections: () => number,
): ReliabilityMetrics {
  const failures = new Counter({
    name: 'kvroute_router_upstream_failures_total',
    help: 'Upstream attempts that failed, by rank, phase (before or after the client got a byte) and cause',
    labelNames: ['rank', 'phase', 'cause'],
    registers: [registry],
  });
  const rejected = new Counter({
    name: 'kvroute_router_rejected_total',
    help: 'Requests answered by the router itself with an error status (admission, parse, no rank)',
    labelNames: ['status'],
    registers: [registry],
  });
  new Gauge({
    name: 'kvroute_router_rank_ejected',
    help: '1 while the rank is ejected by outlier detection',
    labelNames: ['rank'],
    registers: [registry],
    collect() {
      this.reset();
      for (const r of table.info())
        if (!r.removed) this.set({ rank: String(r.rank) }, r.ejected ? 1 : 0);
    },
  });
  // A counter in Prometheus' naming (rate() and increase() apply), read from the outlier
  // detector's own count at scrape time.
  let reported = 0;
  new Counter({
    name: 'kvroute_router_ejections_total',
    help: 'Workers ejected by outlier detection since start',
    registers: [registry],
    collect() {
      const now = ejections();
      if (now > reported) this.inc(now - reported);
      reported = now;
    },
  });
  new Gauge({
    name: 'kvroute_router_queued_requests',
    help: 'Requests waiting for admission',
    registers: [registry],
    collect() {
      this.set(admission.queued);
    },
  });
  new Gauge({
    name: 'kvroute_router_admitted_requests',
    help: 'Requests admitted and being served',
    registers: [registry],
    collect() {
      this.set(admission.inFlight);
    },
  });
  new Gauge({
    name: 'kvroute_router_body_bytes',
    help: 'Request body bytes held in memory (--body-memory-bytes bounds it)',
    registers: [registry],
    collect() {
      this.set(admission.bodyBytes);
    },
  });
  return {
    failure: (rank, phase, cause) => failures.inc({ rank, phase, cause }),
    rejected: (status) => rejected.inc({ status: String(status) }),
  };
}
