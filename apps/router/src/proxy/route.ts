// The proxy route: one client request from its body to its answer. Admit it (admission.ts),
// read and bound its body, parse it within the request limits, ask the dispatcher for a rank,
// forward (forward.ts), and account the outcome where it happened:
//   - nothing reached the client yet (refused, reset, 5xx, timeout, garbage body, worker
//     ejected while waiting): the worker gets a failure and the request is retried on another
//     rank, after a jittered backoff and only within the retry budget (retry.ts);
//   - the client has part of a stream: the stream ends with an error event, the worker gets a
//     failure; nothing is retried (the client would see the answer twice);
//   - the response completed: only now is the worker credited with a success.
// Failures feed outlier ejection (outlier.ts); refused connections also mark the worker down
// (health.ts). The request's load is accounted on its rank for exactly the time an attempt is
// outstanding, whatever the outcome. Client-facing errors name ranks, never worker URLs.
import type { IncomingMessage, ServerResponse } from 'node:http';
import { performance } from 'node:perf_hooks';
import {
  type DispatchTicket,
  type KvIndexView,
  NoHealthyRankError,
  RoutedRankError,
} from '@kvroute/policy';
import {
  badRequest,
  buildRouteRequest,
  type ParsedRequest,
  type ProtocolRouteRequest,
  parseJsonBody,
  parseRequest,
  payloadTooLarge,
  type ReportedUsage,
  type RequestKind,
  type RequestLimits,
  type RoutingTokenizer,
  routedRankParam,
  routeRequestFromScan,
  scanRequest,
  topLevelSpans,
  withRoutedRank,
} from '@kvroute/protocol';
import type { Tracer } from '@opentelemetry/api';
import type { FastifyBaseLogger } from 'fastify';
import type { Agent } from 'undici';
import type { Admission } from '../admission.ts';
import type { RouterConfig } from '../config.ts';
import { errorReply } from '../error-reply.ts';
import { RouterError } from '../errors.ts';
import type { HealthMonitor } from '../health.ts';
import { LogLimiter } from '../log-limiter.ts';
import type { RouterMetrics } from '../metrics.ts';
import type { PolicyState, WorkerGroup } from '../model-groups.ts';
import type { OutlierDetector } from '../outlier.ts';
import type { RankTable, Worker } from '../rank-table.ts';
import type { TraceRecorder } from '../recording/recorder.ts';
import type { ReliabilityMetrics } from '../reliability-metrics.ts';
import { previousResponseId, type ResponseHomes } from '../response-homes.ts';
import type { ShadowCacheModel, ShadowTicket } from '../shadow/shadow-cache.ts';
import { boundedOutputTokens, firstByteBoundFor } from '../timeouts.ts';
import { RequestTrace } from '../tracing.ts';
import { CLIENT_GONE, closeAfterAnswer, readBody, requestStart } from './body.ts';
import {
  type AttemptFailure,
  clientSafe,
  ForwardCall,
  type ForwardResult,
  type OutboundHeaderPolicy,
  upstreamRequestHeaders,
} from './forward.ts';
import { OutstandingBy } from './outstanding.ts';
import { RetryBudget } from './retry.ts';

export interface ProxyContext {
  config: RouterConfig;
  table: RankTable;
  /** The worker groups: a request's `model` picks one, whose current dispatcher decides. */
  policy: PolicyState;
  tokenizer: RoutingTokenizer;
  agent: Agent;
  health: HealthMonitor;
  outlier: OutlierDetector;
  admission: Admission;
  metrics: RouterMetrics;
  reliability: ReliabilityMetrics;
  log: FastifyBaseLogger;
  /** Current request limits (the model's context is learned from the workers). */
  limits(): RequestLimits;
  /** The events-fed cache index (--kv-events-endpoint), passed to every decision. */
  kvIndex?: KvIndexView | undefined;
  /** The metrics' `worker` label for a worker: never its credentials (see router.ts). */
  workerLabel(worker: Worker): string;
  /** With --otel: where the request spans go (tracing.ts); undefined = no OTel call at all. */
  tracer?: Tracer | undefined;
  /** The traffic recorder (recording/): read once per request, nothing more while it is off. */
  recorder?: TraceRecorder | undefined;
  /** With --shadow-profile: the live cache model every dispatched attempt goes through. */
  shadow?: ShadowCacheModel | undefined;
  /** Which worker holds each stored Responses API response (follow-ups go there). */
  responseHomes?: ResponseHomes | undefined;
  /**
   * Serves an admitted request's body instead of the one-rank proxy (the PD mode, pd/mode.ts);
   * admission, body reading and error replies stay here.
   */
  handle?: (
    req: IncomingMessage,
    res: ServerResponse,
    kind: RequestKind,
    route: string,
    raw: Buffer,
  ) => Promise<void>;
}

