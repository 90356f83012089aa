// The simulator's PD layout predicts a PD run through the router: mock prefill and decode
// workers (--role, the simulator's RankModel and its KV transfer price, at time scale 3)
// behind the router in --pd-disaggregation mode with cache_aware on the prefill side and
// total_tokens on the decode side, driven by a deterministic agentic workload, one request
// at a time; simulatePd runs the same requests on the same profile, split and link. Targets:
// prefill-side hit rate within 2 points and TTFT p50 within 10%; the figures are printed.
//
// The profile is prefill-per-token bound (a 2 ms step floor, 0.1 ms per new token) with a
// 40 Gb/s link, so TTFTs sit in the hundreds of ms (a cold 4,000-token prompt: ~400 ms of
// prefill plus ~100 ms of transfer) and loopback HTTP overheads of a few ms stay small
// against them, while a wrong cache, routing or transfer model still moves TTFT by far more
// than 10%.
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { buildWorkload, loadProfileFile, simulatePd, type WorkloadPlan } from '@kvroute/sim/model';
import { chatRoutingIds, idsToChatText } from '@kvroute/validate';
import { afterEach, describe, expect, it } from 'vitest';
import { pdPrefillTokens } from './helpers/metrics.ts';
import { type PdCluster, startPdCluster } from './helpers/pd-cluster.ts';

const dir = mkdtempSync(join(tmpdir(), 'kvroute-pd-predict-'));
const PROFILE_FILE = join(dir, 'pd-profile.json');
writeFileSync(
  PROFILE_FILE,
  JSON.stringify({
    format: 'kvroute-cost-profile/v1',
    name: 'pd-predict-e2e',
    description: 'per-token-bound prefill so TTFTs are hundreds of ms against ms of HTTP',
    source: 'test/pd-predict.e2e.test.ts',
    prefill: { floorMs: 2, perTokenMs: 0.5, attnMsPerMTokenPairs: 0 },
    decode: { floorMs: 10, perSeqMs: 0.5, perKContextTokenMs: 0 },
    kvCapacityTokens: 200_000,
    chunkedPrefillSize: 8192,
    // Llama-3.1-8B's KV bytes per token (2 x 32 layers x 8 KV heads x 128 x 2 bytes).
    memory: {
      gpuMemoryBytes: 141e9,
      memFraction: 0.88,
      weightBytes: 16e9,
      activationReserveBytes: 0,
      kvBytesPerToken: 131_072,
    },
  }),
);
const LINK = { gbps: 8, setupMs: 1 };
/**
 * Wall ms per model ms on the workers (and for the client's think time): the router, four
 * workers and the client share one event loop on a loaded machine, where timers fire tens of
 * ms late; stretching model time makes that small against it. Observed times are divided
 * back into model ms.
 */
const SCALE = 3;
const PREFILL = 2;
const DECODE = 2;

/**
 * Agent sessions over two tenants' 3-4k-token prefixes, three turns each (12 requests), run one after
 * another by one client (50 ms think time): hits across sessions (the tenant prefix) and
 * within them (the history), misses where the reply was generated on the decode side.
 */
function sequentialPlan(): { plan: WorkloadPlan; texts: string[] } {
  const agentic = buildWorkload(
    'agentic',
    {
      sessions: 4,
      tenants: 2,
      prefixMinTokens: 3000,
      prefixMaxTokens: 4000,
      turnsMin: 3,
      turnsMax: 3,
      userMinTokens: 20,
      userMaxTokens: 60,
      outputMinTokens: 4,
      outputMaxTokens: 8,
      toolMinTokens: 50,
      toolMaxTokens: 200,
      ranks: PREFILL,
    },
    3,
  );
  const all = agentic.clients.flat();
  const list = all.map((r, i) => ({
    id: i,
    clientId: 0,
    thinkMs: 50,
    // What the router and the workers see: the chat body's canonical token ids.
    inputIds: chatRoutingIds(r.inputIds),
    outputTokens: r.outputTokens,
    sessionKey: `r${i}`,
  }));
  // The text the client sends, from the workload's own ids.
  const texts = all.map((r) => idsToChatText(r.inputIds));
  return { plan: { ...agentic, mode: 'closed', clients: [list] }, texts };
}

let cluster: PdCluster | undefined;
afterEach(async () => {
  await cluster?.close();
  cluster = undefined;
});

interface Observed {
  ttftMs: number;
  prefillRank: number;
  decodeRank: number;
}

