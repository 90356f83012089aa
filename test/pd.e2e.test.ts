// Prefill/decode disaggregation end to end: mock prefill and decode workers (--role) behind the
// router in --pd-disaggregation mode, SGLang style and vLLM style, streaming and not, with DP
// ranks checked on both sides: the prefill side's bootstrap registry says which DP rank ran
// each room's prefill, the decode side records which rank it pulled the KV from.

import { spawnSync } from 'node:child_process';
import { afterEach, describe, expect, it } from 'vitest';
import { metricSum, pdPrefillTokens } from './helpers/metrics.ts';
import { type PdCluster, startPdCluster } from './helpers/pd-cluster.ts';
import { formatAddedLatency, measureAddedLatency } from './helpers/pd-latency.ts';

let cluster: PdCluster | undefined;
afterEach(async () => {
  await cluster?.close();
  cluster = undefined;
});

const prompt = (i: number) =>
  `You are a coding agent with tools: read, write, grep, run. Task ${i % 3}: fix the failing test in module ${i % 3}. Step ${i}.`;

async function post(url: string, path: string, body: unknown) {
  const res = await fetch(`${url}${path}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify(body),
  });
  return { status: res.status, headers: Object.fromEntries(res.headers), text: await res.text() };
}

/** The prefill DP rank the prefill side registered for a room (its bootstrap registry). */
async function registeredRank(c: PdCluster, room: string): Promise<number | undefined> {
  for (const p of c.prefill) {
    const port = p.app.mockPd.bootstrap?.port;
    const res = await fetch(`http://127.0.0.1:${port}/query_dp_ranks`, {
      method: 'POST',
      body: `{"bootstrap_rooms":[${room}]}`,
    });
    const got = (await res.json()) as Record<string, number>;
    if (got[room] !== undefined) return got[room];
  }
  return undefined;
}

function transfers(c: PdCluster) {
  return c.decode.flatMap((d, i) => d.app.mockPd.transfers.map((t) => ({ ...t, decodeWorker: i })));
}

