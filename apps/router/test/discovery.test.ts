// Worker discovery by pod label against a fake Kubernetes API server: it serves a pod list
// and a watch stream (test/fixtures/kubernetes/), and the router must add and remove workers
// live as pods become Ready, terminate and go away. Mock workers stand in for the pods, on
// the pods' loopback IPs and one shared port, as --service-discovery-port assumes.
import { readFileSync } from 'node:fs';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { KubeConfig } from '@kubernetes/client-node';
import { startMockWorker } from '@kvroute/mock-worker';
import { afterEach, describe, expect, it } from 'vitest';
import { resolveConfig } from '../src/config.ts';
import { labelSelector, readyWorkerUrl } from '../src/discovery/pods.ts';
import { buildRouter } from '../src/router.ts';

const fixture = (name: string) =>
  readFileSync(new URL(`./fixtures/kubernetes/${name}`, import.meta.url), 'utf8');
const podList = JSON.parse(fixture('pod-list.json')) as { items: unknown[] };
const events = fixture('watch-events.jsonl')
  .split('\n')
  .filter(Boolean)
  .map((l) => JSON.parse(l) as { type: string; object: Parameters<typeof readyWorkerUrl>[0] });

const cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  while (cleanups.length) await cleanups.pop()!();
});

interface FakeApi {
  url: string;
  requests: URL[];
  /** Sends one watch event to every open watch. */
  send(event: unknown): void;
  watching(): number;
}

async function fakeApiServer(list: { items: unknown[] } = podList): Promise<FakeApi> {
  const requests: URL[] = [];
  const watches = new Set<ServerResponse>();
  const server: Server = createServer((req: IncomingMessage, res: ServerResponse) => {
    const url = new URL(req.url ?? '/', 'http://x');
    requests.push(url);
    if (url.pathname !== '/api/v1/namespaces/llm/pods') {
      res.writeHead(404, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ kind: 'Status', status: 'Failure', code: 404 }));
      return;
    }
    if (url.searchParams.get('watch') === 'true') {
      res.writeHead(200, { 'content-type': 'application/json', 'transfer-encoding': 'chunked' });
      res.flushHeaders();
      watches.add(res);
      res.on('close', () => watches.delete(res));
      return;
    }
    res.writeHead(200, { 'content-type': 'application/json' });
    res.end(JSON.stringify(list));
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  cleanups.push(async () => {
    for (const w of watches) w.destroy();
    server.closeAllConnections();
    await new Promise<void>((r) => server.close(() => r()));
  });
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    requests,
    send: (event) => {
      for (const w of watches) w.write(`${JSON.stringify(event)}\n`);
    },
    watching: () => watches.size,
  };
}

function kubeConfigFor(server: string): KubeConfig {
  const kc = new KubeConfig();
  kc.loadFromOptions({
    clusters: [{ name: 'fake', server, skipTLSVerify: true }],
    users: [{ name: 'router', token: 'test-token' }],
    contexts: [{ name: 'fake', cluster: 'fake', user: 'router', namespace: 'llm' }],
    currentContext: 'fake',
  });
  return kc;
}

async function until(cond: () => boolean, what: string): Promise<void> {
  for (let i = 0; i < 400; i++) {
    if (cond()) return;
    await new Promise((r) => setTimeout(r, 25));
  }
  throw new Error(`timed out waiting for ${what}`);
}

/**
 * A router discovering `app=sglang` pods in namespace llm through `api`, on the pods' shared
 * `port`, with the periodic health checks off, plus `extra` flags.
 */
async function discoveringRouter(api: FakeApi, port: number, extra: string[] = []) {
  const config = resolveConfig([
    '--service-discovery',
    '--selector',
    'app=sglang',
    '--service-discovery-port',
    String(port),
    '--service-discovery-namespace',
    'llm',
    '--health-check-interval-ms',
    '0',
    ...extra,
  ]);
  const app = buildRouter(config, { kubeConfig: kubeConfigFor(api.url) });
  cleanups.push(() => app.close());
  await app.ready();
  return app;
}

