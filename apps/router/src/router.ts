// buildRouter(config): the fastify app. It only wires things together: the rank table and its
// monitors, the policy, the protocol parsers, the proxy and the metrics. Listening is
// server.ts's job, so tests use app.inject() or a loopback port. Worker discovery (dp_size
// from /get_server_info) runs in onReady, so the builder stays synchronous.
import { createHash, timingSafeEqual } from 'node:crypto';
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import { performance } from 'node:perf_hooks';
import {
  createDispatcher,
  type Decision,
  type Dispatcher,
  type DispatcherConfig,
  NoHealthyRankError,
  RoutedRankError,
} from '@kvroute/policy';
import {
  badRequest,
  buildRouteRequest,
  createHttpAgent,
  createRoutingTokenizer,
  describeError,
  getText,
  isProtocolError,
  kindForPath,
  openAIErrorBody,
  type ParsedRequest,
  parseJsonBody,
  parseRequest,
  payloadTooLarge,
  REQUEST_PATHS,
  type RequestKind,
  type RoutingTokenizer,
  routedRankParam,
  routeNotFound,
} from '@kvroute/protocol';
import Fastify, {
  type FastifyBaseLogger,
  type FastifyInstance,
  type FastifyRequest,
} from 'fastify';
import type { RouterConfig } from './config.ts';
import { RouterError } from './errors.ts';
import { HealthMonitor } from './health.ts';
import { LoadPoller } from './load-poller.ts';
import { createRouterMetrics, type RouterMetrics } from './metrics.ts';
import {
  type AttemptFailure,
  ForwardCall,
  type ForwardResult,
  upstreamRequestHeaders,
} from './proxy.ts';
import { RankTable, type Worker } from './rank-table.ts';
import { addWorker } from './topology.ts';

export interface BuildRouterOptions {
  /** fastify logger option; false (default) keeps tests quiet, server.ts passes a level. */
  logger?: boolean | { level: string };
  /** A ready tokenizer (tests, embedders); default from config.tokenizer. */
  tokenizer?: RoutingTokenizer;
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
  /** Adds a worker at runtime (the admin POST /ranks path). */
  addWorker(url: string, dpSize?: number): Promise<Worker>;
  removeWorker(url: string): Worker | undefined;
}

declare module 'fastify' {
  interface FastifyInstance {
    kvroute: RouterState;
  }
}

/** The policy config the CLI flags describe (S-1 plain object). */
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

const CLIENT_GONE = new Error('client closed the connection before sending its body');

/** The request body up to `limit` bytes; 413 (as a ProtocolError) beyond it. */
function readBody(req: IncomingMessage, limit: number): Promise<Buffer> {
  const declared = Number(req.headers['content-length']);
  if (declared > limit) return Promise.reject(payloadTooLarge(limit, { param: 'body' }));
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    let done = false;
    req.on('data', (chunk: Buffer) => {
      if (done) return;
      size += chunk.length;
      if (size > limit) {
        done = true;
        reject(payloadTooLarge(limit, { param: 'body' }));
        return;
      }
      chunks.push(chunk);
    });
    req.once('end', () => {
      if (done) return;
      done = true;
      resolve(chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks, size));
    });
    req.once('close', () => {
      if (done) return;
      done = true;
      reject(CLIENT_GONE);
    });
    req.once('error', (err) => {
      if (done) return;
      done = true;
      reject(err);
    });
  });
}

function tokenDigest(token: string): Buffer {
  return createHash('sha256').update(token).digest();
}