async function send(url: string, text: string, maxTokens: number): Promise<Observed> {
  const t0 = performance.now();
  const res = await fetch(`${url}/v1/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({
      model: 'm',
      messages: [{ role: 'user', content: text }],
      max_tokens: maxTokens,
      temperature: 0,
      stream: true,
      stream_options: { include_usage: true },
    }),
  });
  expect(res.status).toBe(200);
  const reader = res.body!.getReader();
  const decoder = new TextDecoder();
  let buf = '';
  let first = -1;
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    buf += decoder.decode(value, { stream: true });
    if (first < 0 && /"content":"[^"]/.test(buf)) first = performance.now() - t0;
  }
  expect(buf).toContain('data: [DONE]');
  expect(first).toBeGreaterThan(0);
  return {
    ttftMs: first,
    prefillRank: Number(res.headers.get('x-kvroute-rank')),
    decodeRank: Number(res.headers.get('x-kvroute-decode-rank')),
  };
}

function p50(values: number[]): number {
  const s = [...values].sort((a, b) => a - b);
  const mid = (s.length - 1) / 2;
  return (s[Math.floor(mid)]! + s[Math.ceil(mid)]!) / 2;
}

describe('the simulator predicts the PD e2e run', () => {
  it('prefill hit rate within 2 points and TTFT p50 within 10% (cache_aware / total_tokens, 2:2)', async () => {
    const { plan, texts } = sequentialPlan();
    const requests = plan.clients[0]!;
    const predicted = simulatePd(plan, {
      prefillPolicy: { method: 'cache_aware' },
      decodePolicy: { method: 'total_tokens' },
      prefillRanks: PREFILL,
      decodeRanks: DECODE,
      profile: loadProfileFile(PROFILE_FILE),
      seed: 1,
      link: LINK,
    });
    expect(predicted.summary.requests).toBe(requests.length);

    cluster = await startPdCluster({
      prefill: PREFILL,
      decode: DECODE,
      worker: { profileFile: PROFILE_FILE, timeScale: SCALE },
      decodeWorker: { kvTransferGbps: LINK.gbps, kvTransferSetupMs: LINK.setupMs },
      routerArgs: ['--prefill-policy', 'cache_aware', '--decode-policy', 'total_tokens'],
    });
    const observed: Observed[] = [];
    for (const [i, r] of requests.entries()) {
      await new Promise((done) => setTimeout(done, (r.thinkMs ?? 0) * SCALE));
      observed.push(await send(cluster.url, texts[i]!, r.outputTokens));
    }
    const observedTtft = observed.map((o) => o.ttftMs / SCALE);
    // Where the router placed each request, against where the simulator did.
    const byId = new Map(predicted.records.map((r) => [r.id, r]));
    let samePrefill = 0;
    let sameDecode = 0;
    observed.forEach((o, i) => {
      if (byId.get(i)?.rank === o.prefillRank) samePrefill++;
      if (byId.get(i)?.decodeRank === o.decodeRank) sameDecode++;
    });
    const { prompted, cached } = await pdPrefillTokens(cluster.url);
    const observedHit = cached / prompted;
    const predictedHit = predicted.summary.hitRate;
    const predictedP50 = predicted.summary.ttftMs.p50;
    const observedP50 = p50(observedTtft);
    const hitGap = (predictedHit - observedHit) * 100;
    const ttftErr = (predictedP50 - observedP50) / observedP50;
    console.log(
      `PD e2e prediction (${requests.length} requests, ${PREFILL}:${DECODE}, ${LINK.gbps} Gb/s): ` +
        `prefill hit rate predicted ${(predictedHit * 100).toFixed(2)}% observed ${(observedHit * 100).toFixed(2)}% (${hitGap.toFixed(2)} pt); ` +
        `TTFT p50 predicted ${predictedP50.toFixed(1)} ms observed ${observedP50.toFixed(1)} ms (${(ttftErr * 100).toFixed(1)}%); ` +
        `predicted transfer p50 ${predicted.pd.transferMs.p50.toFixed(1)} ms; ` +
        `same prefill rank ${samePrefill}/${requests.length}, same decode rank ${sameDecode}/${requests.length}`,
    );
    expect(samePrefill).toBe(requests.length);
    // Both sides must see real reuse, not agree on zero.
    expect(observedHit).toBeGreaterThan(0.5);
    expect(Math.abs(hitGap)).toBeLessThanOrEqual(2);
    expect(Math.abs(ttftErr)).toBeLessThanOrEqual(0.1);
  }, 180_000);
});