/** The fixture's Ready pod as pod `i`: its own name, uid and IP 127.0.0.i. */
function readyPod(i: number): Record<string, unknown> {
  const pod = structuredClone(podList.items[0]) as {
    metadata: Record<string, unknown>;
    status: Record<string, unknown>;
  };
  pod.metadata.name = `sglang-pod-${i}`;
  pod.metadata.uid = `00000000-0000-4000-8000-00000000000${i}`;
  pod.status.podIP = `127.0.0.${i}`;
  pod.status.podIPs = [{ ip: `127.0.0.${i}` }];
  return pod;
}

/** Mock workers on 127.0.0.1..n, all on one port (the pods' shared container port). */
async function podWorkers(n: number): Promise<number> {
  for (let attempt = 0; attempt < 5; attempt++) {
    const first = await startMockWorker({ host: '127.0.0.1', port: 0, timeScale: 0 });
    const port = Number(new URL(first.url).port);
    const started = [first];
    try {
      for (let i = 2; i <= n; i++) {
        started.push(await startMockWorker({ host: `127.0.0.${i}`, port, timeScale: 0 }));
      }
      for (const w of started) cleanups.push(() => w.close());
      return port;
    } catch {
      // Another process holds that port on one of the addresses: try another port.
      await Promise.all(started.map((w) => w.close()));
    }
  }
  throw new Error('could not find one free port on 127.0.0.1-3');
}

