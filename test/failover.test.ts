// (d) One worker killed mid-run: every request either succeeds (retried on another rank) or
// gets a clear 5xx in OpenAI's shape, and the counts add up to what was sent.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type Cluster, getText, postJson, startCluster, sumMetric } from './helpers/cluster.ts';

let cluster: Cluster;
beforeAll(async () => {
  // A tenth of real time: requests last a few tens of milliseconds, so some are in flight on
  // the worker when it dies.
  cluster = await startCluster({
    workers: 4,
    worker: { timeScale: 0.1 },
    routerArgs: ['--load-balance-method', 'round_robin'],
  });
});
afterAll(async () => {
  await cluster?.close();
});

describe('a worker dies mid-run', () => {
  it('retries what had not started answering, and accounts for every request', async () => {
    const TOTAL = 48;
    const CONCURRENCY = 8;
    const victim = cluster.workers[1]!;
    const statuses: number[] = [];
    const errors: string[] = [];
    let next = 0;
    let done = 0;
    let killed: Promise<void> | undefined;
    const client = async (): Promise<void> => {
      while (next < TOTAL) {
        const i = next++;
        const res = await postJson(`${cluster.url}/v1/completions`, {
          model: 'kvroute-mock',
          prompt: `request ${i}: ${'lorem ipsum '.repeat(40)}`,
          max_tokens: 24,
        });
        statuses.push(res.status);
        if (res.status !== 200) errors.push(res.body?.error?.message);
        if (++done === 12) killed = victim.close();
      }
    };
    await Promise.all(Array.from({ length: CONCURRENCY }, client));
    await killed;

    expect(statuses).toHaveLength(TOTAL);
    for (const s of statuses) expect(s === 200 || (s >= 500 && s <= 504)).toBe(true);
    for (const e of errors) expect(typeof e).toBe('string');
    // Non-streaming requests have sent nothing before they fail, so all are retried.
    expect(statuses.filter((s) => s === 200)).toHaveLength(TOTAL);

    const info = cluster.router.kvroute.table.info();
    expect(info.find((r) => r.url === victim.url)!.healthy).toBe(false);
    expect(info.every((r) => r.inFlightRequests === 0)).toBe(true);
    const metrics = (await getText(`${cluster.url}/metrics`)).text;
    expect(sumMetric(metrics, 'kvroute_router_requests_total')).toBe(TOTAL);
    expect(sumMetric(metrics, 'kvroute_router_retries_total')).toBeGreaterThan(0);
    // Passive health checks marked the dead worker's rank down.
    expect(metrics).toMatch(
      /kvroute_router_rank_healthy\{rank="1",url="[^"]+",worker="[^"]+",model="[^"]+"\} 0/,
    );
  });

  it('a cut stream gets a clear end, and the rank is freed', async () => {
    // The remaining workers keep serving; a streaming request to a worker killed mid-stream
    // cannot be retried (bytes already reached the client), so the stream ends with an explicit
    // error event in OpenAI's shape instead of a silent cut.
    const res = await fetch(`${cluster.url}/v1/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ prompt: 'stream', max_tokens: 4000, stream: true }),
    });
    expect(res.status).toBe(200);
    const rank = Number(res.headers.get('x-kvroute-rank'));
    const reader = res.body!.getReader();
    await reader.read();
    const worker = cluster.workers.find(
      (w) => w.url === cluster.router.kvroute.table.slot(rank)!.worker.url,
    )!;
    await worker.close();
    const decoder = new TextDecoder();
    let text = '';
    for (let r = await reader.read(); !r.done; r = await reader.read()) {
      text += decoder.decode(r.value, { stream: true });
    }
    const events = text.split('\n\n').filter((e) => e.startsWith('data: '));
    const errorEvent = events.find((e) => e.includes('"error"'));
    expect(errorEvent).toBeDefined();
    expect(JSON.parse(errorEvent!.slice(6)).error).toMatchObject({
      type: 'server_error',
      code: 'upstream_error',
    });
    expect(events.at(-1)).toBe('data: [DONE]');
    const info = cluster.router.kvroute.table.info();
    expect(info.every((r) => r.inFlightRequests === 0)).toBe(true);
    const metrics = (await getText(`${cluster.url}/metrics`)).text;
    expect(metrics).toMatch(
      /kvroute_router_requests_total\{route="\/v1\/completions",rank="\d",reason="round-robin",status="502"\} 1/,
    );
  });
});
