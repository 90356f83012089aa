// Prometheus metrics through prom-client, in a Registry of this worker's own: several
// workers (the router's --mock-workers N, tests) live in one process and must not share
// the global registry. Two families side by side: the worker's own `kvroute_worker_*`
// (labelled by DP rank), and SGLang's `sglang:*` names and labels, so dashboards and alerts
// written for SGLang work against the mock unchanged.
import { Counter, Gauge, Histogram, Registry } from 'prom-client';
import type { MockEngine, RankLoadInfo } from './engine.ts';

export interface WorkerMetrics {
  registry: Registry;
  requests: Counter<'endpoint' | 'status'>;
  injectedFailures: Counter<'reason'>;
  /** A request's first token: its prompt, the cached part, and seconds since arrival. */
  firstToken(rank: number, promptTokens: number, cachedTokens: number, ttftSeconds: number): void;
  /** A request finished with this many output tokens, `e2eSeconds` after arrival. */
  finished(rank: number, outputTokens: number, e2eSeconds: number): void;
  /** A request aborted because its client went away. */
  aborted(rank: number): void;
}

/** SGLang's bucket edges for TTFT and end-to-end latency (its production metrics). */
const SGLANG_TTFT_BUCKETS = [
  0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10, 15, 20, 25,
  30,
];
const SGLANG_E2E_BUCKETS = [
  0.1, 0.2, 0.3, 0.5, 0.8, 1, 1.5, 2, 2.5, 5, 10, 15, 20, 30, 40, 50, 60, 90, 120, 150, 180,
];

