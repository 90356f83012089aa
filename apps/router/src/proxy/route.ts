// The proxy route: one client request from its body to its answer. Parse and validate the
// body, ask the dispatcher for a rank, forward (forward.ts), and on a failure that reached
// the client with nothing, retry on another rank. The request's load is accounted on its rank
// for exactly the time an attempt is outstanding, whatever the outcome.
import type { IncomingMessage, ServerResponse } from 'node:http';
import { performance } from 'node:perf_hooks';
import {
  type Decision,
  type Dispatcher,
  type KvIndexView,
  NoHealthyRankError,
  RoutedRankError,
} from '@kvroute/policy';
import {
  badRequest,
  buildRouteRequest,
  describeError,
  type ParsedRequest,
  parseJsonBody,
  parseRequest,
  type RequestKind,
  type RoutingTokenizer,
  routedRankParam,
} from '@kvroute/protocol';
import type { FastifyBaseLogger } from 'fastify';
import type { Agent } from 'undici';
import type { RouterConfig } from '../config.ts';
import { errorReply } from '../error-reply.ts';
import { RouterError } from '../errors.ts';
import type { HealthMonitor } from '../health.ts';
import type { RouterMetrics } from '../metrics.ts';
import type { RankTable } from '../rank-table.ts';
import { CLIENT_GONE, readBody } from './body.ts';
import {
  type AttemptFailure,
  ForwardCall,
  type ForwardResult,
  upstreamRequestHeaders,
} from './forward.ts';

export interface ProxyContext {
  config: RouterConfig;
  table: RankTable;
  dispatcher: Dispatcher;
  tokenizer: RoutingTokenizer;
  agent: Agent;
  health: HealthMonitor;
  metrics: RouterMetrics;
  log: FastifyBaseLogger;
  /** The events-fed cache index (--kv-events-endpoint), passed to every decision. */
  kvIndex?: (KvIndexView & { noteDispatch(rank: number): void }) | undefined;
}

/** Serves one proxied POST on the raw request/response; never throws. */
export type ProxyHandler = (
  req: IncomingMessage,
  res: ServerResponse,
  kind: RequestKind,
  route: string,
) => Promise<void>;

/** The error for "nothing left to try": the last attempt's failure, or the policy's refusal. */
export function noRankLeft(
  table: RankTable,
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

export function createProxyHandler(ctx: ProxyContext): ProxyHandler {
  const { config, table, dispatcher, tokenizer, agent, health, metrics, log, kvIndex } = ctx;

  const countRejected = (route: string, status: number): void => {
    metrics.countRequest(route, 'none', 'none', String(status));
  };

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
      const { status, body } = errorReply(err, log, config.maxBodyBytes);
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
          decision = dispatcher.dispatch(
            routeRequest,
            view,
            kvIndex ? { nowMs: Date.now(), kvIndex } : { nowMs: Date.now() },
          );
        } catch (err) {
          if (err instanceof NoHealthyRankError || err instanceof RoutedRankError) {
            throw noRankLeft(table, lastFailure, err.message);
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
        kvIndex?.noteDispatch(rank);
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
          throw noRankLeft(table, lastFailure, undefined);
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

  function timeoutError(url: string): RouterError {
    return new RouterError(
      'upstream_timeout',
      `The worker ${url} did not answer within ${config.requestTimeoutMs} ms (--request-timeout-ms)`,
    );
  }

  return serveProxy;
}
