// (b) streams arrive incrementally, (c) a client abort mid-stream releases the rank's
// in-flight count and reaches the worker. Workers run slower than real time here (time scale
// 3), so a stream's tokens are produced over more than a second.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type Cluster, getText, startCluster, sumMetric, waitFor } from './helpers/cluster.ts';

let cluster: Cluster;
beforeAll(async () => {
  cluster = await startCluster({
    workers: 4,
    // Three times slower than real time: the stream lasts over a second, so the checks made
    // at its first chunk cannot race its end even on a loaded machine.
    worker: { timeScale: 3 },
    routerArgs: ['--load-balance-method', 'round_robin'],
  });
});
afterAll(async () => {
  await cluster?.close();
});

const inFlight = (): number =>
  cluster.router.kvroute.table.tracker.ranks.reduce((s, r) => s + r.inFlightRequests, 0);

async function workerRunning(): Promise<number> {
  let running = 0;
  for (const w of cluster.workers) {
    const loads = JSON.parse((await getText(`${w.url}/v1/loads`)).text) as {
      loads: { num_running_reqs: number; num_waiting_reqs: number }[];
    };
    for (const l of loads.loads) running += l.num_running_reqs + l.num_waiting_reqs;
  }
  return running;
}

function streamRequest(maxTokens: number, signal?: AbortSignal): Promise<Response> {
  return fetch(`${cluster.url}/v1/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({
      model: 'kvroute-mock',
      messages: [{ role: 'user', content: 'Stream me a story about caches.' }],
      max_tokens: maxTokens,
      stream: true,
      // Without it the worker sends no usage chunk (as OpenAI), and the router counts none.
      stream_options: { include_usage: true },
    }),
    ...(signal ? { signal } : {}),
  });
}

describe('streaming through the router', () => {
  it('delivers chunks as the worker produces them, not at the end', async () => {
    const res = await streamRequest(64);
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toContain('text/event-stream');
    const reader = res.body!.getReader();
    const decoder = new TextDecoder();
    const first = await reader.read();
    const firstAt = performance.now();
    expect(first.done).toBe(false);
    // At the first chunk the worker is still generating: the router did not wait for the end.
    expect(inFlight()).toBe(1);
    expect(await workerRunning()).toBe(1);
    let text = decoder.decode(first.value, { stream: true });
    const arrivals = [firstAt];
    for (let r = await reader.read(); !r.done; r = await reader.read()) {
      arrivals.push(performance.now());
      text += decoder.decode(r.value, { stream: true });
    }
    const events = text.split('\n\n').filter((e) => e.startsWith('data: '));
    expect(events.length).toBeGreaterThanOrEqual(64);
    expect(events.at(-1)).toBe('data: [DONE]');
    const last = JSON.parse(events.at(-2)!.slice(6));
    expect(last.usage.completion_tokens).toBe(64);
    // Many reads at distinct times (a buffered response would arrive in one or two reads).
    expect(arrivals.length).toBeGreaterThan(5);
    expect(arrivals.at(-1)!).toBeGreaterThan(firstAt);
    await waitFor(() => inFlight() === 0, 'in-flight to drop after the stream ended');
    const metrics = (await getText(`${cluster.url}/metrics`)).text;
    expect(sumMetric(metrics, 'kvroute_router_prompt_tokens_total')).toBe(last.usage.prompt_tokens);
    expect(metrics).toContain('kvroute_router_upstream_ttft_seconds_count{rank=');
  });

  it('a client abort mid-stream releases the in-flight count and aborts the worker request', async () => {
    const ac = new AbortController();
    const res = await streamRequest(2000, ac.signal);
    const reader = res.body!.getReader();
    await reader.read();
    expect(inFlight()).toBe(1);
    expect(await workerRunning()).toBe(1);
    ac.abort();
    await waitFor(() => inFlight() === 0, 'router in-flight count to drop to 0');
    await waitFor(
      async () => (await workerRunning()) === 0,
      'the worker to drop the aborted request',
    );
    expect(cluster.router.kvroute.table.tracker.ranks.every((r) => r.inFlightTokens === 0)).toBe(
      true,
    );
    const metrics = (await getText(`${cluster.url}/metrics`)).text;
    expect(metrics).toMatch(
      /kvroute_router_requests_total\{route="\/v1\/chat\/completions",rank="\d",reason="round-robin",status="499"\} 1/,
    );
  });
});
