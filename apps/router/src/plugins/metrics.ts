// GET /metrics as a fastify plugin: the router's own prom-client registry in Prometheus text.
import type { FastifyInstance } from 'fastify';
import type { RouterMetrics } from '../metrics.ts';

export interface MetricsPluginOptions {
  metrics: RouterMetrics;
}

export async function metricsPlugin(
  app: FastifyInstance,
  opts: MetricsPluginOptions,
): Promise<void> {
  const { registry } = opts.metrics;
  app.get('/metrics', async (_req, reply) => {
    reply.header('content-type', registry.contentType).send(await registry.metrics());
  });
}