describe('PD mode, SGLang style', () => {
  it('serves chat and completions, streaming and not, with both DP ranks pinned (told)', async () => {
    cluster = await startPdCluster({ worker: { dpSize: 2 }, routerArgs: ['--dp-aware'] });
    const c = cluster;
    for (let i = 0; i < 6; i++) {
      const stream = i % 2 === 1;
      const r = await post(c.url, '/v1/chat/completions', {
        model: 'm',
        messages: [{ role: 'user', content: prompt(i) }],
        max_tokens: 6,
        stream,
      });
      expect(r.status).toBe(200);
      if (stream) {
        expect(r.text).toContain('data: [DONE]');
        expect(r.text.match(/"content":"[^"]+"/g)?.length).toBe(6);
      } else {
        const body = JSON.parse(r.text);
        expect(body.usage.completion_tokens).toBe(6);
      }
      // The router's rank headers name the prefill rank (its main table) and the decode rank.
      expect(r.headers['x-kvroute-rank']).toBeDefined();
      expect(r.headers['x-kvroute-decode-rank']).toBeDefined();
    }
    const ts = transfers(c);
    expect(ts).toHaveLength(6);
    for (const t of ts) {
      expect(t.style).toBe('sglang');
      expect(t.rankSource).toBe('told');
      // The rank the decode side pulled from is the one the prefill side ran the room on.
      expect(await registeredRank(c, t.room)).toBe(t.prefillDpRank);
      expect(BigInt(t.room)).toBeLessThan(2n ** 63n);
    }
    // Rooms are drawn per request, 63-bit, never reused.
    expect(new Set(ts.map((t) => t.room)).size).toBe(6);
    // Decode DP ranks are the router's choice (routed_dp_rank): both ranks of both servers used.
    expect(new Set(ts.map((t) => `${t.decodeWorker}:${t.decodeDpRank}`)).size).toBeGreaterThan(1);
  });

  it('lets the decode side find the prefill DP rank through the bootstrap query when not told', async () => {
    cluster = await startPdCluster({
      worker: { dpSize: 2 },
      // The prefill servers' own dispatch is not bootstrap_room % dp_size, so it cannot be guessed.
      prefillWorker: { loadBalanceMethod: 'total_requests' },
      routerArgs: ['--dp-aware', '--pd-rank-discovery', 'bootstrap'],
    });
    const c = cluster;
    for (let i = 0; i < 6; i++) {
      const r = await post(c.url, '/generate', {
        text: prompt(i),
        sampling_params: { max_new_tokens: 3 },
      });
      expect(r.status).toBe(200);
    }
    const ts = transfers(c);
    expect(ts).toHaveLength(6);
    for (const t of ts) {
      expect(t.rankSource).toBe('bootstrap-query');
      expect(await registeredRank(c, t.room)).toBe(t.prefillDpRank);
    }
    // The router pinned the prefill rank by cache affinity; the registry shows both were used.
    expect(new Set(ts.map((t) => `${t.bootstrapAddr}:${t.prefillDpRank}`)).size).toBeGreaterThan(1);
  });

  it('keeps follow_bootstrap_room prefill servers right only when the decode side is told the rank', async () => {
    // SGLang's default PD prefill dispatch: bootstrap_room % dp_size unless routed_dp_rank says
    // otherwise. The router pins the cache-aware rank, so room % dp_size is wrong half the time.
    const prefillWorker = { loadBalanceMethod: 'follow_bootstrap_room' };
    cluster = await startPdCluster({
      worker: { dpSize: 2 },
      prefillWorker,
      routerArgs: ['--dp-aware'],
    });
    for (let i = 0; i < 8; i++) {
      const r = await post(cluster.url, '/generate', {
        text: prompt(i),
        sampling_params: { max_new_tokens: 2 },
      });
      expect(r.status).toBe(200);
    }
    for (const t of transfers(cluster)) {
      expect(t.rankSource).toBe('told');
      expect(await registeredRank(cluster, t.room)).toBe(t.prefillDpRank);
    }
    await cluster.close();
    // Not told, the decode side trusts follow_bootstrap_room and looks on the wrong rank: the
    // transfer fails with SGLang's KVTransferError (no retries here, so it shows).
    cluster = await startPdCluster({
      worker: { dpSize: 2 },
      prefillWorker,
      routerArgs: ['--dp-aware', '--pd-rank-discovery', 'bootstrap', '--max-retries', '0'],
    });
    const statuses: number[] = [];
    let message = '';
    for (let i = 0; i < 16; i++) {
      const r = await post(cluster.url, '/generate', {
        text: prompt(i),
        sampling_params: { max_new_tokens: 2 },
      });
      statuses.push(r.status);
      if (r.status !== 200) message = r.text;
    }
    expect(statuses.filter((s) => s !== 200).length).toBeGreaterThan(0);
    expect(message).toContain('KVTransferError');
    for (const t of transfers(cluster)) expect(t.rankSource).toBe('follow-bootstrap-room');
  });

  it('sends prompts sharing a prefix to the prefill rank that holds it and counts its hit rate', async () => {
    cluster = await startPdCluster({
      omitBootstrapPort: true,
      routerArgs: ['--prefill-policy', 'cache_aware'],
    });
    const c = cluster;
    // The bootstrap ports were read from the prefill servers' /get_server_info.
    expect([...(c.router.kvroute.pd?.bootstrapPorts.values() ?? [])]).toEqual(
      c.prefill.map((p) => p.app.mockPd.bootstrap?.port),
    );
    const shared = 'A long shared system prompt with tool definitions. '.repeat(20);
    const ranks = new Set<string>();
    for (let i = 0; i < 5; i++) {
      const r = await post(c.url, '/v1/completions', {
        model: 'm',
        prompt: `${shared} turn ${i}`,
        max_tokens: 2,
      });
      expect(r.status).toBe(200);
      ranks.add(r.headers['x-kvroute-rank'] as string);
    }
    expect(ranks.size).toBe(1);
    const { prompted, cached } = await pdPrefillTokens(c.url);
    expect(prompted).toBeGreaterThan(0);
    // Four of five requests found the shared prefix cached on their prefill rank.
    expect(cached / prompted).toBeGreaterThan(0.5);
  });

  it("reports the prefill's cached tokens to the client, as SGLang's decode does, not the transferred prompt", async () => {
    cluster = await startPdCluster({ routerArgs: ['--prefill-policy', 'cache_aware'] });
    const c = cluster;
    const shared = 'A long shared system prompt with tool definitions. '.repeat(20);
    let before = (await pdPrefillTokens(c.url)).cached;
    for (let i = 0; i < 4; i++) {
      const stream = i % 2 === 1;
      const r = await post(c.url, '/v1/chat/completions', {
        model: 'm',
        messages: [{ role: 'user', content: `${shared} turn ${i}` }],
        max_tokens: 2,
        stream,
        ...(stream ? { stream_options: { include_usage: true } } : {}),
      });
      expect(r.status).toBe(200);
      const body = stream
        ? r.text
            .split('\n')
            .filter((l) => l.startsWith('data: {'))
            .map((l) => JSON.parse(l.slice(6)))
            .findLast((e) => e.usage)
        : JSON.parse(r.text);
      const usage = body.usage as {
        prompt_tokens: number;
        prompt_tokens_details: { cached_tokens: number };
      };
      // What the prefill rank found cached (its own answer, as the router counts it).
      const after = (await pdPrefillTokens(c.url)).cached;
      expect(usage.prompt_tokens_details.cached_tokens).toBe(after - before);
      // The first prompt found nothing; later turns find the shared prefix but never their own
      // new tail, which the decode side received whole.
      if (i === 0) expect(usage.prompt_tokens_details.cached_tokens).toBe(0);
      else expect(usage.prompt_tokens_details.cached_tokens).toBeGreaterThan(0);
      expect(usage.prompt_tokens_details.cached_tokens).toBeLessThan(usage.prompt_tokens - 1);
      before = after;
    }
  });

  it("counts each answered pair in the router's request counter, under the prefill rank and reason", async () => {
    cluster = await startPdCluster({ prefill: 2, decode: 2 });
    const c = cluster;
    const seen = new Map<string, number>();
    for (let i = 0; i < 4; i++) {
      const r = await post(c.url, '/v1/chat/completions', {
        model: 'm',
        messages: [{ role: 'user', content: prompt(i) }],
        max_tokens: 4,
        stream: i % 2 === 1,
      });
      expect(r.status).toBe(200);
      const key = `rank="${r.headers['x-kvroute-rank']}",reason="${r.headers['x-kvroute-reason']}"`;
      seen.set(key, (seen.get(key) ?? 0) + 1);
    }
    // Refused before routing: counted with rank "none", as the colocated proxy counts it.
    expect((await post(c.url, '/v1/completions', { model: 'm', prompt: 'x', n: 2 })).status).toBe(
      400,
    );
    const text = await (await fetch(`${c.url}/metrics`)).text();
    // Request rates and the dashboard's 5xx ratio read this counter: a PD router that left
    // its answered pairs out showed every refusal as the whole traffic.
    for (const [labels, n] of seen) {
      expect(text).toContain(
        `kvroute_router_requests_total{route="/v1/chat/completions",${labels},status="200"} ${n}`,
      );
    }
    expect(metricSum(text, 'kvroute_router_requests_total')).toBe(5);
    expect(text).toContain(
      'kvroute_router_requests_total{route="/v1/completions",rank="none",reason="none",status="400"} 1',
    );
  });

  it('refuses requests it cannot pair, and the mock workers refuse requests without bootstrap data', async () => {
    cluster = await startPdCluster({ prefill: 1, decode: 1 });
    const c = cluster;
    const direct = await post(c.decode[0]?.url as string, '/generate', { text: 'hi' });
    expect(direct.status).toBe(400);
    expect(direct.text).toContain('req.bootstrap_room should not be None');
    const embed = await post(c.url, '/v1/embeddings', { model: 'm', input: 'x' });
    expect(embed.status).toBe(400);
    expect(embed.text).toContain('no decode phase');
    const samples = await post(c.url, '/v1/completions', { model: 'm', prompt: 'x', n: 2 });
    expect(samples.status).toBe(400);
    expect(samples.text).toContain('several samples of one prompt');
  });
});

describe('PD mode, vLLM style', () => {
  it('prefills with max_tokens 1 and kv_transfer_params, then decodes with the returned params', async () => {
    cluster = await startPdCluster({ routerArgs: ['--pd-style', 'vllm'] });
    const c = cluster;
    for (let i = 0; i < 4; i++) {
      const stream = i % 2 === 0;
      const r = await post(c.url, '/v1/chat/completions', {
        model: 'm',
        messages: [{ role: 'user', content: prompt(i) }],
        max_tokens: 5,
        stream,
      });
      expect(r.status).toBe(200);
      if (stream) expect(r.text).toContain('data: [DONE]');
      else expect(JSON.parse(r.text).usage.completion_tokens).toBe(5);
    }
    const ts = transfers(c);
    expect(ts).toHaveLength(4);
    for (const t of ts) {
      expect(t.style).toBe('vllm');
      expect(t.rankSource).toBe('kv-params');
      expect(t.kvTokens).toBeGreaterThan(10);
    }
  });
});

describe('PD mode, measured', () => {
  it('prints the router added latency over the decode side TTFT (SGLang style) and serves promtool-valid metrics', async () => {
    cluster = await startPdCluster({
      worker: { timeScale: 0.05, dpSize: 2 },
      routerArgs: ['--dp-aware'],
    });
    const c = cluster;
    await measureAddedLatency(c, 5);
    const m = await measureAddedLatency(c, 30);
    // A figure, not a gate (timing assertions are not tests): `pnpm --filter @kvroute/e2e
    // pd-latency` prints it for both styles over more requests.
    console.log(formatAddedLatency(m));
    expect(m.requests).toBe(30);
    expect(Number.isFinite(m.addedMs.p50)).toBe(true);
    const text = await (await fetch(`${c.url}/metrics`)).text();
    for (const name of [
      'kvroute_pd_requests_total',
      'kvroute_pd_ttft_seconds',
      'kvroute_pd_transfer_wait_seconds',
      'kvroute_pd_prefill_prompt_tokens_total',
      'kvroute_pd_prefill_cached_tokens_total',
    ]) {
      expect(text).toContain(`# TYPE ${name.replace(/_total$/, '')}`);
    }
    expect(text).toMatch(/kvroute_pd_requests_total\{role="prefill",rank="\d+",status="200"\} \d+/);
    expect(text).toMatch(/kvroute_pd_requests_total\{role="decode",rank="\d+",status="200"\} \d+/);
    // The decode side's own per-rank load and health (the prefill side is the main table's):
    // one series per decode rank (2 servers x dp 2), idle and healthy once the pairs are done.
    for (const gauge of [
      'kvroute_pd_decode_in_flight_requests',
      'kvroute_pd_decode_in_flight_tokens',
      'kvroute_pd_decode_rank_healthy',
    ]) {
      const series = [...text.matchAll(new RegExp(`^${gauge}\\{rank="(\\d+)"\\} (\\S+)$`, 'gm'))];
      expect(series.map((m) => m[1]).sort(), gauge).toEqual(['0', '1', '2', '3']);
      const want = gauge.endsWith('healthy') ? '1' : '0';
      expect(
        series.map((m) => m[2]),
        gauge,
      ).toEqual([want, want, want, want]);
    }
    const r = spawnSync('promtool', ['check', 'metrics'], { encoding: 'utf8', input: text });
    if (r.error)
      throw new Error(`promtool could not run (Debian package prometheus): ${r.error.message}`);
    expect(r.status, r.stdout + r.stderr).toBe(0);
  });
});
