// buildRouter(config): the fastify app, wired from named parts: the rank table and its
// monitors, the policy's dispatcher, the proxy route (proxy/: body, retry loop, forwarding)
// and the plugins (plugins/: fleet GET routes, metrics, admin). Listening is server.ts's job, so tests use app.inject() or a loopback port. Worker discovery (dp_size
// from /get_server_info) runs in onReady, so the builder stays synchronous.
import { createServer } from 'node:http';
import type { KubeConfig } from '@kubernetes/client-node';
import { createDispatcher, type Dispatcher, type DispatcherConfig } from '@kvroute/policy';
import {
  createHttpAgent,
  createRoutingTokenizer,
  kindForPath,
  REQUEST_PATHS,
  type RoutingTokenizer,
  routeNotFound,
} from '@kvroute/protocol';
import Fastify, { type FastifyInstance } from 'fastify';
import type { Agent } from 'undici';
import type { RouterConfig } from './config.ts';
import { discoveryPlugin } from './discovery/plugin.ts';
import { errorReply } from './error-reply.ts';
import { HealthMonitor } from './health.ts';
import { KvEventsFeed, type KvEventsSettings, kvEventsEnabled } from './kv-events/feed.ts';
import { LoadPoller } from './load-poller.ts';
import { createRouterMetrics, type RouterMetrics } from './metrics.ts';
import { adminPlugin } from './plugins/admin.ts';
import { metricsPlugin } from './plugins/metrics.ts';
import { probesPlugin } from './plugins/probes.ts';
import { workersApiPlugin } from './plugins/workers-api.ts';
import { proxyPlugin } from './proxy/plugin.ts';
import { createProxyHandler, type ProxyHandler } from './proxy/route.ts';
import { RankTable, type Worker } from './rank-table.ts';
import { addWorker } from './topology.ts';

export interface BuildRouterOptions {
  /** fastify logger option; false (default) keeps tests quiet, server.ts passes a level. */
  logger?: boolean | { level: string };
  /** A ready tokenizer (tests, embedders); default from config.tokenizer. */
  tokenizer?: RoutingTokenizer;
  /** Service discovery's API credentials (tests); default: in-cluster or KUBECONFIG. */
  kubeConfig?: KubeConfig;
}

/** What the router exposes to embedders and tests as `app.kvroute`. */
export interface RouterState {
  readonly config: RouterConfig;
  readonly table: RankTable;
  readonly dispatcher: Dispatcher;
  readonly health: HealthMonitor;
  readonly loadPoller: LoadPoller;
  readonly metrics: RouterMetrics;
  readonly tokenizer: RoutingTokenizer;
  /** The keep-alive pools to the workers, shared by the proxy, checks and polls. */
  readonly agent: Agent;
  /** The events-fed cache index, when --kv-events-endpoint(s) is set. */
  readonly kvEvents: KvEventsFeed | undefined;
  /** Adds a worker at runtime (the admin POST /ranks path). */
  addWorker(url: string, dpSize?: number): Promise<Worker>;
  removeWorker(url: string): Worker | undefined;
}

declare module 'fastify' {
  interface FastifyInstance {
    kvroute: RouterState;
  }
}

/** The policy config the CLI flags describe (a plain object). */
export function dispatcherConfig(config: RouterConfig): DispatcherConfig {
  const out: DispatcherConfig = { method: config.loadBalanceMethod };
  if (config.prefixWindow !== undefined) out.window = config.prefixWindow;
  if (config.prefixLength !== undefined) out.prefixLength = config.prefixLength;
  if (Object.keys(config.policyOptions).length > 0) out.options = { ...config.policyOptions };
  if (config.dpCacheAffinity === 'routing_key') {
    out.affinity = {
      kind: 'routing_key',
      maxEntries: config.affinityMaxEntries,
      ttlMs: config.affinityTtlMs,
    };
  }
  return out;
}

