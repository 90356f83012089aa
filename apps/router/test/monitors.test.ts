import { Agent } from 'undici';
import { afterEach, describe, expect, it } from 'vitest';
import { HealthMonitor } from '../src/health.ts';
import { LoadPoller } from '../src/load-poller.ts';
import { parseLoadsResponse, parseVllmMetrics } from '../src/load-report.ts';
import { RankTable } from '../src/rank-table.ts';
import { type FakeWorker, startFakeWorker } from './helpers/fake-worker.ts';

const cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  while (cleanups.length) await cleanups.pop()!();
});
const quiet = { warn() {}, info() {} };

async function setup(n: number, dpAware = false, dpSize = 1) {
  const ws: FakeWorker[] = [];
  for (let i = 0; i < n; i++) ws.push(await startFakeWorker({ dpSize }));
  const agent = new Agent();
  cleanups.push(async () => {
    await agent.destroy();
    await Promise.all(ws.map((w) => w.close()));
  });
  const table = new RankTable();
  for (const w of ws) table.addWorker(w.url, dpAware ? dpSize : 1, dpAware);
  return { ws, agent, table };
}

describe('HealthMonitor', () => {
  it('marks a worker down after failureThreshold failed checks and up after successThreshold', async () => {
    const { ws, agent, table } = await setup(2);
    const health = new HealthMonitor(
      table,
      agent,
      {
        intervalMs: 0,
        timeoutMs: 500,
        failureThreshold: 2,
        successThreshold: 2,
        endpoint: '/health',
      },
      quiet,
    );
    let ok = false;
    ws[0]!.handlers.set('GET /health', (_q, res) => {
      res.writeHead(ok ? 200 : 503);
      res.end();
    });
    const w0 = table.worker(ws[0]!.url)!;
    await health.checkAll();
    expect(w0.healthy).toBe(true);
    await health.checkAll();
    expect(w0.healthy).toBe(false);
    expect(table.tracker.ranks.map((r) => r.healthy)).toEqual([false, true]);
    expect(w0.lastError).toContain('503');
    ok = true;
    await health.checkAll();
    expect(w0.healthy).toBe(false);
    await health.checkAll();
    expect(w0.healthy).toBe(true);
    expect(table.tracker.ranks[0]!.healthy).toBe(true);
  });

  it('times out a hanging health endpoint', async () => {
    const { ws, agent, table } = await setup(1);
    ws[0]!.handlers.set('GET /health', () => {});
    const health = new HealthMonitor(
      table,
      agent,
      {
        intervalMs: 0,
        timeoutMs: 50,
        failureThreshold: 1,
        successThreshold: 1,
        endpoint: '/health',
      },
      quiet,
    );
    await health.checkAll();
    expect(table.worker(ws[0]!.url)!.healthy).toBe(false);
    expect(table.worker(ws[0]!.url)!.lastError).toMatch(/timed out|abort/i);
  });

  it('passive: a connect error marks down at once, 5xx count as strikes', async () => {
    const { ws, agent, table } = await setup(1);
    const health = new HealthMonitor(
      table,
      agent,
      {
        intervalMs: 0,
        // Nothing here hangs: a generous timeout keeps a loaded machine from failing the check.
        timeoutMs: 2_000,
        failureThreshold: 3,
        successThreshold: 1,
        endpoint: '/health',
      },
      quiet,
    );
    const w = table.worker(ws[0]!.url)!;
    health.reportServerError(w, '500');
    health.reportServerError(w, '500');
    expect(w.healthy).toBe(true);
    health.reportSuccess(w);
    health.reportServerError(w, '500');
    health.reportServerError(w, '500');
    expect(w.healthy).toBe(true);
    health.reportServerError(w, '500');
    expect(w.healthy).toBe(false);
    await health.checkAll();
    expect(w.healthy).toBe(true);
    health.reportConnectError(w, 'ECONNREFUSED');
    expect(w.healthy).toBe(false);
  });
});

