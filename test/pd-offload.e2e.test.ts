// Does cache-aware prefill selection keep the hit rate of colocated serving on the same
// number of prefill GPUs? Agent sessions (two tenants' long system prefixes, several turns,
// each turn's prompt = the previous prompt + the reply the worker actually returned + a new
// user message) go through the router, as token ids on SGLang's /generate, against three
// deployments of mock workers:
//   colocated: 2 workers, cache_aware; each caches a finished prompt + its reply, as SGLang does;
//   PD:        2 prefill + 2 decode workers, cache_aware prefill / total_tokens decode; the
//              prefill servers never compute the replies, so every turn misses its previous reply;
//   PD + store: the same with a KV store the workers share (SGLang's HiCache storage backend on
//              the prefill servers, --disaggregation-decode-enable-offload-kvcache on the decode
//              servers): decode writes prompt + reply to it, prefill loads what it lacks.
// Hit rate = cached / prompt tokens on the ranks that prefill (the router's metrics). Targets:
// PD + store at least colocated; plain PD below it (the reply share), which is the mechanism.
// The mock's replies are a function of the prompt, so the same sessions can be built ahead as
// a plan: the simulator's PD layout (with and without its store and decode offload) must
// predict both PD hit rates within 2 points.
import { fillerTokenId, promptSeed, type RunningKvStore, startKvStore } from '@kvroute/mock-worker';
import {
  buildWorkload,
  getProfile,
  simulatePd,
  type WorkloadPlan,
  type WorkloadRequest,
} from '@kvroute/sim/model';
import { afterEach, describe, expect, it } from 'vitest';
import { startCluster } from './helpers/cluster.ts';
import { metricSum, pdPrefillTokens } from './helpers/metrics.ts';
import { startPdCluster } from './helpers/pd-cluster.ts';

const PREFILL = 2;
const DECODE = 2;
const SESSIONS = 6;
const TURNS = 4;
const REPLY_TOKENS = 48;

/** Deterministic ids: a small LCG, so every deployment sees the same prompts. */
function lcg(seed: number): () => number {
  let x = seed >>> 0;
  return () => {
    x = (Math.imul(x, 1664525) + 1013904223) >>> 0;
    return 1000 + (x % 30_000);
  };
}
const ids = (next: () => number, n: number): number[] => Array.from({ length: n }, next);

interface Session {
  history: number[];
}

function sessions(): Session[] {
  const tenants = [0, 1].map((t) => ids(lcg(100 + t), 1200 + 300 * t));
  return Array.from({ length: SESSIONS }, (_, s) => {
    const next = lcg(500 + s);
    return { history: [...tenants[s % 2]!, ...ids(next, 40 + s)] };
  });
}

/** The requests runSessions sends, in its order, each with the reply the mock will give. */
function plannedSessions(): WorkloadPlan {
  const all = sessions();
  const user = lcg(9_000);
  const list: WorkloadRequest[] = [];
  for (let turn = 0; turn < TURNS; turn++) {
    for (const [k, s] of all.entries()) {
      const seed = promptSeed(s.history);
      const reply = Array.from({ length: REPLY_TOKENS }, (_, i) => fillerTokenId(seed, i));
      list.push({
        id: list.length,
        clientId: 0,
        thinkMs: 20,
        inputIds: Uint32Array.from(s.history),
        outputTokens: REPLY_TOKENS,
        outputIds: Uint32Array.from(reply),
        sessionKey: `s${k}`,
      });
      s.history.push(...reply, ...ids(user, 30 + (turn % 3)));
    }
  }
  const base = buildWorkload('seed-sequential', { requests: 1 }, 1);
  return { ...base, mode: 'closed', clients: [list], events: [] };
}

function predictedPdHit(store: boolean): number {
  const run = simulatePd(plannedSessions(), {
    prefillPolicy: { method: 'cache_aware' },
    decodePolicy: { method: 'total_tokens' },
    prefillRanks: PREFILL,
    decodeRanks: DECODE,
    profile: getProfile('h200-llama-3.1-8b'),
    seed: 1,
    ...(store ? { kvStore: { gbps: 100, decodeOffload: true } } : {}),
  });
  expect(run.summary.requests).toBe(SESSIONS * TURNS);
  return run.summary.hitRate;
}

async function runSessions(url: string): Promise<void> {
  const all = sessions();
  const user = lcg(9_000);
  for (let turn = 0; turn < TURNS; turn++) {
    for (const s of all) {
      const res = await fetch(`${url}/generate`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({
          input_ids: s.history,
          sampling_params: { max_new_tokens: REPLY_TOKENS, temperature: 0 },
        }),
      });
      const text = await res.text();
      expect(res.status, text).toBe(200);
      const body = JSON.parse(text) as { output_ids: number[] };
      expect(body.output_ids.length).toBe(REPLY_TOKENS);
      // The agent's next turn: what the model said, a tool result / user message, and again.
      s.history.push(...body.output_ids, ...ids(user, 30 + (turn % 3)));
      // Tool time between turns (the store's writes are asynchronous, as SGLang's are).
      await new Promise((r) => setTimeout(r, 20));
    }
  }
}

