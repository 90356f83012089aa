// Kubernetes-style probes, as SGLang's router has them. /liveness answers while the process
// serves HTTP, whatever the workers do, so an orchestrator never restarts a router for its
// workers' sake. /readiness (like /health) is 200 only while some rank can take a request,
// so a Service stops sending traffic to a router that has none.
import type { FastifyInstance } from 'fastify';
import type { RankTable } from '../rank-table.ts';

export interface ProbesOptions {
  table: RankTable;
}

export async function probesPlugin(app: FastifyInstance, opts: ProbesOptions): Promise<void> {
  app.get('/liveness', async () => ({ status: 'ok' }));
  app.get('/readiness', async (_req, reply) => {
    const healthy = opts.table.info().filter((r) => r.healthy).length;
    reply.code(healthy > 0 ? 200 : 503).send({
      status: healthy > 0 ? 'ready' : 'no healthy rank',
      healthy_ranks: healthy,
      ranks: opts.table.size,
    });
  });
}
