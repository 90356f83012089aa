// buildRouter(config): the fastify app, wired from named parts: the rank table and its
// monitors, the policy's dispatcher, the proxy route (proxy/: body, retry loop, forwarding)
// and the plugins (plugins/: fleet GET routes, metrics, admin). Listening is server.ts's job, so tests use app.inject() or a loopback port. Worker discovery (dp_size
// from /get_server_info) runs in onReady, so the builder stays synchronous.
import { createServer, type ServerResponse } from 'node:http';
import type { Socket } from 'node:net';
import type { KubeConfig } from '@kubernetes/client-node';
import type { Dispatcher, DispatcherConfig } from '@kvroute/policy';
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
import { Counter, Gauge } from 'prom-client';
import { Admission } from './admission.ts';
import { loadApiKeys, type RouterConfig } from './config.ts';
import { discoveryPlugin } from './discovery/plugin.ts';
import { errorReply } from './error-reply.ts';
import type { RouterError } from './errors.ts';
import { HealthMonitor } from './health.ts';
import { KvEventsFeed, type KvEventsSettings, kvEventsEnabled } from './kv-events/feed.ts';
import { LoadPoller } from './load-poller.ts';
import { createRouterMetrics } from './metrics.ts';
import { dispatcherConfigOf, PolicyState } from './model-groups.ts';
import { OutlierDetector } from './outlier.ts';
import { createPdMode } from './pd/mode.ts';
import { adminPlugin } from './plugins/admin.ts';
import { engineApiPlugin, passThroughUnknown } from './plugins/engine-api.ts';
import { metricsPlugin } from './plugins/metrics.ts';
import { workersApiPlugin } from './plugins/workers-api.ts';
import { markAccepted, requestStart } from './proxy/body.ts';
import { proxyPlugin } from './proxy/plugin.ts';
import { createProxyHandler, type ProxyHandler } from './proxy/route.ts';
import { RankTable, type Worker } from './rank-table.ts';
import {
  effectiveOptions,
  type PolicyDescription,
  recordingSettings,
  TraceRecorder,
} from './recording/recorder.ts';
import { createReliabilityMetrics } from './reliability-metrics.ts';
import { ResponseHomes } from './response-homes.ts';
import { ShadowCacheModel } from './shadow/shadow-cache.ts';
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

import type { RouterState } from './state.ts';

export type { RouterState };

/** The policy config the CLI flags describe (a plain object). */
export function dispatcherConfig(config: RouterConfig): DispatcherConfig {
  return dispatcherConfigOf(config);
}

/** Numeric stats summed over every group's dispatcher (one group: its own). */
function sumStats(
  all: readonly (Record<string, number> | undefined)[],
): Record<string, number> | undefined {
  const present = all.filter((x) => x !== undefined);
  if (present.length <= 1) return present[0];
  const out: Record<string, number> = {};
  for (const s of present) for (const [k, v] of Object.entries(s)) out[k] = (out[k] ?? 0) + v;
  return out;
}

/**
 * The metrics `url` label: never a worker URL on the unauthenticated main listener, where a
 * discovered worker is named by its pod (its rank changes as other pods come and go) and
 * others by their first rank.
 */
