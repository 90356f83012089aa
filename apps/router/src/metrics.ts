// Prometheus metrics on the router's own Registry (never prom-client's global one, so several
// routers in one process, as in tests, do not collide). Gauges that mirror state the router
// already keeps (in-flight, health, affinity table) are read at scrape time through collect(),
// so the request path pays nothing for them.
import {
  Counter,
  collectDefaultMetrics,
  Gauge,
  Histogram,
  type LabelValues,
  Registry,
} from 'prom-client';

export interface MetricsSources {
  /** Current per-rank state for the scrape-time gauges. */
  ranks(): readonly {
    rank: number;
    url: string;
    /** The `worker` label: the URL without credentials, or worker-r<rank> (see router.ts). */
    worker: string;
    /** The model the worker serves (its /v1/models id), or 'unknown'. */
    model: string;
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
  readonly ttftSeconds: Histogram<'rank' | 'worker' | 'model' | 'stream'>;
  readonly interTokenSeconds: Histogram<PerWorker>;
  readonly promptTokens: Counter<PerWorker>;
  readonly cachedTokens: Counter<PerWorker>;
  readonly outputTokens: Counter<PerWorker>;
  readonly withoutCachedTokens: Counter<PerWorker>;
  readonly retries: Counter<'rank' | 'cause'>;
  /** Client-seen duration of proxied requests, from the request to the last byte sent. */
  readonly requestDuration: Histogram<'route' | 'status'>;
  /**
   * Label-bound children for one rank, cached: the request path skips label hashing. `worker`
   * and `model` are the rank's current labels (a rank re-added with another worker rebinds).
   */
  rank(rank: string, worker: string, model: string): RankMetrics;
  /** The decision histogram bound to the dispatcher's method. */
  decision(method: string): BoundHistogram;
  /** Counts one answered request in `requests` (a bound series per label set, cached). */
  countRequest(route: string, rank: string, reason: string, status: string): void;
  /** Observes one proxied request's duration in `requestDuration` (bound series, cached). */
  observeDuration(route: string, status: string, seconds: number): void;
}

/** The labels of the per-worker families, as SGLang's router and vLLM label theirs. */
type PerWorker = 'rank' | 'worker' | 'model';

export interface RankMetrics {
  readonly worker: string;
  readonly model: string;
  ttftStream: BoundHistogram;
  ttftPlain: BoundHistogram;
  interToken: BoundHistogram;
  promptTokens: BoundCounter;
  cachedTokens: BoundCounter;
  outputTokens: BoundCounter;
  withoutCachedTokens: BoundCounter;
}

/** A histogram series bound to one label set (see bindHistogram). */
export interface BoundHistogram {
  observe(value: number): void;
}

/** A counter series bound to one label set (see bindCounter). */
export interface BoundCounter {
  inc(value: number): void;
}

const DECISION_BUCKETS = [1e-6, 5e-6, 1e-5, 2.5e-5, 5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 5e-3, 1e-2];
// Up to an hour, as vLLM's and SGLang's TTFT histograms go: long prompts behind a queue on a
// loaded fleet wait minutes, and a top bucket of 30 s would hide all of that in +Inf.
const TTFT_BUCKETS = [
  0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600,
];
// vLLM's inter-token latency buckets, from 10 ms to 80 s (a stalled decode).
const ITL_BUCKETS = [
  0.001, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1, 2.5, 5, 7.5, 10,
  20, 40, 80,
];
const DURATION_BUCKETS = [
  0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600,
];

// prom-client's label-bound children still validate the labels, rebuild the label hash string
// and look it up on every call (about 1 us per histogram observe in a CPU profile of the bench),
// and the request path makes two observes (decision, TTFT) and three counter increments. The bound series below let the first
// update of a series go through prom-client, keep the entry it creates in the metric's hash map,
// and apply later updates to that entry directly, exactly as prom-client would. Whenever the
// map no longer holds that entry (reset(), or not created yet) or the value is one prom-client
// treats specially (non-finite, negative), the update goes through prom-client again. This
// reads prom-client 15's internal `hashMap` (entries { labels, value } for counters and
// { labels, bucketValues, sum, count } for histograms); the version is pinned in package.json
// and test/metrics.test.ts checks that the exposition is identical to prom-client's own path.
interface SeriesMap<E> {
  hashMap: Record<string, E>;
}

/** The key of the entry prom-client created for `labels` (stored by reference), if any. */
function findSeries<E extends { labels: object }>(
  metric: SeriesMap<E>,
  labels: object,
): [string, E] | undefined {
  for (const key in metric.hashMap) {
    const entry = metric.hashMap[key]!;
    if (entry.labels === labels) return [key, entry];
  }
  return undefined;
}

interface HistogramEntry {
  labels: object;
  bucketValues: Record<number, number>;
  sum: number;
  count: number;
}

/** `buckets` must be the ones the histogram was created with (ascending). */
export function bindHistogram<T extends string>(
  histogram: Histogram<T>,
  labels: LabelValues<T>,
  buckets: readonly number[],
): BoundHistogram {
  const slow = histogram.labels(labels);
  const metric = histogram as unknown as SeriesMap<HistogramEntry>;
  // The bucket keys as the strings they are stored under: indexing by the number converts it
  // to its string on every update (about 120 ns against 35 ns, and a streamed response makes
  // one update per token).
  const keys = buckets.map(String);
  let key = '';
  let entry: HistogramEntry | undefined;
  return {
    observe(value) {
      if (entry !== undefined && metric.hashMap[key] === entry && Number.isFinite(value)) {
        entry.sum += value;
        entry.count += 1;
        // prom-client counts a value in the first bucket whose upper bound is >= it; above
        // the last bound only count (+Inf) moves.
        for (let i = 0; i < buckets.length; i++) {
          if (value <= buckets[i]!) {
            (entry.bucketValues as Record<string, number>)[keys[i]!]! += 1;
            break;
          }
        }
        return;
      }
      slow.observe(value);
      const found = findSeries(metric, labels);
      key = found?.[0] ?? '';
      entry = found?.[1];
    },
  };
}

interface CounterEntry {
  labels: object;
  value: number;
}

export function bindCounter<T extends string>(
  counter: Counter<T>,
  labels: LabelValues<T>,
): BoundCounter {
  const slow = counter.labels(labels);
  const metric = counter as unknown as SeriesMap<CounterEntry>;
  let key = '';
  let entry: CounterEntry | undefined;
  return {
    inc(value) {
      if (
        entry !== undefined &&
        metric.hashMap[key] === entry &&
        Number.isFinite(value) &&
        value >= 0
      ) {
        entry.value += value;
        return;
      }
      slow.inc(value);
      const found = findSeries(metric, labels);
      key = found?.[0] ?? '';
      entry = found?.[1];
    },
  };
}

// Counters mirrored from a source that only offers totals: reset and re-add at scrape.
function mirrorCounter(c: Counter, value: number | undefined): void {
  c.reset();
  if (value !== undefined && value > 0) c.inc(value);
}

export function createRouterMetrics(sources: MetricsSources): RouterMetrics {
  const registry = new Registry();
  const registers = [registry];
  // process_* and nodejs_* (CPU, memory, event loop lag, GC), as prom-client defines them.
  collectDefaultMetrics({ register: registry });
  // prom-client names these three gauges *_total, which Prometheus reserves for counters
  // (`promtool check metrics` rejects them); their per-type families (nodejs_active_handles,
  // ...) stay.
  for (const name of [
    'nodejs_active_handles_total',
    'nodejs_active_requests_total',
    'nodejs_active_resources_total',
  ]) {
    registry.removeSingleMetric(name);
  }
  const requestDuration = new Histogram({
    name: 'kvroute_router_request_duration_seconds',
    help: 'Proxied requests from arrival to the last byte sent to the client (end-to-end latency), by route and HTTP status',
    labelNames: ['route', 'status'] as const,
    buckets: DURATION_BUCKETS,
    registers,
  });

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
    buckets: DECISION_BUCKETS,
    registers,
  });
  const ttftSeconds = new Histogram({
    name: 'kvroute_router_upstream_ttft_seconds',
    help: 'From forwarding to the first response body byte from the worker; for streams, to the first event carrying output (the time to first token)',
    labelNames: ['rank', 'worker', 'model', 'stream'] as const,
    buckets: TTFT_BUCKETS,
    registers,
  });
  const perWorker = ['rank', 'worker', 'model'] as const;
  const interTokenSeconds = new Histogram({
    name: 'kvroute_router_inter_token_latency_seconds',
    help: 'Streams: time between successive SSE events carrying generated tokens, as the router received them from the worker',
    labelNames: perWorker,
    buckets: ITL_BUCKETS,
    registers,
  });
  // The hit rate is cached_tokens_total / prompt_tokens_total, so both count only requests
  // whose worker reported its cached tokens; the others are counted apart below, never as 0%.
  const promptTokens = new Counter({
    name: 'kvroute_router_prompt_tokens_total',
    help: 'Prompt tokens as reported by workers (usage.prompt_tokens / meta_info.prompt_tokens), of requests whose worker also reported cached tokens',
    labelNames: perWorker,
    registers,
  });
  const cachedTokens = new Counter({
    name: 'kvroute_router_cached_tokens_total',
    help: 'Prompt tokens served from the prefix cache as reported by workers (cached_tokens)',
    labelNames: perWorker,
    registers,
  });
  const withoutCachedTokens = new Counter({
    name: 'kvroute_router_requests_without_cached_tokens_total',
    help: 'Answered requests whose worker reported usage without a cached-token count (left out of the prompt/cached token counters and so of the hit rate)',
    labelNames: perWorker,
    registers,
  });
  const outputTokens = new Counter({
    name: 'kvroute_router_output_tokens_total',
    help: 'Generated tokens as reported by workers (usage.completion_tokens / meta_info.completion_tokens)',
    labelNames: perWorker,
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
    labelNames: perWorker,
    registers,
    collect() {
      this.reset();
      for (const r of sources.ranks())
        if (!r.removed)
          this.set({ rank: String(r.rank), worker: r.worker, model: r.model }, r.inFlightRequests);
    },
  });
  new Gauge({
    name: 'kvroute_router_in_flight_tokens',
    help: 'Tokens (prompt + max new tokens) of in-flight requests per rank, as the policy sees them',
    labelNames: perWorker,
    registers,
    collect() {
      this.reset();
      for (const r of sources.ranks())
        if (!r.removed)
          this.set({ rank: String(r.rank), worker: r.worker, model: r.model }, r.inFlightTokens);
    },
  });
  new Gauge({
    name: 'kvroute_router_rank_healthy',
    help: '1 when the rank is routable, 0 when marked down',
    labelNames: ['rank', 'url', 'worker', 'model'] as const,
    registers,
    collect() {
      this.reset();
      for (const r of sources.ranks()) {
        if (!r.removed)
          this.set(
            { rank: String(r.rank), url: r.url, worker: r.worker, model: r.model },
            r.healthy ? 1 : 0,
          );
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
  const byMethod = new Map<string, BoundHistogram>();
  // route -> rank -> reason -> status: plain lookups on the strings the caller already has,
  // instead of a label object and a label hash string per request.
  const byRequest = new Map<string, Map<string, Map<string, Map<string, BoundCounter>>>>();
  const byDuration = new Map<string, Map<string, BoundHistogram>>();
  const nested = <V>(m: Map<string, V>, key: string, make: () => V): V => {
    let v = m.get(key);
    if (v === undefined) {
      v = make();
      m.set(key, v);
    }
    return v;
  };
  return {
    registry,
    requests,
    decisionSeconds,
    ttftSeconds,
    interTokenSeconds,
    promptTokens,
    cachedTokens,
    outputTokens,
    withoutCachedTokens,
    retries,
    requestDuration,
    rank(rank, worker, model) {
      let m = byRank.get(rank);
      if (!m || m.worker !== worker || m.model !== model) {
        const labels = { rank, worker, model };
        m = {
          worker,
          model,
          ttftStream: bindHistogram(ttftSeconds, { ...labels, stream: 'true' }, TTFT_BUCKETS),
          ttftPlain: bindHistogram(ttftSeconds, { ...labels, stream: 'false' }, TTFT_BUCKETS),
          interToken: bindHistogram(interTokenSeconds, labels, ITL_BUCKETS),
          promptTokens: bindCounter(promptTokens, labels),
          cachedTokens: bindCounter(cachedTokens, labels),
          outputTokens: bindCounter(outputTokens, labels),
          withoutCachedTokens: bindCounter(withoutCachedTokens, labels),
        };
        byRank.set(rank, m);
      }
      return m;
    },
    decision(method) {
      let h = byMethod.get(method);
      if (!h) {
        h = bindHistogram(decisionSeconds, { method }, DECISION_BUCKETS);
        byMethod.set(method, h);
      }
      return h;
    },
    countRequest(route, rank, reason, status) {
      const byRank = nested(byRequest, route, () => new Map());
      const byReason = nested(byRank, rank, () => new Map());
      const byStatus = nested(byReason, reason, () => new Map());
      const series = nested(byStatus, status, () =>
        bindCounter(requests, { route, rank, reason, status }),
      );
      series.inc(1);
    },
    observeDuration(route, status, seconds) {
      const byStatus = nested(byDuration, route, () => new Map());
      nested(byStatus, status, () =>
        bindHistogram(requestDuration, { route, status }, DURATION_BUCKETS),
      ).observe(seconds);
    },
  };
}