describe('Kubernetes service discovery', () => {
  it('reads a pod as a worker only while it runs, is Ready and is not being deleted', () => {
    const [addedNotReady, ready, terminating] = events;
    expect(readyWorkerUrl(addedNotReady!.object, 8000)).toBeUndefined();
    expect(readyWorkerUrl(ready!.object, 8000)).toBe('http://127.0.0.2:8000');
    expect(readyWorkerUrl(terminating!.object, 8000)).toBeUndefined();
    expect(
      readyWorkerUrl(
        {
          status: {
            phase: 'Running',
            podIP: 'fd00::1',
            conditions: [{ type: 'Ready', status: 'True' }],
          },
        },
        1,
      ),
    ).toBe('http://[fd00::1]:1');
    expect(labelSelector(['app=sglang', 'tier=prefill'])).toBe('app=sglang,tier=prefill');
  });

  it('lists and watches pods by label, adding and removing workers live', async () => {
    const api = await fakeApiServer();
    const port = await podWorkers(3);
    // The test pins one request to a rank below.
    const app = await discoveringRouter(api, port, ['--allow-rank-override']);
    const urls = () =>
      app.kvroute.table
        .workers()
        .filter((w) => !w.removed)
        .map((w) => w.url)
        .sort();

    // The list: one Ready pod, added before the router reports ready.
    expect(urls()).toEqual([`http://127.0.0.1:${port}`]);
    const list = api.requests.find((u) => u.searchParams.get('watch') !== 'true');
    expect(list?.searchParams.get('labelSelector')).toBe('app=sglang');
    await until(() => api.watching() === 1, 'the watch to open');
    const watch = api.requests.find((u) => u.searchParams.get('watch') === 'true');
    expect(watch?.searchParams.get('labelSelector')).toBe('app=sglang');
    expect(watch?.searchParams.get('resourceVersion')).toBe('1005');

    // ADDED, not Ready yet: not a worker.
    api.send(events[0]);
    await new Promise((r) => setTimeout(r, 200));
    expect(urls()).toEqual([`http://127.0.0.1:${port}`]);

    // MODIFIED to Ready: added, and it serves.
    api.send(events[1]);
    await until(() => urls().length === 2, 'the second pod to be added');
    expect(urls()).toEqual([`http://127.0.0.1:${port}`, `http://127.0.0.2:${port}`]);

    // A prompt the second pod (rank 1, after the first by URL) serves: the policy learns it
    // there. Then the first pod goes, the second becomes rank 0, and what the policy learned
    // moves with it: the same prompt is a cache hit on rank 0 (it was a miss, the index still
    // crediting rank 1, which no longer exists).
    const prompt = {
      messages: [{ role: 'user', content: 'Refactor the parser. '.repeat(200) }],
      max_tokens: 4,
    };
    const chat = (headers: Record<string, string> = {}) =>
      app.inject({
        method: 'POST',
        url: '/v1/chat/completions',
        headers: { 'content-type': 'application/json', ...headers },
        payload: prompt,
      });
    await until(
      () => app.kvroute.table.worker(`http://127.0.0.2:${port}`)?.healthy === true,
      'the second pod to be healthy',
    );
    const pinned = await chat({ 'x-data-parallel-rank': '1' });
    expect(pinned.statusCode, pinned.body).toBe(200);
    expect(pinned.headers['x-kvroute-rank']).toBe('1');

    // The first pod terminates (deletionTimestamp), then is deleted: removed at the first sign.
    api.send(events[2]);
    await until(() => urls().length === 1, 'the terminating pod to be removed');
    expect(urls()).toEqual([`http://127.0.0.2:${port}`]);
    const again = await chat();
    expect(again.headers['x-kvroute-rank']).toBe('0');
    expect(again.headers['x-kvroute-reason']).toBe('cache-hit');
    api.send(events[3]);
    await new Promise((r) => setTimeout(r, 100));
    expect(urls()).toEqual([`http://127.0.0.2:${port}`]);

    const res = await app.inject({
      method: 'POST',
      url: '/v1/chat/completions',
      headers: { 'content-type': 'application/json' },
      payload: { messages: [{ role: 'user', content: 'hi' }], max_tokens: 4 },
    });
    expect(res.statusCode).toBe(200);
    expect(res.json()).toMatchObject({ usage: { completion_tokens: 4 } });
    // Served by a discovered worker: the router reports ready.
    expect((await app.inject({ url: '/readiness' })).statusCode).toBe(200);
  });

  /**
   * Four pods (127.0.0.2-5, ranks 0-3) serve 24 agents' conversations under `method`; then pod
   * 127.0.0.1 joins, sorts first, and every other pod's rank moves up one. Each agent's next
   * turn: whether it reached its pod with its whole history cached (the worker's own count),
   * went to the new pod, or went to another old pod; and the hit rate of those turns.
   */
  async function joinFirst(method: string) {
    const port = await podWorkers(5);
    const api = await fakeApiServer({ items: [2, 3, 4, 5].map(readyPod) });
    const app = await discoveringRouter(api, port, ['--load-balance-method', method]);
    const table = app.kvroute.table;
    await until(() => api.watching() === 1, 'the watch to open');
    expect(table.size).toBe(4);

    const tools = (i: number) =>
      `Agent ${i}. Tools: read_file(path), write_file(path, text), grep(pattern), run(cmd). `.repeat(
        40,
      );
    const turns = (i: number, n: number) => {
      const messages = [{ role: 'system', content: tools(i) }];
      for (let t = 1; t <= n; t++) {
        messages.push({
          role: 'user',
          content: `Step ${t} of agent ${i}: fix the next failing test.`,
        });
        if (t < n) messages.push({ role: 'assistant', content: `Done step ${t} for agent ${i}.` });
      }
      return messages;
    };
    const send = async (i: number, n: number) => {
      const res = await app.inject({
        method: 'POST',
        url: '/v1/chat/completions',
        headers: { 'content-type': 'application/json' },
        payload: { messages: turns(i, n), max_tokens: 4 },
      });
      expect(res.statusCode, res.body).toBe(200);
      const usage = res.json().usage as {
        prompt_tokens: number;
        prompt_tokens_details: { cached_tokens: number };
      };
      return {
        pod: table.slot(Number(res.headers['x-kvroute-rank']))!.worker.url,
        prompt: usage.prompt_tokens,
        cached: usage.prompt_tokens_details.cached_tokens,
      };
    };
    const agents = Array.from({ length: 24 }, (_, i) => i);
    const before = [];
    for (const i of agents) await send(i, 1);
    for (const i of agents) before.push(await send(i, 2));
    // The conversations are spread over the four pods.
    expect(new Set(before.map((b) => b.pod)).size).toBe(4);

    api.send({ type: 'ADDED', object: readyPod(1) });
    await until(() => table.size === 5, 'the joining pod to be added');
    const joined = `http://127.0.0.1:${port}`;
    expect(table.slot(0)?.worker.url).toBe(joined);

    const out = { kept: 0, toNew: 0, elsewhere: 0, cached: 0, prompted: 0 };
    for (const i of agents) {
      const after = await send(i, 3);
      // Its whole previous turn cached (an engine never counts a prompt's last token as cached).
      if (after.pod === before[i]!.pod && after.cached >= before[i]!.prompt - 1) out.kept++;
      else if (after.pod === joined) out.toNew++;
      else out.elsewhere++;
      out.cached += after.cached;
      out.prompted += after.prompt;
    }
    // A figure, not a gate: the worker-reported hit rate of the turns after the join.
    console.log(
      `${method}, after a pod joined first in URL order: ${out.kept} of ${agents.length} conversations stayed on their pod with their history cached, ${out.toNew} moved to the new pod, ${out.elsewhere} to another; hit rate of their next turns ${((out.cached / out.prompted) * 100).toFixed(1)}%`,
    );
    return out;
  }

  it('keeps every conversation on the pod that caches it when a pod joins first in URL order', async () => {
    // cache_aware: what it learned per rank follows the pods to their new ranks.
    const out = await joinFirst('cache_aware');
    expect(out.kept).toBe(24);
  });

  it('moves consistent_hash keys only to the joining pod when it sorts first and shifts every rank', async () => {
    // Keys hash over the pods' names, not their rank numbers: about a fifth of the agents move
    // to the new pod (the share consistent hashing gives it) and none to another old pod.
    // Hashed over rank numbers, nearly all of them would have moved.
    const out = await joinFirst('consistent_hash');
    // Maglev also moves a few other keys: 0.11% on average over 1,000 ports these pods could
    // have, 2.7% at worst, so two of 24 elsewhere would already be rare.
    expect(out.kept + out.toNew).toBeGreaterThanOrEqual(22);
    expect(out.kept).toBeGreaterThanOrEqual(12);
  });

  it('checks a discovered pod as it is added: ready at start even with every check off', async () => {
    const api = await fakeApiServer();
    const port = await podWorkers(1);
    const app = await discoveringRouter(api, port, ['--generation-check-interval-ms', '0']);
    // No request has been served and no periodic check runs: the check on add is what passed.
    const ready = await app.inject({ url: '/readiness' });
    expect(ready.json()).toMatchObject({ status: 'ok', healthy_ranks: 1, checked_workers: 1 });
    expect(ready.statusCode).toBe(200);
    // Its ranks renumber as other pods come and go, so the metrics name the pod, not a rank.
    const metrics = (await app.inject({ url: '/metrics' })).body;
    expect(metrics).toMatch(
      /kvroute_router_rank_healthy\{[^}]*url="llm\/sglang-7d9f8c6b5-a1b2c"[^}]*\} 1/,
    );
  });

  it('keeps serving its other workers while the API is unreachable, and says so in the log', async () => {
    const lines: string[] = [];
    const config = resolveConfig([
      '--service-discovery',
      '--selector',
      'app=sglang',
      '--service-discovery-namespace',
      'llm',
      '--health-check-interval-ms',
      '0',
      '--mock-workers',
      '1',
    ]);
    // Nothing listens on port 9 of loopback: every list fails.
    const app = buildRouter(
      { ...config, mockWorkers: 0, workerUrls: ['http://127.0.0.1:9'] },
      {
        kubeConfig: kubeConfigFor('http://127.0.0.1:9'),
        logger: { level: 'warn', stream: { write: (l: string) => lines.push(l) } } as never,
      },
    );
    cleanups.push(() => app.close());
    await app.ready();
    expect(app.kvroute.table.workers().map((w) => w.url)).toEqual(['http://127.0.0.1:9']);
    await until(
      () => lines.some((l) => l.includes('service discovery: Kubernetes API error')),
      'the error log',
    );
  });

  it('refuses --service-discovery without a selector, and a selector that is not key=value', () => {
    expect(() => resolveConfig(['--service-discovery'])).toThrow(/needs --selector key=value/);
    expect(() => resolveConfig(['--service-discovery', '--selector', 'app:sglang'])).toThrow(
      /"app:sglang" is not a label requirement/,
    );
  });
});