export function createWorkerMetrics(engine: MockEngine, modelName: string): WorkerMetrics {
  const registry = new Registry();
  const reg = { registers: [registry] };
  const rankLabel = { labelNames: ['dp_rank'] as const, ...reg };
  const requests = new Counter({
    name: 'kvroute_worker_requests_total',
    help: 'Inference requests by endpoint and HTTP status',
    labelNames: ['endpoint', 'status'] as const,
    ...reg,
  });
  const promptTokens = new Counter({
    name: 'kvroute_worker_prompt_tokens_total',
    help: 'Prompt tokens of requests that reached their first token, by DP rank',
    ...rankLabel,
  });
  const cachedTokens = new Counter({
    name: 'kvroute_worker_cached_tokens_total',
    help: 'Prompt tokens served from the radix cache (meta_info.cached_tokens), by DP rank',
    ...rankLabel,
  });
  const generationTokens = new Counter({
    name: 'kvroute_worker_generation_tokens_total',
    help: 'Output tokens produced, by DP rank',
    ...rankLabel,
  });
  const abortedRequests = new Counter({
    name: 'kvroute_worker_aborted_requests_total',
    help: 'Requests aborted because the client disconnected, by DP rank',
    ...rankLabel,
  });
  const injectedFailures = new Counter({
    name: 'kvroute_worker_injected_failures_total',
    help: 'Failures injected by --fail-rate / --fail-after',
    labelNames: ['reason'] as const,
    ...reg,
  });
  const ttft = new Histogram({
    name: 'kvroute_worker_time_to_first_token_seconds',
    help: 'Wall time from request arrival to the first token, by DP rank',
    buckets: [0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10],
    ...rankLabel,
  });
  const rankGauge = (
    name: string,
    help: string,
    pick: (l: RankLoadInfo) => number,
    labels: (rank: number) => Record<string, string> = (rank) => ({ dp_rank: String(rank) }),
    labelNames: readonly string[] = ['dp_rank'],
  ) =>
    new Gauge({
      name,
      help,
      labelNames,
      ...reg,
      collect() {
        for (const l of engine.loads()) this.set(labels(l.dp_rank), pick(l));
      },
    });
  rankGauge(
    'kvroute_worker_num_running_reqs',
    'Requests in prefill or decode, by DP rank',
    (l) => l.num_running_reqs,
  );
  rankGauge(
    'kvroute_worker_num_waiting_reqs',
    'Requests queued, by DP rank',
    (l) => l.num_waiting_reqs,
  );
  rankGauge(
    'kvroute_worker_num_used_tokens',
    'KV tokens locked or reserved, by DP rank',
    (l) => l.num_used_tokens,
  );

  // SGLang's names. Its tokenizer-side counters and histograms carry model_name; its
  // scheduler gauges are per scheduler (engine_type, tp_rank, pp_rank, and dp_rank under DP
  // attention), one per DP rank here.
  const model = { model_name: modelName };
  const modelLabel = { labelNames: ['model_name'] as const, ...reg };
  const sg = {
    promptTokens: new Counter({
      name: 'sglang:prompt_tokens_total',
      help: 'Number of prefill tokens processed.',
      ...modelLabel,
    }),
    generationTokens: new Counter({
      name: 'sglang:generation_tokens_total',
      help: 'Number of generation tokens processed.',
      ...modelLabel,
    }),
    cachedTokens: new Counter({
      name: 'sglang:cached_tokens_total',
      help: 'Number of cached prompt tokens.',
      ...modelLabel,
    }),
    requests: new Counter({
      name: 'sglang:num_requests_total',
      help: 'Number of requests processed.',
      ...modelLabel,
    }),
    aborted: new Counter({
      name: 'sglang:num_aborted_requests_total',
      help: 'Number of requests aborted.',
      ...modelLabel,
    }),
    ttft: new Histogram({
      name: 'sglang:time_to_first_token_seconds',
      help: 'Histogram of time to first token in seconds.',
      buckets: SGLANG_TTFT_BUCKETS,
      ...modelLabel,
    }),
    e2e: new Histogram({
      name: 'sglang:e2e_request_latency_seconds',
      help: 'Histogram of End-to-end request latency in seconds',
      buckets: SGLANG_E2E_BUCKETS,
      ...modelLabel,
    }),
  };
  for (const c of [sg.promptTokens, sg.generationTokens, sg.cachedTokens, sg.requests, sg.aborted])
    c.inc(model, 0);
  const schedulerLabelNames = ['model_name', 'engine_type', 'tp_rank', 'pp_rank', 'dp_rank'];
  const schedulerLabels = (rank: number) => ({
    model_name: modelName,
    engine_type: 'unified',
    tp_rank: '0',
    pp_rank: '0',
    dp_rank: String(rank),
  });
  // Per rank, for cache_hit_rate: SGLang reports its prefix cache hit rate per scheduler.
  const rankPrompt = new Map<number, number>();
  const rankCached = new Map<number, number>();
  const sgGauge = (name: string, help: string, pick: (l: RankLoadInfo) => number) =>
    rankGauge(name, help, pick, schedulerLabels, schedulerLabelNames);
  sgGauge('sglang:num_running_reqs', 'The number of running requests.', (l) => l.num_running_reqs);
  sgGauge(
    'sglang:num_queue_reqs',
    'The number of requests in the waiting queue.',
    (l) => l.num_waiting_reqs,
  );
  sgGauge('sglang:num_used_tokens', 'The number of used tokens.', (l) => l.num_used_tokens);
  sgGauge('sglang:token_usage', 'The token usage.', (l) =>
    l.max_total_num_tokens > 0 ? l.num_used_tokens / l.max_total_num_tokens : 0,
  );
  sgGauge(
    'sglang:max_total_num_tokens',
    'Maximum total number of tokens in the KV cache pool.',
    (l) => l.max_total_num_tokens,
  );
  sgGauge('sglang:cache_hit_rate', 'The prefix cache hit rate.', (l) => {
    const prompt = rankPrompt.get(l.dp_rank) ?? 0;
    return prompt > 0 ? (rankCached.get(l.dp_rank) ?? 0) / prompt : 0;
  });

  return {
    registry,
    requests,
    injectedFailures,
    firstToken(rank, prompt, cached, ttftSeconds) {
      const r = { dp_rank: String(rank) };
      promptTokens.inc(r, prompt);
      cachedTokens.inc(r, cached);
      ttft.observe(r, ttftSeconds);
      sg.promptTokens.inc(model, prompt);
      sg.cachedTokens.inc(model, cached);
      sg.ttft.observe(model, ttftSeconds);
      rankPrompt.set(rank, (rankPrompt.get(rank) ?? 0) + prompt);
      rankCached.set(rank, (rankCached.get(rank) ?? 0) + cached);
    },
    finished(rank, outputTokens, e2eSeconds) {
      generationTokens.inc({ dp_rank: String(rank) }, outputTokens);
      sg.generationTokens.inc(model, outputTokens);
      sg.requests.inc(model);
      sg.e2e.observe(model, e2eSeconds);
    },
    aborted(rank) {
      abortedRequests.inc({ dp_rank: String(rank) });
      sg.aborted.inc(model);
    },
  };
}
