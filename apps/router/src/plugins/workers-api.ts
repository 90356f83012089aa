// The GET routes a client reaches that are answered from the fleet rather than proxied:
// /health (SGLang's meaning: the server can serve) and /v1/models (any healthy worker knows
// the model list; no load accounting).

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
    const workers = table.workers().filter((w) => w.healthy);
    for (let i = 0; i < workers.length; i++) {
      const w = workers[(modelsCursor + i) % workers.length]!;
      try {
        const res = await getText(opts.state.agent, `${w.url}/v1/models`, config.health.timeoutMs);
        if (res.status >= 500) continue;
        modelsCursor = (modelsCursor + i + 1) % workers.length;
        reply.code(res.status).header('content-type', 'application/json').send(res.text);
        return;
      } catch (err) {
        health.reportConnectError(w, describeError(err));
      }
    }
    throw noRankLeft(table, undefined, 'no worker answered /v1/models');
  });

  app.get('/health', async (_req, reply) => {
    const healthy = table.info().filter((r) => r.healthy).length;
    reply.code(healthy > 0 ? 200 : 503).send({
      status: healthy > 0 ? 'ok' : 'unavailable',
      healthy_ranks: healthy,
      ranks: table.size,
    });
  });
}
