// PD mode when the client goes away mid-stream, and readiness with a side down. A streaming
// client that disconnects after its first events must release its admission slot and decode
// load at once (the decode call waited for a drain that never came, until the request
// timeout, so enough such clients filled the router); and /readiness must say 503 while no
// decode server can serve, since no request can then be answered.
import { afterEach, describe, expect, it } from 'vitest';
import { type PdCluster, startPdCluster } from './helpers/pd-cluster.ts';

let cluster: PdCluster | undefined;
afterEach(async () => {
  await cluster?.close();
  cluster = undefined;
});

/** A chat completion of one user message through the cluster's router. */
function chat(
  c: PdCluster,
  content: string,
  body: Record<string, unknown>,
  signal?: AbortSignal,
): Promise<Response> {
  return fetch(`${c.url}/v1/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'm', messages: [{ role: 'user', content }], ...body }),
    ...(signal ? { signal } : {}),
  });
}

describe('PD mode, a client that leaves mid-stream', () => {
  it('gives back its admission slot and decode load at once', async () => {
    cluster = await startPdCluster({
      prefill: 1,
      decode: 1,
      // Real time: a 400-token stream runs for seconds.
      worker: { timeScale: 1 },
      routerArgs: ['--max-concurrent-requests', '2', '--queue-timeout-ms', '1500'],
    });
    const c = cluster;
    const leave = async (i: number): Promise<void> => {
      const ac = new AbortController();
      const res = await chat(
        c,
        `a long answer, please ${i}`,
        { max_tokens: 400, stream: true },
        ac.signal,
      );
      expect(res.status).toBe(200);
      const reader = res.body!.getReader();
      await reader.read(); // the first events: the stream has started
      ac.abort();
      await reader.cancel().catch(() => {});
    };
    await Promise.all([leave(1), leave(2)]);
    // Both slots are free again well within the queue timeout: a new request is served.
    const res = await chat(c, 'short', { max_tokens: 2 });
    expect(res.status, await res.text()).toBe(200);
    const state = c.router.kvroute;
    for (let i = 0; i < 100; i++) {
      if (state.pd!.decodeTable.tracker.ranks.every((r) => r.inFlightRequests === 0)) break;
      await new Promise((r) => setTimeout(r, 20));
    }
    expect(state.pd!.decodeTable.tracker.ranks.map((r) => r.inFlightRequests)).toEqual([0]);
    const metrics = await (await fetch(`${c.url}/metrics`)).text();
    expect(metrics).toMatch(/^kvroute_router_admitted_requests 0$/m);
    expect(metrics).toMatch(
      /^kvroute_pd_requests_total\{role="decode",rank="0",status="499"\} 2$/m,
    );
  });
});

describe('PD mode readiness', () => {
  it('is 503 while no decode server can serve, and names the decode side', async () => {
    cluster = await startPdCluster({ prefill: 1, decode: 2 });
    const c = cluster;
    const ready = await fetch(`${c.url}/readiness`);
    expect(ready.status).toBe(200);
    type Readiness = { status: string; decode: { healthy_ranks: number } };
    expect(((await ready.json()) as Readiness).decode).toEqual({
      healthy_ranks: 2,
      ranks: 2,
      checked_workers: 2,
    });
    // Both decode servers fail their checks (what the health monitor records).
    for (const w of c.router.kvroute.pd!.decodeTable.workers()) {
      c.router.kvroute.pd!.decodeHealth.reportConnectError(w, 'connection refused');
    }
    for (const path of ['/readiness', '/health']) {
      const r = await fetch(`${c.url}${path}`);
      expect(r.status, path).toBe(503);
      const body = (await r.json()) as Readiness;
      expect(body.status).toBe('unavailable');
      expect(body.decode.healthy_ranks).toBe(0);
    }
  });
});

describe('PD mode metrics', () => {
  it("count a decode given up because its prefill failed as that, not as the decode's error", async () => {
    cluster = await startPdCluster({
      prefill: 1,
      decode: 1,
      worker: { timeScale: 0.05 },
      // Every prefill request has its connection reset.
      prefillWorker: { failRate: 1, failMode: 'reset' },
      routerArgs: ['--max-retries', '0'],
    });
    const c = cluster;
    const res = await chat(c, 'hi', { max_tokens: 4 });
    expect(res.status).toBe(502);
    await res.text();
    const metrics = await (await fetch(`${c.url}/metrics`)).text();
    expect(metrics).toMatch(
      /^kvroute_pd_requests_total\{role="decode",rank="0",status="prefill-failed"\} 1$/m,
    );
    expect(metrics).not.toMatch(/role="decode",rank="0",status="error"/);
  });
});

describe('PD mode ejections', () => {
  it('count the decode side in kvroute_router_ejections_total', async () => {
    cluster = await startPdCluster({
      prefill: 1,
      decode: 2,
      // The decode servers answer every request with a 500; at most half are ejected.
      decodeWorker: { failRate: 1 },
      routerArgs: ['--outlier-consecutive-failures', '2', '--outlier-max-ejected-percent', '50'],
    });
    const c = cluster;
    for (let i = 0; i < 8; i++) {
      const res = await chat(c, `hi ${i}`, { max_tokens: 2 });
      await res.text();
    }
    expect(c.router.kvroute.pd!.decodeOutlier.ejectionsTotal).toBeGreaterThanOrEqual(1);
    const metrics = await (await fetch(`${c.url}/metrics`)).text();
    const n = /^kvroute_router_ejections_total (\d+)$/m.exec(metrics);
    expect(Number(n?.[1])).toBe(
      c.router.kvroute.outlier.ejectionsTotal + c.router.kvroute.pd!.decodeOutlier.ejectionsTotal,
    );
    expect(Number(n?.[1])).toBeGreaterThanOrEqual(1);
  });
});
