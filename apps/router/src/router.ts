// buildRouter(config): the fastify app, wired from named parts: the rank table and its
// monitors, the policy's dispatcher, the proxy route (proxy/: body, retry loop, forwarding)
// and the plugins (plugins/: fleet GET routes, metrics, admin). Listening is server.ts's job, so tests use app.inject() or a loopback port. Worker discovery (dp_size
// from /get_server_info) runs in onReady, so the builder stays synchronous.
import { createServer, type ServerResponse } from 'node:http';
import type { Socket } from 'node:net';
import type { KubeConfig } from '@kubernetes/client-node';
import { createDispatcher, type Dispatcher, type DispatcherConfig } from '@kvroute/policy';
import {
  createHttpAgent,
  createRoutingTokenizer,
  DEFAULT_LIMITS,
  kindForPath,
  REQUEST_PATHS,
  type RequestLimits,
  type RoutingTokenizer,
  routeNotFound,
} from '@kvroute/protocol';
import { type Tracer, trace } from '@opentelemetry/api';
import Fastify, { type FastifyBaseLogger, type FastifyInstance } from 'fastify';
import type { Agent } from 'undici';
import { Admission } from './admission.ts';
import { loadApiKeys, type RouterConfig } from './config.ts';
import { discoveryPlugin } from './discovery/plugin.ts';
import { errorReply } from './error-reply.ts';
import type { RouterError } from './errors.ts';
import { HealthMonitor } from './health.ts';
import { KvEventsFeed, type KvEventsSettings, kvEventsEnabled } from './kv-events/feed.ts';
import { LoadPoller } from './load-poller.ts';
import { createRouterMetrics, type RouterMetrics } from './metrics.ts';
import { OutlierDetector } from './outlier.ts';
import { adminPlugin } from './plugins/admin.ts';
import { engineApiPlugin, forwardToOneWorker } from './plugins/engine-api.ts';
import { metricsPlugin } from './plugins/metrics.ts';
import { workersApiPlugin } from './plugins/workers-api.ts';
import { proxyPlugin } from './proxy/plugin.ts';
import { createProxyHandler, type ProxyHandler } from './proxy/route.ts';
import { RankTable, type Worker } from './rank-table.ts';
import { createReliabilityMetrics } from './reliability-metrics.ts';
import { addWorker, fetchContextLength, fetchModelId } from './topology.ts';

export interface BuildRouterOptions {
  /** fastify logger option; false (default) keeps tests quiet, server.ts passes a level. */
  logger?: boolean | { level: string };
  /** A ready tokenizer (tests, embedders); default from config.tokenizer. */
  tokenizer?: RoutingTokenizer;
  /** Service discovery's API credentials (tests); default: in-cluster or KUBECONFIG. */
  kubeConfig?: KubeConfig;
  /** With --otel: the tracer for request spans; default: the process's global provider. */
  tracer?: Tracer;
}