export function buildRouter(config: RouterConfig, opts: BuildRouterOptions = {}): FastifyInstance {
  const app = Fastify({
    // POSTs to the proxied paths go straight to serveProxy; everything else to fastify.
    serverFactory: (handler) => {
      const server = createServer((req, res) => {
        const kind = req.method === 'POST' ? kindForPath(req.url ?? '') : undefined;
        if (kind) void serveProxy(req, res, kind, REQUEST_PATHS[kind]);
        else handler(req, res);
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

  const state: RouterState = {
    config,
    table,
    dispatcher,
    health,
    loadPoller,
    metrics,
    tokenizer,
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
    health.start();
    loadPoller.start();
  });
  app.addHook('onClose', async () => {
    health.stop();
    loadPoller.stop();
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

  // One rendering for every error, whether fastify (admin, /v1/models) or the proxy path
  // (which answers on the raw response) produced it.
  const errorReply = (err: unknown, log: FastifyBaseLogger): { status: number; body: object } => {
    if (isProtocolError(err)) return { status: err.status, body: err.toJSON() };
    const e = err as { statusCode?: number; code?: string; message: string };
    if (e.statusCode === 413 || e.code === 'FST_ERR_CTP_BODY_TOO_LARGE') {
      return {
        status: 413,
        body: payloadTooLarge(config.maxBodyBytes, { param: 'body' }).toJSON(),
      };
    }
    if (e.statusCode && e.statusCode >= 400 && e.statusCode < 500) {
      return {
        status: e.statusCode,
        body: openAIErrorBody(e.statusCode, e.message, { code: e.code ?? 'invalid_request' }),
      };
    }
    log.error({ err }, 'unhandled router error');
    return {
      status: 500,
      body: new RouterError('internal_error', `internal router error: ${e.message}`).toJSON(),
    };
  };

  app.setErrorHandler((err, req, reply) => {
    const { status, body } = errorReply(err, req.log);
    reply.code(status).send(body);
  });

  const countRejected = (route: string, status: number): void => {
    metrics.countRequest(route, 'none', 'none', String(status));
  };

  for (const [kind, path] of Object.entries(REQUEST_PATHS) as [RequestKind, string][]) {
    app.post(
      path,
      {
        // The proxy path reads the body itself and answers on the raw response: fastify's body
        // parsing and reply lifecycle cost about a quarter of the router's CPU per request.
        // Real sockets reach serveProxy before fastify's routing (serverFactory above);
        // app.inject() comes through this route into the same function.
        onRequest: (req, reply, done) => {
          reply.hijack();
          done();
          void serveProxy(req.raw, reply.raw, kind, path);
        },
      },
      async () => {},
    );
  }

  async function serveProxy(
    req: IncomingMessage,
    res: ServerResponse,
    kind: RequestKind,
    route: string,
  ): Promise<void> {
    try {
      const raw = await readBody(req, config.maxBodyBytes);
      await handleProxy(req, res, kind, route, raw);
    } catch (err) {
      if (err === CLIENT_GONE) {
        countRejected(route, 499);
        return;
      }
      if (res.headersSent) {
        res.destroy();
        return;
      }
      const { status, body } = errorReply(err, log);
      countRejected(route, status);
      const text = JSON.stringify(body);
      res.writeHead(status, {
        'content-type': 'application/json; charset=utf-8',
        'content-length': Buffer.byteLength(text),
        // A body cut short at the limit leaves unread bytes on the connection.
        ...(status === 413 ? { connection: 'close' } : {}),
      });
      res.end(text);
    }
  }

  async function handleProxy(
    req: IncomingMessage,
    res: ServerResponse,
    kind: RequestKind,
    route: string,
    raw: Buffer,
  ): Promise<void> {
    if (raw.length === 0) {
      throw badRequest('Request body is empty: expected a JSON object', { code: 'invalid_json' });
    }
    const body = parseJsonBody(raw);
    const parsed: ParsedRequest = parseRequest(kind, body);
    // Also the policy's RouteRequest as is: same field names, absent hints left out.
    const routeRequest = buildRouteRequest(parsed, tokenizer, req.headers);
    const routed = routeRequest.routedRank;
    if (routed !== undefined) {
      checkRoutedRank(routed, routedRankParam(routeRequest.routedRankSource));
    }
    const tokens = routeRequest.inputIds.length + routeRequest.maxTokens;

    // One timer for the whole request, across retries; it aborts whichever attempt is current.
    let call: ForwardCall | undefined;
    let timedOut = false;
    let clientGone = false;
    const timer = setTimeout(() => {
      timedOut = true;
      call?.abort(new Error('request timeout'));
    }, config.requestTimeoutMs);
    const onEarlyClose = (): void => {
      if (!res.writableFinished && !res.headersSent) {
        clientGone = true;
        call?.abort(new Error('client closed the connection'));
      }
    };
    res.on('close', onEarlyClose);

    // Allocated on the first failure only: most requests never retry.
    let excluded: Set<number> | undefined;
    let lastFailure: { rank: number; failure: AttemptFailure } | undefined;
    try {
      for (let attemptNo = 0; ; attemptNo++) {
        if (clientGone) {
          countRejected(route, 499);
          return;
        }
        const view = table.view(excluded);
        let decision: Decision;
        const t0 = performance.now();
        try {
          decision = dispatcher.dispatch(routeRequest, view, { nowMs: Date.now() });
        } catch (err) {
          if (err instanceof NoHealthyRankError || err instanceof RoutedRankError) {
            throw noRankLeft(lastFailure, err.message);
          }
          throw err;
        }
        metrics.decision(dispatcher.method).observe((performance.now() - t0) / 1e3);
        const slot = table.slot(decision.rank);
        if (!slot) {
          throw new RouterError(
            'internal_error',
            `policy chose rank ${decision.rank}, which does not exist`,
          );
        }
        const worker = slot.worker;
        const rank = decision.rank;
        const rankLabel = String(rank);

        let outBody = raw;
        if (slot.dpRank !== undefined) {
          outBody = Buffer.from(JSON.stringify({ ...body, routed_dp_rank: slot.dpRank }));
        } else if (body.routed_dp_rank !== undefined) {
          // The client's override chose a router rank; a replica must not read it as its own.
          const { routed_dp_rank: _ignored, ...rest } = body;
          outBody = Buffer.from(JSON.stringify(rest));
        }

        // Decided synchronously when the worker's status arrives: a 5xx is discarded (and
        // retried) only while another healthy rank and a retry are left.
        const canRetryAfter = (): boolean => {
          if (routed !== undefined || attemptNo >= config.maxRetries) return false;
          const ex = new Set(excluded);
          ex.add(rank);
          return table.hasHealthy(ex);
        };
        table.tracker.onDispatch(rank, tokens);
        const sentAt = performance.now();
        call = new ForwardCall({
          agent,
          origin: worker.origin,
          path: worker.basePath + route,
          headers: upstreamRequestHeaders(req.headers, outBody.length, slot.dpRank),
          body: outBody,
          res,
          extraHeaders: { 'x-kvroute-rank': rankLabel, 'x-kvroute-reason': decision.reason },
          decide: (status) => {
            return status >= 500 && canRetryAfter() ? 'discard' : 'pipe';
          },
          onFirstByte: () => {
            const m = metrics.rank(rankLabel);
            (parsed.stream ? m.ttftStream : m.ttftPlain).observe(
              (performance.now() - sentAt) / 1e3,
            );
          },
        });
        let result: ForwardResult;
        try {
          result = await call.start();
        } finally {
          // Whatever happened (even a throw from undici's dispatch), the rank's load goes back.
          table.tracker.onComplete(rank, tokens);
        }

        if (result.kind === 'aborted') {
          if (timedOut) {
            health.reportServerError(worker, 'request timed out');
            throw timeoutError(worker.url);
          }
          metrics.countRequest(route, rankLabel, decision.reason, '499');
          return;
        }
        if (result.kind === 'failed') {
          const failure = result.failure;
          if (failure.kind === 'connect') health.reportConnectError(worker, failure.detail);
          else health.reportServerError(worker, failure.detail);
          excluded ??= new Set<number>();
          excluded.add(rank);
          lastFailure = { rank, failure };
          if (failure.kind === 'status' || canRetryAfter()) {
            metrics.retries.inc({ rank: rankLabel, cause: failure.kind });
            log.warn(
              { rank, worker: worker.url, failure: failure.detail },
              'retrying on another rank',
            );
            continue;
          }
          throw noRankLeft(lastFailure, undefined);
        }

        // Piped: a worker 5xx on the last attempt is forwarded as is (its body is the clearest
        // answer) and still counts against the worker's health.
        if (result.status >= 500)
          health.reportServerError(worker, `worker answered ${result.status}`);
        else health.reportSuccess(worker);
        if (result.usage) {
          const m = metrics.rank(rankLabel);
          m.promptTokens.inc(result.usage.promptTokens);
          m.cachedTokens.inc(result.usage.cachedTokens);
        }
        let status = String(result.status);
        if (result.end === 'client-closed') status = '499';
        else if (result.end === 'upstream-error') {
          status = timedOut ? '504' : '502';
          if (!timedOut) health.reportServerError(worker, describeError(result.error));
        }
        metrics.countRequest(route, rankLabel, decision.reason, status);
        return;
      }
    } finally {
      clearTimeout(timer);
      res.off('close', onEarlyClose);
    }
  }

  function checkRoutedRank(routed: number, source: string): void {
    if (!config.allowRankOverride) {
      throw new RouterError(
        'rank_override_forbidden',
        `Explicit rank selection (${source}) is disabled on this router; start it with --allow-rank-override to honour it`,
        source,
      );
    }
    const slot = table.slot(routed);
    if (!slot || slot.worker.removed) {
      throw new RouterError(
        'invalid_rank',
        `${source} ${routed} is not a rank of this router: it has ranks 0..${table.size - 1}`,
        source,
      );
    }
    if (!slot.worker.healthy) {
      throw new RouterError(
        'no_healthy_rank',
        `${source} ${routed} is down (${slot.worker.url}: ${slot.worker.lastError ?? 'marked unhealthy'})`,
        source,
      );
    }
  }

  function noRankLeft(
    last: { rank: number; failure: AttemptFailure } | undefined,
    policyMessage: string | undefined,
  ): RouterError {
    if (last) {
      const worker = table.slot(last.rank)?.worker.url ?? '?';
      return new RouterError(
        'upstream_unavailable',
        `rank ${last.rank} (${worker}) failed: ${last.failure.detail}; no other healthy rank to retry on`,
      );
    }
    return new RouterError(
      'no_healthy_rank',
      `No healthy rank to route to (${policyMessage ?? 'all workers are down'}); check the workers' /health`,
    );
  }

  function timeoutError(url: string): RouterError {
    return new RouterError(
      'upstream_timeout',
      `The worker ${url} did not answer within ${config.requestTimeoutMs} ms (--request-timeout-ms)`,
    );
  }

  // GET /v1/models: any healthy worker knows the model list; no load accounting.
  let modelsCursor = 0;
  app.get('/v1/models', async (_req, reply) => {
    const workers = table.workers().filter((w) => w.healthy);
    for (let i = 0; i < workers.length; i++) {
      const w = workers[(modelsCursor + i) % workers.length]!;
      try {
        const res = await getText(agent, `${w.url}/v1/models`, config.health.timeoutMs);
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

  app.get('/health', async (_req, reply) => {
    const healthy = table.info().filter((r) => r.healthy).length;
    reply.code(healthy > 0 ? 200 : 503).send({
      status: healthy > 0 ? 'ok' : 'unavailable',
      healthy_ranks: healthy,
      ranks: table.size,
    });
  });

  app.get('/metrics', async (_req, reply) => {
    reply
      .header('content-type', metrics.registry.contentType)
      .send(await metrics.registry.metrics());
  });

  if (config.adminToken !== undefined) registerAdmin(app, state, tokenDigest(config.adminToken));
  return app;
}

function registerAdmin(app: FastifyInstance, state: RouterState, expected: Buffer): void {
  const authorize = async (req: FastifyRequest): Promise<void> => {
    const auth = req.headers.authorization;
    if (!auth) {
      throw new RouterError(
        'unauthorized',
        'Missing Authorization header: send "Authorization: Bearer <admin token>"',
        'Authorization',
      );
    }
    const m = /^Bearer\s+(.+)$/i.exec(auth);
    // Compare digests so neither the length nor the content leaks through timing.
    if (!m || !timingSafeEqual(tokenDigest(m[1]!.trim()), expected)) {
      throw new RouterError('invalid_token', 'Invalid admin token', 'Authorization');
    }
  };
  const snapshot = () => ({
    method: state.dispatcher.method,
    dp_aware: state.config.dpAware,
    ranks: state.table.info().map((r) => ({
      rank: r.rank,
      url: r.url,
      dp_rank: r.dpRank,
      healthy: r.healthy,
      removed: r.removed,
      in_flight_requests: r.inFlightRequests,
      in_flight_tokens: r.inFlightTokens,
      external_requests: r.externalRequests,
      consecutive_failures: r.consecutiveFailures,
      last_error: r.lastError,
    })),
    policy: state.dispatcher.stats(),
  });

  app.get('/ranks', { onRequest: authorize }, async () => snapshot());
  app.post('/ranks', { onRequest: authorize }, async (req) => {
    const body = parseJsonBody((req.body as Buffer | undefined) ?? Buffer.alloc(0));
    const { action, url, dp_size: dpSize } = body;
    if (action !== 'add' && action !== 'remove') {
      throw new RouterError(
        'invalid_admin_request',
        `'action' must be "add" or "remove", got ${JSON.stringify(action)}`,
        'action',
      );
    }
    if (typeof url !== 'string')
      throw new RouterError(
        'invalid_admin_request',
        "'url' must be a worker base URL string",
        'url',
      );
    let normalized: string;
    try {
      const u = new URL(url);
      if (u.protocol !== 'http:' && u.protocol !== 'https:') throw new Error('scheme');
      normalized = url.replace(/\/+$/, '');
    } catch {
      throw new RouterError(
        'invalid_admin_request',
        `'url' is not an http(s) URL: ${JSON.stringify(url)}`,
        'url',
      );
    }
    if (
      dpSize !== undefined &&
      (typeof dpSize !== 'number' || !Number.isInteger(dpSize) || dpSize < 1)
    ) {
      throw new RouterError(
        'invalid_admin_request',
        "'dp_size' must be an integer >= 1",
        'dp_size',
      );
    }
    if (action === 'add') {
      if (state.table.worker(normalized)) {
        throw new RouterError(
          'invalid_admin_request',
          `worker ${normalized} is already routed to`,
          'url',
        );
      }
      try {
        await state.addWorker(normalized, dpSize as number | undefined);
      } catch (err) {
        throw new RouterError('invalid_admin_request', (err as Error).message, 'url');
      }
    } else if (!state.removeWorker(normalized)) {
      throw new RouterError(
        'invalid_admin_request',
        `worker ${normalized} is not routed to`,
        'url',
      );
    }
    return snapshot();
  });
}
