// Four (or N) mock workers on loopback ports and the router in front, over real HTTP.
import type { AddressInfo } from 'node:net';
import {
  type RunningMockWorker,
  type StartMockWorkerOptions,
  startMockWorker,
} from '@kvroute/mock-worker';
import { buildRouter, resolveConfig } from '@kvroute/router';

export type RouterApp = ReturnType<typeof buildRouter>;

export interface Cluster {
  workers: RunningMockWorker[];
  router: RouterApp;
  url: string;
  close(): Promise<void>;
}

export async function startCluster(opts: {
  workers?: number;
  worker?: StartMockWorkerOptions;
  routerArgs?: string[];
  dpAware?: boolean;
}): Promise<Cluster> {
  const n = opts.workers ?? 4;
  const workers = await Promise.all(
    Array.from({ length: n }, () => startMockWorker({ timeScale: 0, ...opts.worker })),
  );
  const config = resolveConfig([
    '--worker-urls',
    ...workers.map((w) => w.url),
    '--health-check-interval-ms',
    '0',
    ...(opts.dpAware ? ['--dp-aware'] : []),
    ...(opts.routerArgs ?? []),
  ]);
  const router = buildRouter(config);
  await router.listen({ host: '127.0.0.1', port: 0 });
  const url = `http://127.0.0.1:${(router.server.address() as AddressInfo).port}`;
  return {
    workers,
    router,
    url,
    close: async () => {
      await router.close();
      await Promise.all(workers.map((w) => w.close()));
    },
  };
}

export interface JsonResponse {
  status: number;
  headers: Record<string, string>;
  // biome-ignore lint/suspicious/noExplicitAny: response bodies are checked field by field in tests
  body: any;
}

export async function postJson(
  url: string,
  body: unknown,
  headers: Record<string, string> = {},
): Promise<JsonResponse> {
  const res = await fetch(url, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...headers },
    body: typeof body === 'string' ? body : JSON.stringify(body),
  });
  const text = await res.text();
  let parsed: unknown = text;
  try {
    parsed = JSON.parse(text);
  } catch {}
  return { status: res.status, headers: Object.fromEntries(res.headers), body: parsed };
}

export async function getText(
  url: string,
  headers: Record<string, string> = {},
): Promise<{ status: number; text: string }> {
  const res = await fetch(url, { headers });
  return { status: res.status, text: await res.text() };
}

/** The value of one Prometheus sample line, or 0 when absent. */
export function metricValue(text: string, sample: string): number {
  for (const line of text.split('\n')) {
    if (line.startsWith(`${sample} `)) return Number(line.slice(sample.length + 1));
  }
  return 0;
}

export function sumMetric(text: string, name: string): number {
  let sum = 0;
  for (const line of text.split('\n')) {
    if (line.startsWith(`${name}{`) || line.startsWith(`${name} `))
      sum += Number(line.split(' ').pop());
  }
  return sum;
}

export async function waitFor(
  cond: () => boolean | Promise<boolean>,
  what: string,
  timeoutMs = 5000,
): Promise<void> {
  const end = Date.now() + timeoutMs;
  while (!(await cond())) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 10));
  }
}
