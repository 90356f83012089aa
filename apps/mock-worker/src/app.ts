// buildMockWorker(options): the worker as a fastify instance, wired from named parts: the
// engine (ranks, dispatcher, clock), fault injection, metrics, the KV event publishers, and
// two sets of routes (inference, and everything else). start.ts listens.
import { createRoutingTokenizer } from '@kvroute/protocol';
import Fastify, { type FastifyInstance } from 'fastify';
import { MockEngine } from './engine.ts';
import { createFaults } from './faults.ts';
import { BODY_LIMIT, installHttpBasics } from './http-basics.ts';
import { type RankEventPublisher, startKvEventPublishers } from './kv-events.ts';
import { createWorkerMetrics } from './metrics.ts';
import { type MockWorkerOptions, type ResolvedOptions, resolveOptions } from './options.ts';
import { BootstrapServer } from './pd/bootstrap.ts';
import { createPdRoles, type PdRole, type TransferRecord } from './pd/roles.ts';
import { registerInferenceRoutes } from './routes/inference.ts';
import { registerInfoRoutes } from './routes/info.ts';

declare module 'fastify' {
  interface FastifyInstance {
    /** The engine behind this worker (ranks, dispatcher, scheduler); for tests and the router. */
    mockEngine: MockEngine;
    mockOptions: ResolvedOptions;
    /** One KV event publisher per DP rank when kvEventsConfig is set (bound on ready). */
    kvEventPublishers: RankEventPublisher[];
    /** Prefill/decode role state (--role): the bootstrap server, the decode side's transfers. */
    mockPd: MockPdState;
  }
}

export interface MockPdState {
  role: PdRole | 'colocated';
  /** The prefill role's bootstrap server (start.ts binds it). */
  bootstrap: BootstrapServer | undefined;
  /** Decode role: one record per KV pulled (which prefill DP rank, which decode rank, how long). */
  transfers: TransferRecord[];
}

export function buildMockWorker(options: MockWorkerOptions = {}): FastifyInstance {
  const opts = resolveOptions(options);
  const engine = new MockEngine(opts);
  const tokenizer = createRoutingTokenizer(
    opts.tokenizer ? { tokenizerJsonPath: opts.tokenizer } : {},
  );
  const metrics = createWorkerMetrics(engine, opts.modelName);
  const faults = createFaults(opts, metrics);
  const bootstrap =
    opts.role === 'prefill'
      ? new BootstrapServer({
          dpSize: opts.dpSize,
          pageSize: opts.pageSize,
          followBootstrapRoom: opts.loadBalanceMethod === 'follow_bootstrap_room',
        })
      : undefined;
  const transfers: TransferRecord[] = [];
  const pd =
    opts.role === 'colocated' ? undefined : createPdRoles({ opts, engine, bootstrap, transfers });
  const deps = { opts, engine, metrics, tokenizer, faults, pd };

  const app = Fastify({ logger: opts.logger, bodyLimit: BODY_LIMIT });
  app.decorate('mockEngine', engine);
  app.decorate('mockOptions', opts);
  app.addHook('onClose', async () => engine.close());
  app.decorate('mockPd', { role: opts.role, bootstrap, transfers } satisfies MockPdState);
  if (bootstrap) app.addHook('onClose', async () => bootstrap.close());
  app.decorate('kvEventPublishers', [] as RankEventPublisher[]);
  const kvEvents = opts.kvEvents;
  if (kvEvents) {
    // Bound before the worker serves, so no cache change goes unpublished.
    app.addHook('onReady', async () => {
      app.kvEventPublishers.push(
        ...(await startKvEventPublishers(
          engine.ranks.map((r) => r.cache),
          kvEvents,
        )),
      );
    });
    app.addHook('onClose', async () => {
      await Promise.all(app.kvEventPublishers.map((p) => p.close()));
    });
  }
  installHttpBasics(app);
  registerInfoRoutes(app, deps);
  registerInferenceRoutes(app, deps);
  return app;
}
