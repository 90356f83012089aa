// Router replicas in front of mock workers: N kvroute-router processes (the real command),
// four in-process mock workers publishing KV events, and a client that spreads an agentic
// workload over the replicas round-robin, as a load balancer in front of them would.
// Used by kv-events-replicas.test.ts (hit-rate target) and scripts/replicas.ts (figures).
import { type ChildProcess, spawn } from 'node:child_process';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { type RunningMockWorker, startMockWorker } from '@kvroute/mock-worker';
import { chainedBlockKeys } from '@kvroute/policy';
import { approximateTokenIds } from '@kvroute/protocol';

const ROUTER_BIN = join(
  dirname(fileURLToPath(import.meta.url)),
  '..',
  '..',
  'apps',
  'router',
  'bin',
  'kvroute-router.mjs',
);

export interface Workload {
  tenants: number;
  sessionsPerTenant: number;
  turns: number;
  /** Words of each tenant's system prompt (the approximate tokenizer: ~1.3 tokens a word). */
  systemWords: number;
  turnWords: number;
  /** Sessions running at once (each one's turns are sequential). */
  concurrency: number;
}

// Many tenants with few sessions each: where a session lives is decided by load, not by a
// shared prefix, so a replica that did not route a session's earlier turns cannot guess it.
export const DEFAULT_WORKLOAD: Workload = {
  tenants: 12,
  sessionsPerTenant: 2,
  turns: 6,
  systemWords: 800,
  turnWords: 150,
  concurrency: 8,
};

// Deterministic words (no Math.random): word w of stream s.
export function words(seed: number, n: number): string {
  const out: string[] = [];
  let x = seed >>> 0 || 1;
  for (let i = 0; i < n; i++) {
    x ^= x << 13;
    x >>>= 0;
    x ^= x >>> 17;
    x ^= x << 5;
    x >>>= 0;
    out.push(`w${(x % 5000).toString(36)}`);
  }
  return out.join(' ');
}

/** One session of the workload: its tenant's system prompt and its id. */
export interface Session {
  system: string;
  id: number;
}

export function sessionsOf(workload: Workload): Session[] {
  const systems = Array.from({ length: workload.tenants }, (_, t) =>
    words(1000 + t, workload.systemWords),
  );
  const sessions: Session[] = [];
  for (let t = 0; t < workload.tenants; t++) {
    for (let s = 0; s < workload.sessionsPerTenant; s++) {
      sessions.push({ system: systems[t] as string, id: t * workload.sessionsPerTenant + s });
    }
  }
  return sessions;
}

/** The prompt text of each turn of `session`: the history grows by one user turn each time. */
export function turnPrompts(session: Session, workload: Workload): string[] {
  let history = `session ${session.id}.`;
  const out: string[] = [];
  for (let turn = 0; turn < workload.turns; turn++) {
    history += ` ${words(session.id * 100 + turn + 7, workload.turnWords)}`;
    out.push(`${session.system}\n${history}`);
  }
  return out;
}

export type IndexSource = 'learned' | 'events';

export interface RunResult {
  label: string;
  replicas: number;
  source: IndexSource;
  requests: number;
  promptTokens: number;
  cachedTokens: number;
  hitRate: number;
  ttftP50Ms: number;
  ttftP99Ms: number;
  ttftMeanMs: number;
  /** Mean KV event lag, publish to apply, over every replica's batches (events only; else 0). */
  eventLagMs: number;
  /**
   * Where the response time goes, around the moment the worker stored the request's last
   * block (mean over requests): send -> store is the router's intake, decision, forwarding
   * and the engine; store -> answer the way back to the client, which sends the session's
   * next turn at once. A replica that did not route a turn learns of it only an event lag
   * after the store, so the next turn's routing races that lag over store -> answer.
   */
  sendToStoreMs: number;
  storeToAnswerMs: number;
  /** From the replicas' /metrics: rank scores from events vs the learned fallback. */
  eventScores: number;
  fallbackScores: number;
  /** Per request, in send order (runReplicas with `trace`). */
  trace?: RequestTrace[];
}

/** One request of a run as the client saw it (the router's x-kvroute-rank / -reason headers). */
export interface RequestTrace {
  session: number;
  turn: number;
  /** The replica the client sent it to. */
  replica: number;
  rank: number;
  reason: string;
  promptTokens: number;
  cachedTokens: number;
  /** Date.now() when sent and when the response came back. */
  sentAt: number;
  doneAt: number;
}

/** Per rank: block key (16-token chained keys) -> Date.now() it was first published as stored. */
export type Published = Map<number, number>[];

export const EVENT_BLOCK_SIZE = 16;

export interface Workers {
  workers: RunningMockWorker[];
  /** When each worker published each block since its cache was last flushed. */
  published: Published;
  /** Wall ms per model ms of the mock workers. */
  timeScale: number;
  close(): Promise<void>;
}

