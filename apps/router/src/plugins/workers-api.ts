// The GET routes a client reaches that are answered from the fleet rather than proxied:
//   /liveness   the router process is up (200 always);
//   /readiness  some rank is routable and its worker has passed a check or served a request;
//   /health     SGLang's meaning, "this endpoint can serve requests": the same condition as
//               /readiness, so it never says ok before any worker was checked;
//   /v1/models  any healthy worker knows the model list (no load accounting).

import { describeError, getText } from '@kvroute/protocol';
import type { FastifyInstance } from 'fastify';
import { noRankLeft } from '../proxy/route.ts';
import type { RouterState } from '../router.ts';

export interface WorkersApiOptions {
  state: RouterState;
}

export async function workersApiPlugin(
  app: FastifyInstance,
  opts: WorkersApiOptions,
): Promise<void> {
  const { config, table, health } = opts.state;
  let modelsCursor = 0;
  app.get('/v1/models', async (_req, reply) => {
    const workers = table.workers().filter((w) => w.healthy && !w.ejected);
    for (let i = 0; i < workers.length; i++) {
      const w = workers[(modelsCursor + i) % workers.length]!;
      try {
        const res = await getText(
          opts.state.agent,
          `${w.url}/v1/models`,
          config.health.timeoutMs,
          health.headers,
        );
        if (res.status >= 500) continue;
        modelsCursor = (modelsCursor + i + 1) % workers.length;
        reply.code(res.status).header('content-type', 'application/json').send(res.text);
        return;
      } catch (err) {
        health.reportConnectError(w, describeError(err));
      }
    }
    throw noRankLeft(undefined, 'no worker answered /v1/models');
  });

  const readiness = () => {
    const ranks = table.info().filter((r) => r.healthy);
    const checked = table.workers().filter((w) => w.everPassed && w.healthy && !w.ejected);
    const ready = ranks.length > 0 && checked.length > 0;
    return {
      ready,
      body: {
        status: ready ? 'ok' : 'unavailable',
        healthy_ranks: ranks.length,
        ranks: table.size,
        checked_workers: checked.length,
      },
    };
  };
  app.get('/health', async (_req, reply) => {
    const r = readiness();
    reply.code(r.ready ? 200 : 503).send(r.body);
  });
  app.get('/readiness', async (_req, reply) => {
    const r = readiness();
    reply.code(r.ready ? 200 : 503).send(r.body);
  });
  app.get('/liveness', async () => ({ status: 'ok' }));
}