export function buildRouter(config: RouterConfig, opts: BuildRouterOptions = {}): FastifyInstance {
  const app = Fastify({
    // POSTs to the proxied paths go straight to serveProxy; everything else to fastify.
    serverFactory: (handler) => {
      const server = createServer((req, res) => {
        const kind = req.method === 'POST' ? kindForPath(req.url ?? '') : undefined;
        if (kind) {
          const route = REQUEST_PATHS[kind];
          const start = performance.now();
          res.once('close', () => {
            metrics.requestDuration.observe(
              { route, status: String(res.headersSent ? res.statusCode : 499) },
              (performance.now() - start) / 1e3,
            );
          });
          void serveProxy(req, res, kind, route);
        } else handler(req, res);
      });
      // What fastify sets on servers it creates itself (it leaves a factory's alone).
      server.keepAliveTimeout = 72_000;
      server.requestTimeout = 0;
      return server;
    },
    logger: opts.logger ?? false,
    bodyLimit: config.maxBodyBytes,
    disableRequestLogging: true,
    // One logger for all requests instead of a pino child per request: the router logs
    // failures, not traffic, and the child costs an allocation on every proxied call.
    childLoggerFactory: (logger) => logger,
    // Streams may run for minutes; the per-request timer (--request-timeout-ms) governs instead.
    requestTimeout: 0,
    return503OnClosing: false,
  });
  const dispatcher = createDispatcher(dispatcherConfig(config));
  const tokenizer =
    opts.tokenizer ??
    createRoutingTokenizer(config.tokenizer ? { tokenizerJsonPath: config.tokenizer } : {});
  const table = new RankTable();
  const agent = createHttpAgent();
  const log = app.log;
  const health = new HealthMonitor(table, agent, config.health, log);
  const loadPoller = new LoadPoller(
    table,
    agent,
    config.loadPollIntervalMs,
    Math.max(100, Math.min(config.health.timeoutMs, config.loadPollIntervalMs || 1000)),
  );
  const metrics = createRouterMetrics({
    ranks: () => table.info(),
    affinity: () => {
      const a = dispatcher.stats().affinity;
      return a && { ...a, evictions: a.evictions + a.expirations };
    },
  });

  const kvSettings: KvEventsSettings = {
    endpoint: config.kvEventsEndpoint,
    replayEndpoint: config.kvEventsReplayEndpoint,
    endpoints: config.kvEventsEndpoints,
    replayEndpoints: config.kvEventsReplayEndpoints,
    topic: config.kvEventsTopic,
    staleMs: config.kvEventsStaleMs,
    maxBlocksPerRank: config.kvEventsMaxBlocks,
  };
  const kvEvents = kvEventsEnabled(kvSettings)
    ? new KvEventsFeed(
        kvSettings,
        table,
        config.workerUrls,
        metrics.registry,
        log,
        () => dispatcher.stats().method,
      )
    : undefined;

  const state: RouterState = {
    config,
    kvEvents,
    table,
    dispatcher,
    health,
    loadPoller,
    metrics,
    tokenizer,
    agent,
    addWorker: (url, dpSize) =>
      addWorker(table, agent, url, {
        dpAware: config.dpAware,
        dpSize: dpSize ?? config.dpSize,
        timeoutMs: Math.max(config.health.timeoutMs, 5_000),
      }),
    removeWorker: (url) => table.removeWorker(url),
  };
  app.decorate('kvroute', state);

  app.addHook('onReady', async () => {
    for (const url of config.workerUrls) await state.addWorker(url);
    kvEvents?.start();
    health.start();
    loadPoller.start();
  });
  app.addHook('onClose', async () => {
    health.stop();
    loadPoller.stop();
    await kvEvents?.close();
    await agent.destroy();
  });

  // Admin bodies arrive as raw bytes and are parsed by @kvroute/protocol like proxied ones (the
  // proxy path reads its own bodies, forwarding them as received unless routed_dp_rank is set).
  app.removeAllContentTypeParsers();
  app.addContentTypeParser('*', { parseAs: 'buffer' }, (_req, body, done) => done(null, body));

  app.setNotFoundHandler((req, reply) => {
    const err = routeNotFound(req.method, req.url);
    reply.code(err.status).send(err.toJSON());
  });

  app.setErrorHandler((err, req, reply) => {
    const { status, body } = errorReply(err, req.log, config.maxBodyBytes);
    reply.code(status).send(body);
  });

  const serveProxy: ProxyHandler = createProxyHandler({
    config,
    table,
    dispatcher,
    tokenizer,
    agent,
    health,
    metrics,
    log,
    kvIndex: kvEvents,
  });
  app.register(proxyPlugin, { handler: serveProxy });
  app.register(workersApiPlugin, { state });
  app.register(metricsPlugin, { metrics });
  app.register(probesPlugin, { table });
  if (config.serviceDiscovery) {
    app.register(discoveryPlugin, {
      state,
      ...(opts.kubeConfig ? { kubeConfig: opts.kubeConfig } : {}),
    });
  }
  if (config.adminToken !== undefined) {
    app.register(adminPlugin, { state, token: config.adminToken });
  }
  return app;
}