describe('RankTable', () => {
  it('keeps rank indexes stable across removal and reuses tombstones', () => {
    const table = new RankTable();
    table.addWorker('http://a', 2, true);
    table.addWorker('http://b', 2, true);
    table.tracker.onDispatch(3, 10);
    table.removeWorker('http://a');
    expect(table.tracker.ranks.map((r) => r.healthy)).toEqual([false, false, true, true]);
    expect(table.tracker.ranks[3]!.inFlightRequests).toBe(1);
    table.addWorker('http://c', 1, false);
    expect(table.info().map((r) => [r.rank, r.url, r.dpRank, r.healthy])).toEqual([
      [0, 'http://c', null, true],
      [1, 'http://a', 1, false],
      [2, 'http://b', 0, true],
      [3, 'http://b', 1, true],
    ]);
  });

  it('views exclude failed ranks and add external load without touching the tracker', () => {
    const table = new RankTable();
    table.addWorker('http://a', 1, false);
    table.addWorker('http://b', 1, false);
    expect(table.view()).toBe(table.tracker.ranks);
    table.setExternal(1, 5);
    const v = table.view(new Set([0]));
    expect(v.map((r) => [r.healthy, r.inFlightRequests])).toEqual([
      [false, 0],
      [true, 5],
    ]);
    expect(table.tracker.ranks.map((r) => [r.healthy, r.inFlightRequests])).toEqual([
      [true, 0],
      [true, 0],
    ]);
    expect(table.hasHealthy(new Set([0, 1]))).toBe(false);
  });
});

describe('LoadPoller', () => {
  it('adds what SGLang /v1/loads reports beyond the router own count, per DP rank', async () => {
    const { ws, agent, table } = await setup(1, true, 2);
    ws[0]!.handlers.set('GET /v1/loads', (_q, res) => {
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(
        JSON.stringify({
          dp_size: 2,
          loads: [
            {
              dp_rank: 0,
              num_running_reqs: 3,
              num_waiting_reqs: 2,
              num_used_tokens: 10,
              max_total_num_tokens: 100,
            },
            {
              dp_rank: 1,
              num_running_reqs: 1,
              num_waiting_reqs: 0,
              num_used_tokens: 10,
              max_total_num_tokens: 100,
            },
          ],
        }),
      );
    });
    table.tracker.onDispatch(0, 1);
    await new LoadPoller(table, agent, 1000, 500).pollAll();
    expect(table.info().map((r) => r.externalRequests)).toEqual([4, 1]);
    expect(table.view().map((r) => r.inFlightRequests)).toEqual([5, 1]);
    expect(table.worker(ws[0]!.url)!.loadSource).toBe('loads');
  });

  it('falls back to vLLM /metrics, and gives up on workers that report neither', async () => {
    const { ws, agent, table } = await setup(2);
    ws[0]!.handlers.set('GET /metrics', (_q, res) => {
      res.writeHead(200, { 'content-type': 'text/plain' });
      res.end(
        '# HELP x\nvllm:num_requests_running{model_name="m"} 2.0\nvllm:num_requests_waiting{model_name="m"} 1.0\n',
      );
    });
    const poller = new LoadPoller(table, agent, 1000, 500);
    await poller.pollAll();
    expect(table.info().map((r) => r.externalRequests)).toEqual([3, 0]);
    expect(table.worker(ws[0]!.url)!.loadSource).toBe('metrics');
    expect(table.worker(ws[1]!.url)!.loadSource).toBe('none');
  });
});

describe('load report parsers', () => {
  it('parse /v1/loads and reject malformed bodies', () => {
    expect(parseLoadsResponse({ loads: [{ num_running_reqs: 1, num_waiting_reqs: 2 }] })).toEqual([
      { dpRank: 0, running: 1, waiting: 2 },
    ]);
    expect(parseLoadsResponse({ loads: [{ num_running_reqs: 'x' }] })).toBeUndefined();
    expect(parseLoadsResponse({})).toBeUndefined();
    expect(parseLoadsResponse(null)).toBeUndefined();
  });

  it('sum vLLM gauges over label sets', () => {
    const text = [
      'vllm:num_requests_running{engine="0"} 2',
      'vllm:num_requests_running{engine="1"} 3',
      'vllm:num_requests_waiting{engine="0"} 4',
      'vllm:num_requests_swapped 9',
    ].join('\n');
    expect(parseVllmMetrics(text)).toEqual({ dpRank: 0, running: 5, waiting: 4 });
    expect(parseVllmMetrics('sglang:num_running_reqs 3')).toBeUndefined();
  });
});