/** What a recorded request's line says about its last attempt. */
interface Outcome {
  rank: number;
  reason: string;
  status: number;
  ttftAt?: number | undefined;
  usage?: ReportedUsage | undefined;
  streamedTokens?: number | undefined;
}

/** Serves one proxied POST on the raw request/response; never throws. */
export type ProxyHandler = ((
  req: IncomingMessage,
  res: ServerResponse,
  kind: RequestKind,
  route: string,
) => Promise<void>) & {
  /** The refusal for a request before its body is read (Expect: 100-continue), if any. */
  precheck(req: IncomingMessage): RouterError | ReturnType<typeof payloadTooLarge> | undefined;
  /** Moves attempts on `worker` that sent nothing yet elsewhere (it was ejected or is down). */
  evacuate(worker: Worker, reason: string): void;
  readonly budget: RetryBudget;
};

/** The error for "nothing left to try": the last attempt's failure, or the policy's refusal. */
export function noRankLeft(
  last: { rank: number; workerRank: number; failure: AttemptFailure } | undefined,
  policyMessage: string | undefined,
): RouterError {
  if (last) {
    const f = last.failure;
    const code =
      f.kind === 'timeout'
        ? 'upstream_timeout'
        : f.kind === 'bad-body' || f.kind === 'worker-down'
          ? 'upstream_error'
          : 'upstream_unavailable';
    return new RouterError(
      code,
      `rank ${last.rank} (worker-r${last.workerRank}) failed: ${clientSafe(f.detail)}; no other healthy rank or retry left`,
    );
  }
  return new RouterError(
    'no_healthy_rank',
    `No healthy rank to route to (${policyMessage ?? 'all workers are down'}); check the workers' /health`,
  ).withRetryAfter(1);
}

/** How long a refused connection may stay open after its answer (a client that does not read). */
const CLOSE_AFTER_ANSWER_MS = 1_000;

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

