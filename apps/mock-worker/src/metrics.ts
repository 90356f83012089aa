// Prometheus metrics through prom-client, in a Registry of this worker's own: several
// workers (the router's --mock-workers N, tests) live in one process and must not share
// the global registry.
import { Counter, Gauge, Histogram, Registry } from 'prom-client';
import type { MockEngine } from './engine.ts';

export interface WorkerMetrics {
  registry: Registry;
  requests: Counter<'endpoint' | 'status'>;
  promptTokens: Counter<'dp_rank'>;
  cachedTokens: Counter<'dp_rank'>;
  generationTokens: Counter<'dp_rank'>;
  aborted: Counter<'dp_rank'>;
  injectedFailures: Counter<'reason'>;
  ttft: Histogram<'dp_rank'>;
}

export function createWorkerMetrics(engine: MockEngine): WorkerMetrics {
  const registry = new Registry();
  const requests = new Counter({
    name: 'kvroute_worker_requests_total',
    help: 'Inference requests by endpoint and HTTP status',
    labelNames: ['endpoint', 'status'] as const,
    registers: [registry],
  });
  const promptTokens = new Counter({
    name: 'kvroute_worker_prompt_tokens_total',
    help: 'Prompt tokens of requests that reached their first token, by DP rank',
    labelNames: ['dp_rank'] as const,
    registers: [registry],
  });
  const cachedTokens = new Counter({
    name: 'kvroute_worker_cached_tokens_total',
    help: 'Prompt tokens served from the radix cache (meta_info.cached_tokens), by DP rank',
    labelNames: ['dp_rank'] as const,
    registers: [registry],
  });
  const generationTokens = new Counter({
    name: 'kvroute_worker_generation_tokens_total',
    help: 'Output tokens produced, by DP rank',
    labelNames: ['dp_rank'] as const,
    registers: [registry],
  });
  const aborted = new Counter({
    name: 'kvroute_worker_aborted_requests_total',
    help: 'Requests aborted because the client disconnected, by DP rank',
    labelNames: ['dp_rank'] as const,
    registers: [registry],
  });
  const injectedFailures = new Counter({
    name: 'kvroute_worker_injected_failures_total',
    help: 'Failures injected by --fail-rate / --fail-after',
    labelNames: ['reason'] as const,
    registers: [registry],
  });
  const ttft = new Histogram({
    name: 'kvroute_worker_time_to_first_token_seconds',
    help: 'Wall time from request arrival to the first token, by DP rank',
    labelNames: ['dp_rank'] as const,
    buckets: [0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10],
    registers: [registry],
  });
  const gauge = (
    name: string,
    help: string,
    pick: (l: ReturnType<MockEngine['loads']>[number]) => number,
  ) =>
    new Gauge({
      name,
      help,
      labelNames: ['dp_rank'] as const,
      registers: [registry],
      collect() {
        for (const l of engine.loads()) this.set({ dp_rank: String(l.dp_rank) }, pick(l));
      },
    });
  gauge(
    'kvroute_worker_num_running_reqs',
    'Requests in prefill or decode, by DP rank',
    (l) => l.num_running_reqs,
  );
  gauge(
    'kvroute_worker_num_waiting_reqs',
    'Requests queued, by DP rank',
    (l) => l.num_waiting_reqs,
  );
  gauge(
    'kvroute_worker_num_used_tokens',
    'KV tokens locked or reserved, by DP rank',
    (l) => l.num_used_tokens,
  );
  return {
    registry,
    requests,
    promptTokens,
    cachedTokens,
    generationTokens,
    aborted,
    injectedFailures,
    ttft,
  };
}