/** What the router exposes to embedders and tests as `app.kvroute`. */
export interface RouterState {
  readonly config: RouterConfig;
  readonly table: RankTable;
  readonly dispatcher: Dispatcher;
  readonly health: HealthMonitor;
  readonly outlier: OutlierDetector;
  readonly admission: Admission;
  readonly loadPoller: LoadPoller;
  readonly metrics: RouterMetrics;
  readonly tokenizer: RoutingTokenizer;
  /** The keep-alive pools to the workers, shared by the proxy, checks and polls. */
  readonly agent: Agent;
  /** Request limits in force (max_tokens bound from the workers' context, JSON depth). */
  limits(): RequestLimits;
  /** With --admin-port: the app serving /metrics and the admin routes (cli.ts listens on it). */
  adminApp?: FastifyInstance;
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
  Object.assign(out, config.methodOptions);
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

/** The metrics `url` label: never a worker URL on the unauthenticated main listener. */
function metricsUrl(config: RouterConfig, worker: Worker | undefined, url: string): string {
  if (config.adminPort === undefined) return `worker-r${worker?.ranks[0] ?? '?'}`;
  try {
    const u = new URL(url);
    return `${u.protocol}//${u.host}${u.pathname.replace(/\/+$/, '')}`;
  } catch {
    return 'invalid-url';
  }
}

export function buildRouter(config: RouterConfig, opts: BuildRouterOptions = {}): FastifyInstance {
  const app = Fastify({
    // POSTs to the proxied paths go straight to serveProxy; everything else to fastify.
    serverFactory: (handler) => {
      const server = createServer(
        // Expired body and header timeouts are found by Node's periodic sweep.
        { connectionsCheckingInterval: 1_000 },
        (req, res) => {
          const kind = req.method === 'POST' ? kindForPath(req.url ?? '') : undefined;
          if (kind) void serveProxy(req, res, kind, REQUEST_PATHS[kind]);
          else handler(req, res);
        },
      );
      // What fastify sets on servers it creates itself (it leaves a factory's alone).
      server.keepAliveTimeout = 72_000;
      // Receiving a request (headers, then body) is bounded; answering it is not (streams).
      server.headersTimeout = config.headersTimeoutMs;
      server.requestTimeout = config.headersTimeoutMs + config.bodyTimeoutMs;
      if (config.maxConnections > 0) server.maxConnections = config.maxConnections;
      // A client that half-closes after sending its request still gets the answer. Node would
      // treat the FIN as an abort; instead, while the answer is pending, a 102 interim
      // response goes out every 500 ms: a half-closed client ignores it, a gone one answers
      // with a reset, which fails the next write and so aborts the request. A FIN once the
      // answer has started is a client leaving mid-response.
      (server as typeof server & { httpAllowHalfOpen: boolean }).httpAllowHalfOpen = true;
      server.on('connection', (socket: Socket) => {
        socket.on('end', () => {
          const res = (socket as Socket & { _httpMessage?: ServerResponse })._httpMessage;
          if (!res || res.writableEnded) return;
          if (res.headersSent) {
            socket.destroy();
            return;
          }
          const probe = (): void => {
            if (res.headersSent || res.writableEnded || socket.destroyed) return;
            res.writeProcessing();
            setTimeout(probe, 500).unref();
          };
          probe();
        });
      });
      // Expect: 100-continue is answered only for a body the router will take.
      server.on('checkContinue', (req, res) => {
        const kind = req.method === 'POST' ? kindForPath(req.url ?? '') : undefined;
        const refused = kind ? serveProxy.precheck(req) : undefined;
        if (refused) {
          const text = JSON.stringify(refused.toJSON());
          const retryAfter = (refused as RouterError).retryAfterSec;
          const headers: Record<string, string | number> = {
            'content-type': 'application/json; charset=utf-8',
            'content-length': Buffer.byteLength(text),
            connection: 'close',
          };
          if (retryAfter !== undefined) headers['retry-after'] = retryAfter;
          res.writeHead(refused.status, headers);
          res.end(text);
          return;
        }
        res.writeContinue();
        server.emit('request', req, res);
      });
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
  if (config.workerApiKey !== undefined) {
    health.headers = { authorization: `Bearer ${config.workerApiKey}` };
  }
  const outlier = new OutlierDetector(table, config.outlier, (w) => health.probe(w), log);
  const admission = new Admission(config, loadApiKeys(config));
  const loadPoller = new LoadPoller(
    table,
    agent,
    config.loadPollIntervalMs,
    Math.max(100, Math.min(config.health.timeoutMs, config.loadPollIntervalMs || 1000)),
  );
  const metrics = createRouterMetrics({
    ranks: () =>
      table.info().map((r) => {
        const worker = table.slot(r.rank)?.worker;
        const url = metricsUrl(config, worker, r.url);
        return { ...r, url, worker: url, model: worker?.model ?? 'unknown' };
      }),
    affinity: () => {
      const a = dispatcher.stats().affinity;
      return a && { ...a, evictions: a.evictions + a.expirations };
    },
  });
  const reliability = createReliabilityMetrics(
    metrics.registry,
    table,
    admission,
    () => outlier.ejectionsTotal,
  );
  // The smallest context any worker reports bounds max_tokens (a request may go to any of them).
  const contexts = new Map<string, number>();
  let limits: RequestLimits = { ...DEFAULT_LIMITS, maxJsonDepth: config.maxJsonDepth };
  const updateLimits = (): void => {
    const known = [...contexts.values()];
    const maxOutputTokens =
      config.maxModelLen ??
      (known.length > 0 ? Math.min(...known) : DEFAULT_LIMITS.maxOutputTokens);
    limits = { maxOutputTokens, maxJsonDepth: config.maxJsonDepth };
  };
  updateLimits();

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
    outlier,
    admission,
    loadPoller,
    metrics,
    tokenizer,
    agent,
    limits: () => limits,
    addWorker: async (url, dpSize) => {
      const worker = await addWorker(table, agent, url, {
        dpAware: config.dpAware,
        dpSize: dpSize ?? config.dpSize,
        timeoutMs: Math.max(config.health.timeoutMs, 5_000),
      });
      worker.model = await fetchModelId(agent, url, config.health.timeoutMs, health.headers);
      if (config.maxModelLen === undefined) {
        const ctx = await fetchContextLength(agent, url, config.health.timeoutMs, health.headers);
        if (ctx !== undefined) {
          contexts.set(url, ctx);
          updateLimits();
        }
      }
      return worker;
    },
    removeWorker: (url) => {
      const w = table.removeWorker(url);
      if (contexts.delete(url)) updateLimits();
      return w;
    },
  };
  app.decorate('kvroute', state);

  app.addHook('onReady', async () => {
    for (const url of config.workerUrls) await state.addWorker(url);
    // One round of checks before serving, so readiness reflects the fleet from the start.
    await health.checkAll();
    await kvEvents?.start();
    health.start();
    loadPoller.start();
  });
  app.addHook('onClose', async () => {
    health.stop();
    loadPoller.stop();
    outlier.stop();
    admission.close();
    await state.adminApp?.close();
    await kvEvents?.close();
    await agent.destroy();
  });

  // Admin bodies arrive as raw bytes and are parsed by @kvroute/protocol like proxied ones (the
  // proxy path reads its own bodies, forwarding them as received unless routed_dp_rank is set).
  app.removeAllContentTypeParsers();
  app.addContentTypeParser('*', { parseAs: 'buffer' }, (_req, body, done) => done(null, body));

  if (config.passThroughUnknown) app.setNotFoundHandler(forwardToOneWorker(state));
  else {
    app.setNotFoundHandler((req, reply) => {
      const err = routeNotFound(req.method, req.url);
      reply.code(err.status).send(err.toJSON());
    });
  }

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
    outlier,
    admission,
    metrics,
    reliability,
    log,
    limits: () => limits,
    kvIndex: kvEvents,
    workerLabel: (w) => metricsUrl(config, w, w.url),
    tracer: config.otel ? (opts.tracer ?? trace.getTracer('@kvroute/router')) : undefined,
  });
  // Attempts that sent nothing yet leave a worker as soon as it is taken out.
  health.onDown = (w, reason) => serveProxy.evacuate(w, reason);
  outlier.onEject = (w, reason) => serveProxy.evacuate(w, reason);

  app.register(proxyPlugin, { handler: serveProxy });
  app.register(workersApiPlugin, { state });
  app.register(engineApiPlugin, { state });
  if (config.serviceDiscovery) {
    app.register(discoveryPlugin, {
      state,
      ...(opts.kubeConfig ? { kubeConfig: opts.kubeConfig } : {}),
    });
  }
  // Metrics and admin: on the main listener, or only on their own (--admin-port).
  const ops = config.adminPort === undefined ? app : buildOpsApp(config, log);
  ops.register(metricsPlugin, { metrics });
  if (config.adminToken !== undefined) {
    ops.register(adminPlugin, { state, token: config.adminToken });
  }
  if (ops !== app) state.adminApp = ops;
  return app;
}

/** The second listener for --admin-port: metrics and admin routes, same error shape. */
function buildOpsApp(config: RouterConfig, log: FastifyBaseLogger): FastifyInstance {
  const ops = Fastify({ loggerInstance: log, disableRequestLogging: true });
  ops.removeAllContentTypeParsers();
  ops.addContentTypeParser('*', { parseAs: 'buffer' }, (_req, body, done) => done(null, body));
  ops.setNotFoundHandler((req, reply) => {
    const err = routeNotFound(req.method, req.url);
    reply.code(err.status).send(err.toJSON());
  });
  ops.setErrorHandler((err, req, reply) => {
    const { status, body } = errorReply(err, req.log, config.maxBodyBytes);
    reply.code(status).send(body);
  });
  ops.get('/liveness', async () => ({ status: 'ok' }));
  return ops;
}