function metricsUrl(config: RouterConfig, worker: Worker | undefined, url: string): string {
  if (config.adminPort === undefined) return worker?.pod ?? `worker-r${worker?.ranks[0] ?? '?'}`;
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
          else {
            // Consumed here so that a later proxied request on this connection does not
            // count from its accept time.
            requestStart(req, 0, 0);
            handler(req, res);
          }
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
      // response goes out at once, 25 ms and 100 ms later, then every 500 ms: a half-closed
      // client ignores it, a gone one answers with a reset, which fails the next write and so
      // aborts the request (within about 25 ms plus a round trip, so a worker does not go on
      // generating for a client that left). A FIN once the answer has started is a client
      // leaving mid-response.
      (server as typeof server & { httpAllowHalfOpen: boolean }).httpAllowHalfOpen = true;
      server.on('connection', (socket: Socket) => {
        markAccepted(socket);
        socket.on('end', () => {
          const res = (socket as Socket & { _httpMessage?: ServerResponse })._httpMessage;
          if (!res || res.writableEnded) return;
          if (res.headersSent) {
            socket.destroy();
            return;
          }
          let probes = 0;
          const probe = (): void => {
            if (res.headersSent || res.writableEnded || socket.destroyed) return;
            res.writeProcessing();
            probes++;
            setTimeout(probe, probes === 1 ? 25 : probes === 2 ? 75 : 500).unref();
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
  const policy = new PolicyState(config, config.modelGroups);
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
      const a = sumStats(
        policy.groups.map(
          (g) => g.dispatcher.stats().affinity as Record<string, number> | undefined,
        ),
      ) as ReturnType<Dispatcher['stats']>['affinity'];
      return a && { ...a, evictions: a.evictions + a.expirations };
    },
  });
  const reliability = createReliabilityMetrics(
    metrics.registry,
    table,
    admission,
    // Both sides' ejections with --pd-disaggregation (the decode side has its own detector).
    () => outlier.ejectionsTotal + (pd?.decodeOutlier.ejectionsTotal ?? 0),
  );
  const policySwitches = new Counter({
    name: 'kvroute_router_policy_switches_total',
    help: "Policy switches at run time (admin POST /policy, SIGHUP) by worker group ('default' without groups) and the method switched to",
    labelNames: ['group', 'method'] as const,
    registers: [metrics.registry],
  });
  new Gauge({
    name: 'kvroute_router_policy_info',
    help: "The method each worker group runs now ('default' without groups): 1",
    labelNames: ['group', 'method'] as const,
    registers: [metrics.registry],
    collect() {
      this.reset();
      for (const g of policy.groups)
        this.set({ group: g.name || 'default', method: g.dispatcher.method }, 1);
    },
  });
  const switchesRefused = new Counter({
    name: 'kvroute_router_policy_switch_refused_total',
    help: 'Policy switches refused (invalid method or options, or changed groups on reload); the running policy was kept',
    labelNames: ['source'] as const,
    registers: [metrics.registry],
  });
  policy.events.on('policy_switch', (e) => {
    const group = e.group || 'default';
    policySwitches.inc({ group, method: e.to.method });
    app.log.info({ group, from: e.from, to: e.to, source: e.source }, 'policy switched');
  });
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
    blockSize: config.kvEventsBlockSize,
  };
  const kvEvents = kvEventsEnabled(kvSettings)
    ? new KvEventsFeed(kvSettings, table, config.workerUrls, metrics.registry, log, () =>
        sumStats(policy.groups.map((g) => g.dispatcher.stats().method)),
      )
    : undefined;

  const pd = config.pdDisaggregation
    ? createPdMode({
        config,
        prefillTable: table,
        prefillDispatcher: () => policy.defaultGroup.dispatcher,
        prefillHealth: health,
        prefillOutlier: outlier,
        agent,
        registry: metrics.registry,
        log,
        tokenizer,
        limits: () => limits,
        countRequest: (route, rank, reason, status) =>
          metrics.countRequest(route, rank, reason, status),
      })
    : undefined;

  /** Which group each rank serves, re-derived when workers come or go. */
  const refreshGroups = (): void => {
    const owners = [];
    for (let r = 0; r < table.size; r++) {
      const w = table.slot(r)?.worker;
      owners.push(w && !w.removed ? policy.groupOfUrl(w.url) : undefined);
    }
    policy.refreshRanks(owners, table.rankNames());
  };
  table.onChange = refreshGroups;
  // What a policy learned per rank (cache_aware's prefix index, routing-key pins) follows its
  // worker when discovery renumbers the ranks or a new worker takes a removed one's place.
  table.onRenumber = (moves, numRanks) => {
    for (const g of policy.groups) g.dispatcher.remapRanks(moves, numRanks);
    // The engines' KV event streams and their index follow their workers too.
    kvEvents?.remap(moves, numRanks);
  };

  const describe = (d: Dispatcher): PolicyDescription => ({
    method: d.method,
    options: effectiveOptions(d.method, d.options),
  });
  const recorder = new TraceRecorder({
    policy: () => describe(policy.defaultGroup.dispatcher),
    groups: () =>
      policy.multiModel
        ? policy.groups.map((g) => ({
            ...describe(g.dispatcher),
            group: g.name,
            // The group's own ranks, so a replay of it knows those that served none of its
            // recorded requests.
            ranks: Array.from({ length: table.size }, (_, r) => r).filter(
              (r) => !g.outside?.has(r) && table.slot(r)?.worker.removed !== true,
            ),
          }))
        : [],
    ranks: () => table.size,
    down: () => {
      const out: number[] = [];
      for (let r = 0; r < table.size; r++) if (table.slot(r)?.worker.removed) out.push(r);
      return out;
    },
    tokenizer: tokenizer.kind,
    registry: metrics.registry,
    log,
  });
  const shadow =
    config.shadowProfile !== undefined
      ? new ShadowCacheModel(
          {
            profile: config.shadowProfile,
            kvCapacity: config.shadowKvCapacity,
            pageSize: config.shadowPageSize,
            window: config.shadowWindow,
          },
          metrics.registry,
        )
      : undefined;

  // Workers added or removed (admin POST /ranks, discovery) mark the recording too.
  const onRanks = table.onChange;
  table.onChange = () => {
    onRanks?.();
    recorder.markRanks();
  };
  // Hot reload (admin, SIGHUP) marks the recording where the policy changed.
  policy.events.on('policy_switch', (e) => {
    const to = describe(policy.find(e.group)?.dispatcher ?? policy.defaultGroup.dispatcher);
    recorder.markPolicySwitch(policy.multiModel ? { ...to, group: e.group } : to);
  });

  const responseHomes = new ResponseHomes();
  const state: RouterState = {
    config,
    responseHomes,
    recorder,
    shadow,
    markPolicySwitch: (policy) => recorder.markPolicySwitch(policy),
    kvEvents,
    pd,
    table,
    policy,
    get dispatcher() {
      return policy.defaultGroup.dispatcher;
    },
    health,
    outlier,
    admission,
    loadPoller,
    metrics,
    tokenizer,
    agent,
    limits: () => limits,
    reloadPolicies: (next, source) => {
      try {
        return policy.reload(next, next.modelGroups, source);
      } catch (err) {
        switchesRefused.inc({ source });
        throw err;
      }
    },
    noteSwitchRefused: (source) => switchesRefused.inc({ source }),
    addWorker: async (url, dpSize, model) => {
      const group =
        model === undefined ? (policy.groupOfUrl(url) ?? policy.defaultGroup) : policy.find(model);
      if (!group) throw new Error(`no worker group serves the model "${model}"`);
      // Known before its ranks exist, so no other group's policy ever sees them as its own.
      policy.assign(url, group);
      let worker: Worker;
      try {
        worker = await addWorker(table, agent, url, {
          dpAware: config.dpAware,
          dpSize: dpSize ?? config.dpSize,
          timeoutMs: Math.max(config.health.timeoutMs, 5_000),
        });
      } catch (err) {
        if (!table.worker(url)) policy.forget(url);
        throw err;
      }
      // The metrics' `model` label: with groups, the group's name (what clients ask for).
      worker.model = policy.multiModel
        ? group.name
        : await fetchModelId(agent, url, config.health.timeoutMs, health.headers);
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
      if (w) policy.forget(url);
      return w;
    },
  };
  app.decorate('kvroute', state);

  app.addHook('onReady', async () => {
    for (const url of config.workerUrls) await state.addWorker(url);
    // One round of checks before serving, so readiness reflects the fleet from the start.
    await health.checkAll();
    await pd?.start();
    await kvEvents?.start();
    if (config.recordTrace !== undefined) {
      await recorder.start(recordingSettings(config, config.recordTrace));
    }
    health.start();
    loadPoller.start();
  });
  app.addHook('onClose', async () => {
    health.stop();
    loadPoller.stop();
    outlier.stop();
    await pd?.close();
    admission.close();
    await recorder.close();
    await state.adminApp?.close();
    await kvEvents?.close();
    await agent.destroy();
  });

  // Admin bodies arrive as raw bytes and are parsed by @kvroute/protocol like proxied ones (the
  // proxy path reads its own bodies, forwarding them as received unless routed_dp_rank is set).
  app.removeAllContentTypeParsers();
  app.addContentTypeParser('*', { parseAs: 'buffer' }, (_req, body, done) => done(null, body));

  if (config.passThroughUnknown) app.setNotFoundHandler(passThroughUnknown(state));
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
    policy,
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
    ...(pd ? { handle: pd.handle } : {}),
    recorder,
    shadow,
    responseHomes,
  });
  // Attempts that sent nothing yet leave a worker as soon as it is taken out.
  health.onDown = (w, reason) => {
    serveProxy.evacuate(w, reason);
    pd?.evacuate(w, reason);
  };
  outlier.onEject = (w, reason) => {
    serveProxy.evacuate(w, reason);
    pd?.evacuate(w, reason);
  };

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
