// Parsers for what workers say about their own load, used by --load-poll-interval to
// correct the router's in-flight counts for traffic it did not send (other routers, direct
// clients). SGLang: GET /v1/loads (JSON, per DP rank). vLLM: GET /metrics (Prometheus text,
// vllm:num_requests_running / vllm:num_requests_waiting, summed over label sets).

export interface WorkerLoad {
  dpRank: number;
  running: number;
  waiting: number;
  usedTokens?: number;
}

/** `{ dp_size, loads: [{ dp_rank, num_running_reqs, num_waiting_reqs, num_used_tokens }] }`. */
export function parseLoadsResponse(body: unknown): WorkerLoad[] | undefined {
  if (!body || typeof body !== 'object') return undefined;
  const loads = (body as { loads?: unknown }).loads;
  if (!Array.isArray(loads)) return undefined;
  const out: WorkerLoad[] = [];
  for (const [i, l] of loads.entries()) {
    if (!l || typeof l !== 'object') return undefined;
    const r = l as Record<string, unknown>;
    const running = r.num_running_reqs;
    const waiting = r.num_waiting_reqs ?? 0;
    if (typeof running !== 'number' || typeof waiting !== 'number') return undefined;
    const entry: WorkerLoad = {
      dpRank: typeof r.dp_rank === 'number' ? r.dp_rank : i,
      running,
      waiting,
    };
    if (typeof r.num_used_tokens === 'number') entry.usedTokens = r.num_used_tokens;
    out.push(entry);
  }
  return out;
}

const VLLM_LINE = /^vllm:num_requests_(running|waiting)(?:\{[^}]*\})?\s+([0-9.eE+-]+|NaN)/;

/** vLLM's Prometheus text; undefined when neither gauge is present (not a vLLM server). */
export function parseVllmMetrics(text: string): WorkerLoad | undefined {
  let running = 0;
  let waiting = 0;
  let seen = false;
  for (const line of text.split('\n')) {
    if (!line.startsWith('vllm:num_requests_')) continue;
    const m = VLLM_LINE.exec(line);
    if (!m) continue;
    const v = Number(m[2]);
    if (!Number.isFinite(v)) continue;
    seen = true;
    if (m[1] === 'running') running += v;
    else waiting += v;
  }
  return seen ? { dpRank: 0, running, waiting } : undefined;
}
