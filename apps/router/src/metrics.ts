// Prometheus metrics on the router's own Registry (never prom-client's global one, so several
// routers in one process, as in tests, do not collide). Gauges that mirror state the router
// already keeps (in-flight, health, affinity table) are read at scrape time through collect(),
// so the request path pays nothing for them.
import { Counter, Gauge, Histogram, Registry } from 'prom-client';

export interface MetricsSources {
  /** Current per-rank state for the scrape-time gauges. */
  ranks(): readonly {
    rank: number;
    url: string;
    healthy: boolean;
    removed: boolean;
    inFlightRequests: number;
    inFlightTokens: number;
  }[];
  /** The dispatcher's stats(): affinity table counters, if the policy has one. */
  affinity():
    | { size: number; hits: number; misses: number; evictions: number; repicks?: number }
    | undefined;
}

export interface RouterMetrics {
  readonly registry: Registry;
  readonly requests: Counter<'route' | 'rank' | 'reason' | 'status'>;
  readonly decisionSeconds: Histogram<'method'>;
  readonly ttftSeconds: Histogram<'rank' | 'stream'>;
  readonly promptTokens: Counter<'rank'>;
  readonly cachedTokens: Counter<'rank'>;
  readonly retries: Counter<'rank' | 'cause'>;
  /** Label-bound children for one rank, cached: the request path skips label hashing. */
  rank(rank: string): RankMetrics;
  /** The decision histogram bound to the dispatcher's method. */
  decision(method: string): Histogram.Internal<'method'>;
}

export interface RankMetrics {
  ttftStream: Histogram.Internal<'rank' | 'stream'>;
  ttftPlain: Histogram.Internal<'rank' | 'stream'>;
  promptTokens: Counter.Internal;
  cachedTokens: Counter.Internal;
}

// Counters mirrored from a source that only offers totals: reset and re-add at scrape.
function mirrorCounter(c: Counter, value: number | undefined): void {
  c.reset();
  if (value !== undefined && value > 0) c.inc(value);
}

export function createRouterMetrics(sources: MetricsSources): RouterMetrics {
  const registry = new Registry();
  const registers = [registry];

  const requests = new Counter({
    name: 'kvroute_router_requests_total',
    help: 'Requests answered, by route, final rank, decision reason and HTTP status (499 = client went away)',
    labelNames: ['route', 'rank', 'reason', 'status'] as const,
    registers,
  });
  const decisionSeconds = new Histogram({
    name: 'kvroute_router_decision_seconds',
    help: 'Time spent in the policy dispatch (tokenizing excluded)',
    labelNames: ['method'] as const,
    buckets: [1e-6, 5e-6, 1e-5, 2.5e-5, 5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 5e-3, 1e-2],
    registers,
  });
  const ttftSeconds = new Histogram({
    name: 'kvroute_router_upstream_ttft_seconds',
    help: 'From forwarding to the first response body byte from the worker (the time to first token for streams)',
    labelNames: ['rank', 'stream'] as const,
    buckets: [0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30],
    registers,
  });
  const promptTokens = new Counter({
    name: 'kvroute_router_prompt_tokens_total',
    help: 'Prompt tokens as reported by workers (usage.prompt_tokens / meta_info.prompt_tokens)',
    labelNames: ['rank'] as const,
    registers,
  });
  const cachedTokens = new Counter({
    name: 'kvroute_router_cached_tokens_total',
    help: 'Prompt tokens served from the prefix cache as reported by workers (cached_tokens)',
    labelNames: ['rank'] as const,
    registers,
  });
  const retries = new Counter({
    name: 'kvroute_router_retries_total',
    help: 'Attempts that failed before any byte reached the client and were retried elsewhere, by failed rank and cause',
    labelNames: ['rank', 'cause'] as const,
    registers,
  });

  new Gauge({
    name: 'kvroute_router_in_flight_requests',
    help: 'Requests forwarded to a rank and not yet finished',
    labelNames: ['rank'] as const,
    registers,
    collect() {
      this.reset();
      for (const r of sources.ranks())
        if (!r.removed) this.set({ rank: String(r.rank) }, r.inFlightRequests);
    },
  });
  new Gauge({
    name: 'kvroute_router_in_flight_tokens',
    help: 'Tokens (prompt + max new tokens) of in-flight requests per rank, as the policy sees them',
    labelNames: ['rank'] as const,
    registers,
    collect() {
      this.reset();
      for (const r of sources.ranks())
        if (!r.removed) this.set({ rank: String(r.rank) }, r.inFlightTokens);
    },
  });
  new Gauge({
    name: 'kvroute_router_rank_healthy',
    help: '1 when the rank is routable, 0 when marked down',
    labelNames: ['rank', 'url'] as const,
    registers,
    collect() {
      this.reset();
      for (const r of sources.ranks()) {
        if (!r.removed) this.set({ rank: String(r.rank), url: r.url }, r.healthy ? 1 : 0);
      }
    },
  });
  new Gauge({
    name: 'kvroute_router_affinity_entries',
    help: 'Routing keys in the affinity table',
    registers,
    collect() {
      this.set(sources.affinity()?.size ?? 0);
    },
  });
  const affinityCounter = (
    name: string,
    help: string,
    pick: (a: NonNullable<ReturnType<MetricsSources['affinity']>>) => number | undefined,
  ) =>
    new Counter({
      name,
      help,
      registers,
      collect() {
        const a = sources.affinity();
        mirrorCounter(this, a ? pick(a) : 0);
      },
    });
  affinityCounter(
    'kvroute_router_affinity_hits_total',
    'Requests whose routing key was found in the affinity table',
    (a) => a.hits,
  );
  affinityCounter(
    'kvroute_router_affinity_misses_total',
    'Requests whose routing key was not in the table',
    (a) => a.misses,
  );
  affinityCounter(
    'kvroute_router_affinity_evictions_total',
    'Affinity entries dropped (LRU or TTL)',
    (a) => a.evictions,
  );
  affinityCounter(
    'kvroute_router_affinity_repicks_total',
    'Affinity hits whose rank was down and were moved',
    (a) => a.repicks,
  );

  const byRank = new Map<string, RankMetrics>();
  const byMethod = new Map<string, Histogram.Internal<'method'>>();
  return {
    registry,
    requests,
    decisionSeconds,
    ttftSeconds,
    promptTokens,
    cachedTokens,
    retries,
    rank(rank) {
      let m = byRank.get(rank);
      if (!m) {
        m = {
          ttftStream: ttftSeconds.labels({ rank, stream: 'true' }),
          ttftPlain: ttftSeconds.labels({ rank, stream: 'false' }),
          promptTokens: promptTokens.labels({ rank }),
          cachedTokens: cachedTokens.labels({ rank }),
        };
        byRank.set(rank, m);
      }
      return m;
    },
    decision(method) {
      let h = byMethod.get(method);
      if (!h) {
        h = decisionSeconds.labels({ method });
        byMethod.set(method, h);
      }
      return h;
    },
  };
}
