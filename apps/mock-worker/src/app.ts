// buildMockWorker(options): the worker as a fastify instance, wired from named parts: the
// engine (ranks, dispatcher, clock), fault injection, metrics, and two sets of routes
// (inference, and everything else). start.ts listens.
import { createRoutingTokenizer } from '@kvroute/protocol';
import Fastify, { type FastifyInstance } from 'fastify';
import { MockEngine } from './engine.ts';
import { createFaults } from './faults.ts';
import { BODY_LIMIT, installHttpBasics } from './http-basics.ts';
import { createWorkerMetrics } from './metrics.ts';
import { type MockWorkerOptions, type ResolvedOptions, resolveOptions } from './options.ts';
import { registerInferenceRoutes } from './routes/inference.ts';
import { registerInfoRoutes } from './routes/info.ts';

declare module 'fastify' {
  interface FastifyInstance {
    /** The engine behind this worker (ranks, dispatcher, scheduler); for tests and the router. */
    mockEngine: MockEngine;
    mockOptions: ResolvedOptions;
  }
}

export function buildMockWorker(options: MockWorkerOptions = {}): FastifyInstance {
  const opts = resolveOptions(options);
  const engine = new MockEngine(opts);
  const tokenizer = createRoutingTokenizer(
    opts.tokenizer ? { tokenizerJsonPath: opts.tokenizer } : {},
  );
  const metrics = createWorkerMetrics(engine, opts.modelName);
  const faults = createFaults(opts, metrics);
  const deps = { opts, engine, metrics, tokenizer, faults };

  const app = Fastify({ logger: opts.logger, bodyLimit: BODY_LIMIT });
  app.decorate('mockEngine', engine);
  app.decorate('mockOptions', opts);
  app.addHook('onClose', async () => engine.close());
  installHttpBasics(app);
  registerInfoRoutes(app, deps);
  registerInferenceRoutes(app, deps);
  return app;
}