/** Four mock workers (one rank each) publishing KV events with replay, block size 16. */
export async function startEventWorkers(n = 4, timeScale = 0.02): Promise<Workers> {
  const workers = await Promise.all(
    Array.from({ length: n }, () =>
      startMockWorker({
        timeScale,
        kvEventsConfig: {
          publisher: 'zmq',
          endpoint: 'tcp://127.0.0.1:0',
          replay_endpoint: 'tcp://127.0.0.1:0',
        },
        kvEventsBlockSize: EVENT_BLOCK_SIZE,
      }),
    ),
  );
  const published: Published = workers.map(() => new Map());
  workers.forEach((worker, rank) => {
    const pub = worker.app.kvEventPublishers[0];
    if (!pub) throw new Error('mock worker without a KV event publisher');
    const m = published[rank] as Map<number, number>;
    const keys: number[] = [];
    const stored = pub.stored.bind(pub);
    pub.stored = (path: Uint32Array, start: number) => {
      const t = Date.now();
      for (const k of chainedBlockKeys(path, EVENT_BLOCK_SIZE, path.length, keys)) {
        if (!m.has(k)) m.set(k, t);
      }
      stored(path, start);
    };
    const cleared = pub.cleared.bind(pub);
    pub.cleared = () => {
      m.clear();
      cleared();
    };
  });
  return {
    workers,
    published,
    timeScale,
    close: async () => void (await Promise.all(workers.map((w) => w.close()))),
  };
}

interface RouterProcess {
  url: string;
  child: ChildProcess;
}

async function spawnRouter(args: string[]): Promise<RouterProcess> {
  const child = spawn(process.execPath, [ROUTER_BIN, ...args], {
    stdio: ['ignore', 'pipe', 'pipe'],
    env: { ...process.env, NODE_OPTIONS: '' },
  });
  let out = '';
  const url = await new Promise<string>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`router did not start:\n${out}`)), 60_000);
    const onData = (d: Buffer) => {
      out += d.toString();
      const m = /listening on (http:\/\/[\d.]+:\d+)/.exec(out);
      if (m) {
        clearTimeout(timer);
        resolve(m[1] as string);
      }
    };
    child.stdout?.on('data', onData);
    child.stderr?.on('data', onData);
    child.once('exit', (code) => {
      clearTimeout(timer);
      reject(new Error(`router exited with ${code}:\n${out}`));
    });
  });
  child.removeAllListeners('exit');
  return { url, child };
}

function stopRouter(r: RouterProcess): Promise<void> {
  return new Promise((resolve) => {
    if (r.child.exitCode !== null) return resolve();
    r.child.once('exit', () => resolve());
    r.child.kill('SIGTERM');
  });
}

function percentile(sorted: readonly number[], p: number): number {
  if (sorted.length === 0) return 0;
  return sorted[Math.min(sorted.length - 1, Math.floor(p * sorted.length))] as number;
}

function metricSum(text: string, name: string, label?: string): number {
  let sum = 0;
  for (const line of text.split('\n')) {
    if (!line.startsWith(name)) continue;
    if (label && !line.includes(label)) continue;
    sum += Number(line.split(' ').pop());
  }
  return sum;
}

/**
 * Runs the workload through `replicas` router processes using `source`, from cold caches.
 * The client sends request i to replica i mod replicas.
 */
