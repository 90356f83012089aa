// Prefill and decode mock workers on loopback ports, the router in front in PD mode.
import type { AddressInfo } from 'node:net';
import {
  type RunningMockWorker,
  type StartMockWorkerOptions,
  startMockWorker,
} from '@kvroute/mock-worker';
import { buildRouter, resolveConfig } from '@kvroute/router';

export type RouterApp = ReturnType<typeof buildRouter>;

export interface PdCluster {
  prefill: RunningMockWorker[];
  decode: RunningMockWorker[];
  router: RouterApp;
  url: string;
  close(): Promise<void>;
}

export async function startPdCluster(opts: {
  prefill?: number;
  decode?: number;
  worker?: StartMockWorkerOptions;
  prefillWorker?: StartMockWorkerOptions;
  decodeWorker?: StartMockWorkerOptions;
  routerArgs?: string[];
  /** Leave --prefill without its bootstrap port (the router reads it from /get_server_info). */
  omitBootstrapPort?: boolean;
}): Promise<PdCluster> {
  const prefill = await Promise.all(
    Array.from({ length: opts.prefill ?? 2 }, () =>
      startMockWorker({
        timeScale: 0,
        bootstrapPort: 0,
        ...opts.worker,
        ...opts.prefillWorker,
        role: 'prefill',
      }),
    ),
  );
  const decode = await Promise.all(
    Array.from({ length: opts.decode ?? 2 }, () =>
      startMockWorker({ timeScale: 0, ...opts.worker, ...opts.decodeWorker, role: 'decode' }),
    ),
  );
  const args = ['--pd-disaggregation'];
  for (const p of prefill) {
    args.push('--prefill', p.url);
    if (!opts.omitBootstrapPort) args.push(String(p.app.mockPd.bootstrap?.port));
  }
  for (const d of decode) args.push('--decode', d.url);
  const config = resolveConfig([
    ...args,
    '--health-check-interval-ms',
    '0',
    '--generation-check-interval-ms',
    '0',
    ...(opts.routerArgs ?? []),
  ]);
  const router = buildRouter(config);
  await router.listen({ host: '127.0.0.1', port: 0 });
  const url = `http://127.0.0.1:${(router.server.address() as AddressInfo).port}`;
  return {
    prefill,
    decode,
    router,
    url,
    close: async () => {
      await router.close();
      await Promise.all([...prefill, ...decode].map((w) => w.close()));
    },
  };
}