const closers: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const c of closers.splice(0)) await c();
});

async function pdHitRate(store?: RunningKvStore): Promise<number> {
  const worker = store === undefined ? {} : { kvStore: store.url };
  const cluster = await startPdCluster({
    prefill: PREFILL,
    decode: DECODE,
    prefillWorker: worker,
    decodeWorker: store === undefined ? {} : { ...worker, decodeOffload: true },
    routerArgs: ['--prefill-policy', 'cache_aware', '--decode-policy', 'total_tokens'],
  });
  closers.push(() => cluster.close());
  await runSessions(cluster.url);
  const { prompted, cached } = await pdPrefillTokens(cluster.url);
  expect(prompted).toBeGreaterThan(0);
  return cached / prompted;
}

describe('PD keeps the colocated hit rate with a shared store and decode offload', () => {
  it('colocated cache_aware <= PD + store, and plain PD misses the replies', async () => {
    const colocated = await startCluster({
      workers: PREFILL,
      routerArgs: ['--load-balance-method', 'cache_aware'],
    });
    closers.push(() => colocated.close());
    await runSessions(colocated.url);
    const coMetrics = await (await fetch(`${colocated.url}/metrics`)).text();
    const coPrompt = metricSum(coMetrics, 'kvroute_router_prompt_tokens_total');
    const coCached = metricSum(coMetrics, 'kvroute_router_cached_tokens_total');
    const coHit = coCached / coPrompt;

    const plainHit = await pdHitRate();
    const store = await startKvStore();
    closers.push(() => store.close());
    const storeHit = await pdHitRate(store);
    const stats = store.stats();
    const requests = SESSIONS * TURNS;
    console.log(
      `PD hit rate, ${SESSIONS} sessions x ${TURNS} turns (${requests} requests, ${REPLY_TOKENS}-token replies), ` +
        `${PREFILL} prefill GPUs: colocated cache_aware ${(coHit * 100).toFixed(2)}%, ` +
        `PD ${(plainHit * 100).toFixed(2)}%, PD + store with decode offload ${(storeHit * 100).toFixed(2)}% ` +
        `(store: ${stats.writes} writes, ${stats.used_tokens} tokens held, ${stats.matches} lookups)`,
    );
    const predictedPlain = predictedPdHit(false);
    const predictedStore = predictedPdHit(true);
    console.log(
      `simulator, same sessions: PD ${(predictedPlain * 100).toFixed(2)}% (observed ${(plainHit * 100).toFixed(2)}%), ` +
        `PD + store ${(predictedStore * 100).toFixed(2)}% (observed ${(storeHit * 100).toFixed(2)}%)`,
    );
    expect(Math.abs(predictedPlain - plainHit) * 100).toBeLessThanOrEqual(2);
    expect(Math.abs(predictedStore - storeHit) * 100).toBeLessThanOrEqual(2);
    // Every request looked the store up once and every prefill and decode wrote to it.
    expect(stats.matches).toBe(requests);
    expect(stats.writes).toBe(2 * requests);
    // Real reuse on every deployment (tenant prefixes, session histories).
    expect(coHit).toBeGreaterThan(0.7);
    // The replies: colocated caches them where they were generated, plain PD never sees them.
    expect(plainHit).toBeLessThan(coHit);
    expect(storeHit).toBeGreaterThanOrEqual(coHit);
  }, 180_000);

  it('a worker started with a store it cannot reach still serves (a miss), and says so', async () => {
    const dead = await startKvStore();
    const url = dead.url;
    await dead.close();
    const cluster = await startPdCluster({
      prefill: 1,
      decode: 1,
      prefillWorker: { kvStore: url },
      decodeWorker: { kvStore: url, decodeOffload: true },
    });
    closers.push(() => cluster.close());
    const warn = console.warn;
    const said: string[] = [];
    console.warn = (...a: unknown[]) => said.push(a.join(' '));
    try {
      const res = await fetch(`${cluster.url}/generate`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({
          input_ids: [1, 2, 3, 4, 5],
          sampling_params: { max_new_tokens: 4 },
        }),
      });
      expect(res.status).toBe(200);
      await res.text();
      await new Promise((r) => setTimeout(r, 100));
    } finally {
      console.warn = warn;
    }
    expect(said.join('\n')).toContain(`KV store ${url}`);
  }, 60_000);
});