export async function runReplicas(
  w: Workers,
  replicas: number,
  source: IndexSource,
  workload: Workload = DEFAULT_WORKLOAD,
  opts: { trace?: boolean; routerArgs?: readonly string[] } = {},
): Promise<RunResult> {
  for (const worker of w.workers) {
    const r = await fetch(`${worker.url}/flush_cache`, { method: 'POST' });
    if (r.status !== 200) throw new Error(`flush_cache on ${worker.url}: ${r.status}`);
  }
  for (const m of w.published) m.clear();
  const args = [
    '--worker-urls',
    ...w.workers.map((x) => x.url),
    '--port',
    '0',
    '--health-check-interval-ms',
    '0',
    '--load-poll-interval',
    '500ms',
    '--log-level',
    'info',
    ...(opts.routerArgs ?? []),
  ];
  if (source === 'events') {
    args.push(
      '--kv-events-endpoints',
      ...w.workers.map((x) => x.app.kvEventPublishers[0]?.endpoint as string),
      '--kv-events-replay-endpoints',
      ...w.workers.map((x) => x.app.kvEventPublishers[0]?.replayEndpoint as string),
    );
  }
  const routers = await Promise.all(Array.from({ length: replicas }, () => spawnRouter(args)));
  try {
    if (source === 'events') {
      // Every replica's streams connected (live) before traffic, as in a deployment.
      for (const r of routers) {
        for (let i = 0; i < 500; i++) {
          const m = await (await fetch(`${r.url}/metrics`)).text();
          if (metricSum(m, 'kvroute_kv_events_live{') >= w.workers.length) break;
          await new Promise((res) => setTimeout(res, 20));
        }
      }
    }
    const sessions = sessionsOf(workload);
    let counter = 0;
    let promptTokens = 0;
    let cachedTokens = 0;
    const ttfts: number[] = [];
    const trace: RequestTrace[] = [];
    const split = { toStore: 0, toAnswer: 0, n: 0 };
    const keys: number[] = [];
    const runSession = async (s: Session) => {
      let turn = 0;
      for (const text of turnPrompts(s, workload)) {
        const replica = counter++ % replicas;
        const target = routers[replica] as RouterProcess;
        const sentAt = Date.now();
        const t0 = performance.now();
        const res = await fetch(`${target.url}/generate`, {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body: JSON.stringify({
            text,
            // One new token: the response time is the time to first token.
            sampling_params: { max_new_tokens: 1 },
          }),
        });
        const body = (await res.json()) as {
          meta_info?: { prompt_tokens: number; cached_tokens: number };
        };
        ttfts.push(performance.now() - t0);
        if (res.status !== 200 || !body.meta_info) {
          throw new Error(`request failed: ${res.status} ${JSON.stringify(body)}`);
        }
        promptTokens += body.meta_info.prompt_tokens;
        cachedTokens += body.meta_info.cached_tokens;
        const doneAt = Date.now();
        const rank = Number(res.headers.get('x-kvroute-rank'));
        const ids = approximateTokenIds(text);
        const last = chainedBlockKeys(ids, EVENT_BLOCK_SIZE, ids.length, keys).at(-1);
        const storedAt = last === undefined ? undefined : w.published[rank]?.get(last);
        // Stored by this request (not an earlier one's identical prompt).
        if (storedAt !== undefined && storedAt >= sentAt && storedAt <= doneAt) {
          split.toStore += storedAt - sentAt;
          split.toAnswer += doneAt - storedAt;
          split.n++;
        }
        if (opts.trace) {
          trace.push({
            session: s.id,
            turn: turn,
            replica,
            rank,
            reason: res.headers.get('x-kvroute-reason') ?? '',
            promptTokens: body.meta_info.prompt_tokens,
            cachedTokens: body.meta_info.cached_tokens,
            sentAt,
            doneAt,
          });
        }
        turn++;
      }
    };
    const queue = sessions.slice();
    await Promise.all(
      Array.from({ length: workload.concurrency }, async () => {
        for (let s = queue.shift(); s; s = queue.shift()) await runSession(s);
      }),
    );
    let eventScores = 0;
    let fallbackScores = 0;
    let lagSum = 0;
    let lagCount = 0;
    for (const r of routers) {
      const m = await (await fetch(`${r.url}/metrics`)).text();
      eventScores += metricSum(m, 'kvroute_kv_index_rank_scores_total', 'source="events"');
      fallbackScores += metricSum(m, 'kvroute_kv_index_rank_scores_total', 'source="learned"');
      lagSum += metricSum(m, 'kvroute_kv_events_lag_seconds_sum');
      lagCount += metricSum(m, 'kvroute_kv_events_lag_seconds_count');
    }
    ttfts.sort((a, b) => a - b);
    return {
      label: `${replicas} router${replicas > 1 ? 's' : ''}, ${source}`,
      replicas,
      source,
      requests: ttfts.length,
      promptTokens,
      cachedTokens,
      hitRate: cachedTokens / promptTokens,
      ttftP50Ms: percentile(ttfts, 0.5),
      ttftP99Ms: percentile(ttfts, 0.99),
      ttftMeanMs: ttfts.reduce((a, b) => a + b, 0) / ttfts.length,
      eventLagMs: lagCount > 0 ? (1000 * lagSum) / lagCount : 0,
      sendToStoreMs: split.n > 0 ? split.toStore / split.n : 0,
      storeToAnswerMs: split.n > 0 ? split.toAnswer / split.n : 0,
      eventScores,
      fallbackScores,
      ...(opts.trace ? { trace } : {}),
    };
  } finally {
    await Promise.all(routers.map(stopRouter));
  }
}

export function formatResults(rows: readonly RunResult[], base: RunResult): string {
  const lines = [
    '| setup | requests | hit rate | vs 1 router | TTFT p50 | TTFT mean | TTFT p99 | send -> store -> answer | event lag | rank scores events / learned |',
    '| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |',
  ];
  for (const r of rows) {
    lines.push(
      `| ${r.label} | ${r.requests} | ${(100 * r.hitRate).toFixed(1)}% | ${((100 * r.hitRate) / base.hitRate).toFixed(1)}% | ${r.ttftP50Ms.toFixed(1)} ms | ${r.ttftMeanMs.toFixed(1)} ms | ${r.ttftP99Ms.toFixed(1)} ms | ${r.sendToStoreMs.toFixed(1)} + ${r.storeToAnswerMs.toFixed(1)} ms | ${r.eventLagMs.toFixed(1)} ms | ${r.eventScores} / ${r.fallbackScores} |`,
    );
  }
  return lines.join('\n');
}