export function createProxyHandler(ctx: ProxyContext): ProxyHandler {
  const { config, table, policy, tokenizer, agent, outlier, admission, metrics, log, kvIndex } =
    ctx;
  const rel = ctx.reliability;
  const budget = new RetryBudget(config);
  // A bad --cost-profile fails the router's construction, naming the flag.
  const firstByte = firstByteBoundFor(config);
  const logLimiter = new LogLimiter();
  const outbound: OutboundHeaderPolicy = {
    forwardClientAuth: config.forwardClientAuth,
    ...(config.workerApiKey !== undefined ? { workerApiKey: config.workerApiKey } : {}),
  };
  /** Attempts outstanding per worker, so an ejection can move them elsewhere. */
  const calls = new OutstandingBy<Worker, ForwardCall>();
  /** The `worker` label per worker, computed once (URL parsing is not for every request). */
  const workerLabels = new WeakMap<Worker, string>();
  const rankMetrics = (rankLabel: string, worker: Worker) => {
    let label = workerLabels.get(worker);
    if (label === undefined) {
      label = ctx.workerLabel(worker);
      workerLabels.set(worker, label);
    }
    return metrics.rank(rankLabel, label, worker.model ?? 'unknown');
  };

  const countRejected = (route: string, status: number): void => {
    metrics.countRequest(route, 'none', 'none', String(status));
  };

  function precheck(
    req: IncomingMessage,
  ): RouterError | ReturnType<typeof payloadTooLarge> | undefined {
    const declared = Number(req.headers['content-length']);
    if (declared > config.maxBodyBytes)
      return payloadTooLarge(config.maxBodyBytes, { param: 'body' });
    if (declared > 0 && !admission.bodyFits(declared)) return admission.overBudget();
    return undefined;
  }

  /** Logs a worker failure, at most once per worker and cause per interval. */
  function logFailure(
    worker: Worker,
    rank: number,
    phase: string,
    failure: AttemptFailure,
    msg: string,
  ): void {
    const suppressed = logLimiter.take(`${worker.url} ${phase} ${failure.kind}`);
    if (suppressed < 0) return;
    log.warn(
      { rank, worker: worker.url, phase, cause: failure.kind, failure: failure.detail, suppressed },
      msg,
    );
  }

  async function serveProxy(
    req: IncomingMessage,
    res: ServerResponse,
    kind: RequestKind,
    route: string,
  ): Promise<void> {
    const startedAt = performance.now();
    // At most half the body timeout is charged for the wait before this handler ran.
    const bodyFrom = requestStart(req, startedAt, config.bodyTimeoutMs / 2);
    let reserved = 0;
    let admitted = false;
    const rt = new RequestTrace(req.headers.traceparent, ctx.tracer, route);
    const receivedAt = ctx.recorder?.active ? performance.now() : 0;
    try {
      admission.checkClient(req.headers.authorization, req.socket?.remoteAddress);
      const refused = precheck(req);
      if (refused) throw refused;
      const body = await readBody(req, {
        maxBytes: config.maxBodyBytes,
        timeoutMs: config.bodyTimeoutMs,
        admission,
        startedAt: bodyFrom,
      });
      reserved = body.reserved;
      if (!admission.tryAcquire()) await admission.waitForSlot(goneSignal(res));
      admitted = true;
      budget.active++;
      if (ctx.handle) await ctx.handle(req, res, kind, route, body.raw);
      else await handleProxy(req, res, kind, route, body.raw, rt, receivedAt);
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
      rel.rejected(status);
      countRejected(route, status);
      const text = JSON.stringify(body);
      const headers: Record<string, string | number> = {
        'content-type': 'application/json; charset=utf-8',
        'content-length': Buffer.byteLength(text),
      };
      const retryAfter = (err as RouterError).retryAfterSec;
      if (retryAfter !== undefined) headers['retry-after'] = retryAfter;
      // A refused body may still be on its way: close rather than read it into a keep-alive.
      const bodyUnread = !req.complete;
      if (bodyUnread) headers.connection = 'close';
      if (!res.writableEnded && !res.destroyed) {
        res.writeHead(status, headers);
        res.end(text);
      }
      // Keep reading (and dropping) what the client still sends while the answer goes out,
      // so it reads the answer instead of a reset; then the connection is closed.
      if (bodyUnread) {
        req.resume();
        closeAfterAnswer(req, CLOSE_AFTER_ANSWER_MS);
      }
    } finally {
      // From arrival to the answer's last byte written (499: the client went away first).
      const status = res.headersSent ? String(res.statusCode) : '499';
      metrics.observeDuration(route, status, (performance.now() - startedAt) / 1e3);
      rt.end(status);
      if (reserved) admission.releaseBody(reserved);
      if (admitted) {
        budget.active--;
        admission.release();
      }
    }
  }

  async function handleProxy(
    req: IncomingMessage,
    res: ServerResponse,
    kind: RequestKind,
    route: string,
    raw: Buffer,
    rt: RequestTrace,
    receivedAt: number,
  ): Promise<void> {
    if (raw.length === 0) {
      throw badRequest('Request body is empty: expected a JSON object', { code: 'invalid_json' });
    }
    // A recorded request (and, with --shadow-profile, every request) keeps its whole prompt's
    // tokens: the trace's block ids and the cache model cover all of it, routing reads less.
    const recorded = receivedAt !== 0 && ctx.recorder!.sample();
    const shadow = ctx.shadow;
    const limits = ctx.limits();
    const { routeRequest, stream, routedRankSpans, allIds } = readRequest(
      req,
      kind,
      raw,
      limits,
      recorded || shadow !== undefined,
    );
    const group = policy.resolve(routeRequest.model);
    // Other groups' ranks: the policy sees them as down (undefined with one group).
    let outside = group.outside;
    // A Responses follow-up goes to the worker holding the response it continues (its prompt
    // is only the new turn, so nothing else would find that worker): the others' ranks are
    // outside for it. A response no worker holds is left to the policy (the engine says 404).
    const previous =
      kind === 'responses' && ctx.responseHomes ? previousResponseId(raw) : undefined;
    // What the recorded line says (the last attempt's rank and outcome).
    const rec: Outcome | undefined = recorded ? { rank: -1, reason: '', status: 0 } : undefined;
    const routed = routeRequest.routedRank;
    if (routed !== undefined) {
      checkRoutedRank(routed, routedRankParam(routeRequest.routedRankSource), group);
    }
    // The policy's request also carries max new tokens: its dispatch ticket weighs the load
    // (promptTokens when the scan passed only the prefix the method reads).
    const policyRequest: ProtocolRouteRequest & { maxNewTokens?: number } = routeRequest;
    policyRequest.maxNewTokens = routeRequest.maxTokens;
    const promptTokens = routeRequest.promptTokens ?? routeRequest.inputIds.length;
    const firstByteMs = firstByte.ms(
      promptTokens,
      boundedOutputTokens(kind, routeRequest, stream, limits.maxOutputTokens),
      stream,
    );

    // One timer for the whole request, across retries; it aborts whichever attempt is current.
    let call: ForwardCall | undefined;
    let timedOut = false;
    let clientGone = false;
    // Made when the request first waits for a rank to free up: takes it out of that queue.
    let gone: AbortController | undefined;
    const timer = setTimeout(() => {
      timedOut = true;
      call?.abort(new Error('request timeout'));
    }, config.requestTimeoutMs);
    // The one 'close' listener of the request: before the answer finished, the client left.
    const onClose = (): void => {
      if (res.writableFinished) return;
      if (!res.headersSent) clientGone = true;
      call?.clientGone();
      gone?.abort(CLIENT_GONE);
    };
    res.on('close', onClose);

    // Allocated on the first failure only: most requests never retry. Holds the other
    // groups' ranks too, once allocated; until then `outside` stands for it.
    let excluded: Set<number> | undefined;
    let lastFailure: { rank: number; workerRank: number; failure: AttemptFailure } | undefined;
    let retrying = false;
    try {
      if (previous !== undefined) {
        // Looked up under the request's deadline, with the client watched (the loop's first
        // check answers 499 for a client that left meanwhile).
        const homes = ctx.responseHomes!;
        const home =
          homes.home(previous) ??
          (await homes.locate(
            previous,
            table.workers().filter((w) => w.healthy && !w.ejected && !w.removed),
            ctx.agent,
            // The workers' API key, as the health checks send it.
            ctx.health.headers,
            config.health.timeoutMs,
          ));
        if (home !== undefined) outside = ranksNotOf(table.workers(), home, outside);
      }
      for (let attemptNo = 0; ; attemptNo++) {
        if (clientGone) {
          if (rec) rec.status = 499;
          countRejected(route, 499);
          return;
        }
        if (timedOut) throw deadlineError();
        const full = fullRanks();
        const skip = full
          ? new Set([...(excluded ?? outside ?? []), ...full])
          : (excluded ?? outside);
        const view = table.view(skip);
        let decision: DispatchTicket;
        // The group's policy now: a switch after this leaves this attempt's ticket on it.
        const dispatcher = group.dispatcher;
        const t0 = performance.now();
        try {
          // The ticket holds the rank's load until it is closed below, whatever happens.
          decision = dispatcher.begin(
            policyRequest,
            table.tracker,
            kvIndex ? { nowMs: Date.now(), view, kvIndex } : { nowMs: Date.now(), view },
          );
        } catch (err) {
          if (err instanceof NoHealthyRankError || err instanceof RoutedRankError) {
            if (full && table.hasHealthy(excluded ?? outside)) {
              // Every routable rank is at --max-concurrent-per-rank: wait for one to free up.
              gone ??= new AbortController();
              await admission.waitForChange(gone.signal);
              attemptNo--;
              continue;
            }
            throw noRankLeft(lastFailure, err.message);
          }
          throw err;
        }
        const t1 = performance.now();
        metrics.decision(dispatcher.method).observe((t1 - t0) / 1e3);
        if (ctx.tracer) {
          const origin = performance.timeOrigin;
          rt.routed(decision.rank, decision.reason, origin + t0, origin + t1);
        }
        const slot = table.slot(decision.rank);
        if (!slot) {
          decision.done('failed');
          throw new RouterError(
            'internal_error',
            `policy chose rank ${decision.rank}, which does not exist`,
          );
        }
        const worker = slot.worker;
        const rank = decision.rank;
        const rankLabel = String(rank);

        // The client's bytes, except routed_dp_rank: a DP worker gets the router's choice
        // spliced in, and a client override (which chose a router rank) is cut so a replica
        // does not read it as its own.
        const outBody = withRoutedRank(raw, routedRankSpans, slot.dpRank);

        // Whether a failure now could be retried: a routed request never is, and a retry needs
        // another healthy rank, one left of --max-retries, and room in the retry budget.
        const canRetryAfter = (): boolean => {
          if (routed !== undefined || attemptNo >= config.maxRetries || !budget.hasRoom()) {
            return false;
          }
          const ex = new Set(excluded ?? outside);
          ex.add(rank);
          return table.hasHealthy(ex);
        };
        const sentAt = performance.now();
        const m = rankMetrics(rankLabel, worker);
        if (rec) {
          rec.rank = rank;
          rec.reason = decision.reason;
          rec.ttftAt = undefined;
        }
        const predicted: ShadowTicket | undefined = shadow?.begin(
          rank,
          worker.url,
          allIds!,
          routeRequest.maxTokens,
        );
        const headers = upstreamRequestHeaders(
          req.headers,
          outBody.length,
          slot.dpRank,
          outbound,
          req.socket?.remoteAddress,
        );
        headers.traceparent = rt.upstreamHop(rank, decision.reason, m.worker);
        // tracestate belongs to the client's trace: it goes on only with its traceparent.
        if (!rt.continued && headers.tracestate !== undefined) delete headers.tracestate;
        const thisCall = new ForwardCall({
          agent,
          origin: worker.origin,
          path: worker.basePath + route,
          headers,
          body: outBody,
          kind,
          res,
          extraHeaders: { 'x-kvroute-rank': rankLabel, 'x-kvroute-reason': decision.reason },
          firstByteTimeoutMs: firstByteMs,
          idleTimeoutMs: config.idleTimeoutMs,
          maxHeldBytes: config.maxHeldResponseBytes,
          decide: (status) => (status >= 500 && canRetryAfter() ? 'discard' : 'pipe'),
          onFirstByte: () => {
            if (!stream) {
              const now = performance.now();
              if (rec) rec.ttftAt = now;
              m.ttftPlain.observe((now - sentAt) / 1e3);
            }
            rt.firstByte(rank, decision.reason);
          },
          // A stream's TTFT is its first output, whatever the engine sent before it.
          ...(stream
            ? {
                onFirstToken: () => {
                  const now = performance.now();
                  if (rec) rec.ttftAt = now;
                  m.ttftStream.observe((now - sentAt) / 1e3);
                },
              }
            : {}),
          interToken: m.interToken,
          ...(kind === 'responses' && ctx.responseHomes
            ? { onResponseId: (id: string) => ctx.responseHomes!.remember(id, worker.url) }
            : {}),
        });
        call = thisCall;
        calls.add(worker, thisCall);
        let result: ForwardResult;
        try {
          result = await thisCall.start();
        } catch (err) {
          predicted?.done(undefined, false);
          throw err;
        } finally {
          // Whatever happened (even a throw from undici's dispatch), the rank's load goes back.
          decision.done();
          calls.delete(worker, thisCall);
          if (retrying) {
            retrying = false;
            budget.release();
          }
          admission.wake();
        }

        if (predicted) {
          predicted.done(
            result.kind === 'piped' ? result.usage : undefined,
            result.kind === 'piped' && result.end === 'complete',
          );
        }
        if (result.kind === 'aborted') {
          if (rec) rec.status = timedOut ? 504 : 499;
          if (timedOut) {
            outlier.failure(worker, 'request deadline passed');
            throw deadlineError();
          }
          metrics.countRequest(route, rankLabel, decision.reason, '499');
          return;
        }
        if (result.kind === 'failed') {
          const failure = result.failure;
          if (failure.kind === 'connect') ctx.health.reportConnectError(worker, failure.detail);
          if (failure.kind !== 'worker-down') outlier.failure(worker, failure.detail);
          rel.failure(rankLabel, 'before-client-bytes', failure.kind);
          excluded ??= new Set<number>(outside);
          excluded.add(rank);
          lastFailure = { rank, workerRank: worker.ranks[0] ?? rank, failure };
          if ((failure.kind === 'status' || canRetryAfter()) && budget.tryAcquire()) {
            retrying = true;
            metrics.retries.inc({ rank: rankLabel, cause: failure.kind });
            logFailure(worker, rank, 'before-client-bytes', failure, 'retrying on another rank');
            const wait = budget.backoffMs(attemptNo + 1);
            if (wait >= 1) await sleep(wait);
            continue;
          }
          logFailure(worker, rank, 'before-client-bytes', failure, 'failed, no retry left');
          throw noRankLeft(lastFailure, undefined);
        }

        let status = String(result.status);
        if (result.end === 'complete') {
          // Only a completed answer says anything good about the worker.
          if (result.status >= 500) outlier.failure(worker, `worker answered ${result.status}`);
          else {
            outlier.success(worker);
            ctx.health.reportSuccess(worker);
          }
        } else if (result.end === 'client-closed') {
          status = '499';
        } else {
          const failure = result.failure ?? { kind: 'socket' as const, detail: 'stream cut' };
          status = timedOut || failure.kind === 'timeout' ? '504' : '502';
          if (!timedOut) outlier.failure(worker, failure.detail);
          rel.failure(rankLabel, 'after-client-bytes', failure.kind);
          logFailure(worker, rank, 'after-client-bytes', failure, 'worker failed mid-response');
        }
        const usage = result.usage;
        if (usage) {
          // Without a cached count the request says nothing about the hit rate: it is counted
          // apart, and its prompt tokens stay out of the hit rate's denominator.
          if (usage.cachedTokens === undefined) m.withoutCachedTokens.inc(1);
          else {
            m.promptTokens.inc(usage.promptTokens);
            m.cachedTokens.inc(usage.cachedTokens);
          }
          if (usage.outputTokens !== undefined) m.outputTokens.inc(usage.outputTokens);
        }
        metrics.countRequest(route, rankLabel, decision.reason, status);
        if (rec) {
          rec.status = Number(status);
          rec.usage = usage;
          if (stream) rec.streamedTokens = thisCall.tokenEvents;
        }
        return;
      }
    } catch (err) {
      if (rec)
        rec.status = err === CLIENT_GONE ? 499 : ((err as { status?: number }).status ?? 500);
      throw err;
    } finally {
      if (retrying) budget.release();
      clearTimeout(timer);
      res.off('close', onClose);
      // Requests that never reached a rank (refused, no rank healthy) have no line.
      if (rec && rec.rank >= 0) {
        ctx.recorder!.record({
          receivedAt,
          ids: allIds!,
          rank: rec.rank,
          reason: rec.reason,
          usage: rec.usage,
          streamedTokens: rec.streamedTokens,
          ttftAt: rec.ttftAt,
          endAt: performance.now(),
          status: rec.status || 500,
          routingKey: routeRequest.routingKey,
          model: routeRequest.model,
          stream,
        });
      }
    }
  }

  /**
   * What routing needs from the body. The approximate tokenizer reads it from the bytes, only
   * as far as the method's declared prefix (protocol's scanRequest); a Hugging Face
   * tokenizer renders the chat template over whole messages, so that path parses the body.
   */
  function readRequest(
    req: IncomingMessage,
    kind: RequestKind,
    raw: Buffer,
    limits: RequestLimits,
    wholePrompt: boolean,
  ): {
    routeRequest: ProtocolRouteRequest;
    stream: boolean;
    routedRankSpans: [number, number][];
    /** With wholePrompt: every prompt token (routeRequest.inputIds is capped for the method). */
    allIds?: Uint32Array;
  } {
    const cap = policy.maxPromptTokens;
    if (tokenizer.kind === 'approximate') {
      const scanned = scanRequest(kind, raw, {
        maxPromptTokens: wholePrompt ? Number.POSITIVE_INFINITY : cap,
        limits,
      });
      const routeRequest = routeRequestFromScan(scanned, req.headers);
      const allIds = scanned.inputIds;
      // The method gets exactly what a capped scan would have given it.
      if (wholePrompt && allIds.length > cap) routeRequest.inputIds = allIds.subarray(0, cap);
      return {
        routeRequest,
        stream: scanned.stream,
        routedRankSpans: scanned.routedRankSpans,
        ...(wholePrompt ? { allIds } : {}),
      };
    }
    const body = parseJsonBody(raw, limits);
    const parsed: ParsedRequest = parseRequest(kind, body, limits);
    // Also the policy's RouteRequest as is: same field names, absent hints left out.
    const routeRequest = buildRouteRequest(parsed, tokenizer, req.headers);
    const allIds = routeRequest.inputIds;
    if (routeRequest.inputIds.length > cap) {
      routeRequest.promptTokens = routeRequest.inputIds.length;
      routeRequest.inputIds = routeRequest.inputIds.subarray(0, cap);
    }
    return {
      routeRequest,
      stream: parsed.stream,
      routedRankSpans:
        body.routed_dp_rank === undefined ? [] : topLevelSpans(raw, 'routed_dp_rank'),
      ...(wholePrompt ? { allIds } : {}),
    };
  }

  /** Ranks at --max-concurrent-per-rank, or undefined when none is (or there is no cap). */
  function fullRanks(): number[] | undefined {
    const cap = config.maxConcurrentPerRank;
    if (cap <= 0) return undefined;
    let out: number[] | undefined;
    for (const r of table.tracker.ranks) {
      if (r.inFlightRequests < cap) continue;
      out ??= [];
      out.push(r.rank);
    }
    return out;
  }

  function checkRoutedRank(routed: number, source: string, group: WorkerGroup): void {
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
    if (group.outside?.has(routed)) {
      throw new RouterError(
        'invalid_rank',
        `${source} ${routed} serves another model than "${group.name}"`,
        source,
      );
    }
    if (!slot.worker.healthy || slot.worker.ejected) {
      throw new RouterError(
        'no_healthy_rank',
        `${source} ${routed} is down (${slot.worker.ejected ? 'ejected after repeated failures' : 'failing its health checks'})`,
        source,
      );
    }
  }

  function deadlineError(): RouterError {
    return new RouterError(
      'upstream_timeout',
      `The request was not answered within ${config.requestTimeoutMs} ms (--request-timeout-ms)`,
    );
  }

  function evacuate(worker: Worker, reason: string): void {
    for (const c of calls.snapshot(worker)) {
      if (!c.sentToClient) c.fail({ kind: 'worker-down', detail: `worker taken out: ${reason}` });
    }
  }

  return Object.assign(serveProxy, { precheck, evacuate, budget });
}

/**
 * A signal aborted with CLIENT_GONE when the client's connection closes before its answer was
 * written (at once if it already has): a queued request whose client left leaves the queue.
 */
function goneSignal(res: ServerResponse): AbortSignal {
  const ac = new AbortController();
  if (res.destroyed && !res.writableFinished) ac.abort(CLIENT_GONE);
  else
    res.once('close', () => {
      if (!res.writableFinished) ac.abort(CLIENT_GONE);
    });
  return ac.signal;
}

/** `outside` plus the ranks of every worker but the one at `url`. */
function ranksNotOf(
  workers: readonly Worker[],
  url: string,
  outside: ReadonlySet<number> | undefined,
): Set<number> {
  const out = new Set(outside);
  for (const w of workers) {
    if (w.url === url) continue;
    for (const r of w.ranks) out.add(r);
  }
  return out;
}
