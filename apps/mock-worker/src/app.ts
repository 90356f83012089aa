// The mock worker's HTTP surface (spec S-4) as a fastify instance; start.ts listens.
import {
  badRequest,
  buildRouteRequest,
  contextLengthExceeded,
  createRoutingTokenizer,
  internalError,
  isProtocolError,
  openAIErrorBody,
  type ParsedRequest,
  ProtocolError,
  type ProtocolRouteRequest,
  parseJsonBody,
  parseRequest,
  REQUEST_PATHS,
  type RequestKind,
  type RoutingTokenizer,
  routedRankParam,
  routeNotFound,
  SseWriter,
} from '@kvroute/protocol';
import { stream } from '@kvroute/sim/model';
import Fastify, { type FastifyInstance, type FastifyReply, type FastifyRequest } from 'fastify';
import { MockEngine } from './engine.ts';
import { fillerToken, promptSeed } from './filler.ts';
import { type RankEventPublisher, startKvEventPublishers } from './kv-events.ts';
import { createWorkerMetrics } from './metrics.ts';
import { type MockWorkerOptions, type ResolvedOptions, resolveOptions } from './options.ts';
import { finalBody, type Outcome, streamDelta, streamEnd, streamStart } from './responses.ts';

declare module 'fastify' {
  interface FastifyInstance {
    /** The engine behind this worker (ranks, dispatcher, scheduler); for tests and the router. */
    mockEngine: MockEngine;
    mockOptions: ResolvedOptions;
    /** One KV event publisher per DP rank when kvEventsConfig is set (bound on ready). */
    kvEventPublishers: RankEventPublisher[];
  }
}

/** Workers accept bigger bodies than the router's 32 MiB default, so the router's 413 is the one seen. */
const BODY_LIMIT = 64 * 1024 * 1024;

const PROMPT_PARAM: Record<RequestKind, string> = {
  chat: 'messages',
  completion: 'prompt',
  generate: 'text',
};

export function buildMockWorker(options: MockWorkerOptions = {}): FastifyInstance {
  const opts = resolveOptions(options);
  const engine = new MockEngine(opts);
  const tokenizer: RoutingTokenizer = createRoutingTokenizer(
    opts.tokenizer ? { tokenizerJsonPath: opts.tokenizer } : {},
  );
  const metrics = createWorkerMetrics(engine);
  // Fault draws come from their own seeded stream, as every random choice in the simulator.
  const random = stream(opts.seed, 'mock-worker-faults');
  let received = 0;
  const app = Fastify({ logger: opts.logger, bodyLimit: BODY_LIMIT });
  app.decorate('mockEngine', engine);
  app.decorate('mockOptions', opts);
  app.addHook('onClose', async () => engine.close());
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

  // Bodies arrive as text whatever the content type, so bad JSON gets our 400, not fastify's.
  app.removeAllContentTypeParsers();
  app.addContentTypeParser('*', { parseAs: 'string' }, (_req, body, done) => done(null, body));

  app.setNotFoundHandler((req, reply) => {
    const err = routeNotFound(req.method, req.url);
    reply.code(err.status).send(err.toJSON());
  });
  app.setErrorHandler((error, req, reply) => {
    let err: ProtocolError;
    if (isProtocolError(error)) err = error;
    else {
      const e = error as { statusCode?: number; code?: string; message?: string };
      const status = e.statusCode && e.statusCode >= 400 && e.statusCode < 600 ? e.statusCode : 500;
      err =
        status === 413
          ? new ProtocolError(413, `Request body is larger than the limit of ${BODY_LIMIT} bytes`, {
              code: 'payload_too_large',
            })
          : status < 500
            ? new ProtocolError(status, e.message ?? 'bad request', { code: e.code ?? null })
            : internalError(`mock worker error: ${e.message ?? String(error)}`);
      if (status >= 500) req.log.error(error);
    }
    reply.code(err.status).send(err.toJSON());
  });

  const serverInfo = () => ({
    dp_size: opts.dpSize,
    model_path: opts.modelName,
    served_model_name: opts.modelName,
    max_total_num_tokens: engine.kvCapacity,
    page_size: opts.pageSize,
    chunked_prefill_size: engine.chunkedPrefillSize,
    context_length: opts.maxContext,
    load_balance_method: opts.loadBalanceMethod,
    engine: 'kvroute-mock-worker',
    profile: engine.profile.name,
    time_scale: opts.timeScale,
    tokenizer: tokenizer.description,
  });

  const failing = () => opts.failAfter !== undefined && received > opts.failAfter;

  app.get('/health', async (_req, reply) => {
    // After --fail-after trips the engine counts as broken, so active health checks see it.
    if (failing()) {
      return reply.code(503).send(
        openAIErrorBody(503, 'mock worker is failing every request (--fail-after)', {
          code: 'injected_failure',
        }),
      );
    }
    return {};
  });
  app.get('/get_server_info', async () => serverInfo());
  app.get('/get_model_info', async () => ({ model_path: opts.modelName, is_generation: true }));
  app.get('/v1/models', async () => ({
    object: 'list',
    data: [
      {
        id: opts.modelName,
        object: 'model',
        created: 0,
        owned_by: 'kvroute',
        root: opts.modelName,
        max_model_len: opts.maxContext,
      },
    ],
  }));
  app.get('/v1/loads', async () => ({ dp_size: opts.dpSize, loads: engine.loads() }));
  // SGLang's /flush_cache: tests and benchmarks start from a cold cache without a restart.
  app.post('/flush_cache', async (_req, reply) => {
    if (!engine.flushCache()) {
      throw badRequest(
        'Cache not flushed: there are running or waiting requests (as SGLang, flushing needs an idle engine)',
        { code: 'engine_busy' },
      );
    }
    return reply.type('text/plain').send('Cache flushed.\n');
  });
  app.get('/metrics', async (_req, reply) => {
    reply.header('content-type', metrics.registry.contentType);
    return metrics.registry.metrics();
  });

  for (const [kind, path] of Object.entries(REQUEST_PATHS) as [RequestKind, string][]) {
    app.post(path, (req, reply) => handle(kind, req, reply));
  }

  async function handle(kind: RequestKind, req: FastifyRequest, reply: FastifyReply) {
    const arrivalWall = performance.now();
    received++;
    const count = (status: number) =>
      metrics.requests.inc({ endpoint: kind, status: String(status) });
    reply.raw.once('finish', () => count(reply.raw.statusCode));

    const injected = failing()
      ? 'fail_after'
      : opts.failRate > 0 && random() < opts.failRate
        ? 'fail_rate'
        : null;
    if (injected) {
      metrics.injectedFailures.inc({ reason: injected });
      if (opts.failMode === 'reset') {
        reply.hijack();
        req.raw.socket.destroy();
        return;
      }
      throw new ProtocolError(500, `injected failure (--${injected.replace('_', '-')})`, {
        code: 'injected_failure',
      });
    }

    const parsed = parseRequest(kind, parseJsonBody(typeof req.body === 'string' ? req.body : ''));
    // The same bridge from body + headers the router uses, so router and worker read the
    // routing hints (headers win) and the default output limits alike.
    const route = buildRouteRequest(parsed, tokenizer, req.headers);
    if (route.routedRank !== undefined && route.routedRank >= opts.dpSize) {
      const param = routedRankParam(route.routedRankSource);
      throw badRequest(
        `${param} ${route.routedRank} is out of range: this worker has dp_size ${opts.dpSize} (valid 0..${opts.dpSize - 1})`,
        { param, code: 'invalid_value' },
      );
    }
    const inputIds = route.inputIds;
    const promptParam =
      parsed.prompt.type === 'ids' && kind === 'generate' ? 'input_ids' : PROMPT_PARAM[kind];
    if (inputIds.length === 0) {
      throw badRequest('The prompt is empty: at least one input token is needed', {
        param: promptParam,
        code: 'invalid_value',
      });
    }
    if (inputIds.length >= opts.maxContext) {
      throw contextLengthExceeded(inputIds.length, opts.maxContext, promptParam);
    }
    // As SGLang: the output limit is cut to what fits in the context.
    const maxTokens = Math.min(route.maxTokens, opts.maxContext - inputIds.length);
    // max_tokens 0 still runs the prefill (and caches the prompt) but reports no output.
    const modelTokens = Math.max(1, maxTokens);
    if (inputIds.length + modelTokens > engine.kvCapacity) {
      throw badRequest(
        `The request needs ${inputIds.length + modelTokens} KV tokens (prompt + max tokens), more than this worker's KV pool of ${engine.kvCapacity}`,
        { param: promptParam, code: 'context_length_exceeded' },
      );
    }

    if (opts.slowMs > 0) {
      // The request is not in the engine yet: a client that leaves during the delay costs
      // nothing, so it is simply not started.
      let clientGone = false;
      const onEarlyClose = () => {
        clientGone = !reply.raw.writableFinished;
      };
      reply.raw.once('close', onEarlyClose);
      await new Promise((r) => setTimeout(r, opts.slowMs));
      reply.raw.off('close', onEarlyClose);
      if (clientGone) return reply;
    }
    // From here to run()'s own close listener nothing awaits, so no close can slip between.
    return run(kind, parsed, route, maxTokens, modelTokens, arrivalWall, reply);
  }

  function run(
    kind: RequestKind,
    parsed: ParsedRequest,
    route: ProtocolRouteRequest,
    maxTokens: number,
    modelTokens: number,
    arrivalWall: number,
    reply: FastifyReply,
  ): Promise<unknown> | FastifyReply {
    const { inputIds } = route;
    const seed = promptSeed(inputIds);
    const outcome: Outcome = {
      id: '',
      kind,
      model: parsed.model ?? opts.modelName,
      created: Math.floor(Date.now() / 1000),
      dpRank: 0,
      promptTokens: inputIds.length,
      completionTokens: 0,
      cachedTokens: 0,
      text: '',
      finished: false,
      e2eLatency: 0,
    };
    const streaming = parsed.stream;
    const raw = reply.raw;
    let resolve!: (body: unknown) => void;
    const done = new Promise<unknown>((r) => {
      resolve = r;
    });

    const sse = new SseWriter(raw, (delta) => streamDelta(outcome, delta));

    const handle = engine.start(
      {
        inputIds,
        maxNewTokens: modelTokens,
        routingKey: route.routingKey,
        routedRank: route.routedRank,
        bootstrapRoom: route.bootstrapRoom,
      },
      {
        onFirstToken(cached) {
          const rank = String(outcome.dpRank);
          outcome.cachedTokens = cached;
          metrics.promptTokens.inc({ dp_rank: rank }, inputIds.length);
          metrics.cachedTokens.inc({ dp_rank: rank }, cached);
          metrics.ttft.observe({ dp_rank: rank }, (performance.now() - arrivalWall) / 1000);
        },
        onToken(index) {
          if (index >= maxTokens) return; // the hidden token of a max_tokens 0 request
          const delta = fillerToken(seed, index);
          outcome.text += delta;
          outcome.completionTokens = index + 1;
          if (streaming) sse.token(delta);
        },
        onFinish() {
          outcome.finished = true;
          outcome.e2eLatency = (performance.now() - arrivalWall) / 1000;
          metrics.generationTokens.inc(
            { dp_rank: String(outcome.dpRank) },
            outcome.completionTokens,
          );
          if (streaming) sse.end(streamEnd(outcome));
          resolve(finalBody(outcome));
        },
      },
    );
    outcome.id =
      kind === 'generate'
        ? (parsed.rid ?? handle.id)
        : `${kind === 'chat' ? 'chatcmpl' : 'cmpl'}-${handle.id}`;
    outcome.dpRank = handle.rank;

    // A client that goes away frees its rank at once (KV, batch slot, dispatcher load).
    const onClose = () => {
      if (!outcome.finished && handle.abort()) {
        metrics.aborted.inc({ dp_rank: String(outcome.dpRank) });
        // Nobody reads this body any more; settling the promise lets fastify clean up.
        resolve(finalBody(outcome));
      }
    };
    raw.once('close', onClose);

    if (!streaming) {
      reply.header('x-kvroute-dp-rank', String(handle.rank));
      return done;
    }
    reply.hijack();
    raw.writeHead(200, {
      'content-type': 'text/event-stream; charset=utf-8',
      'cache-control': 'no-cache',
      connection: 'keep-alive',
      'x-kvroute-dp-rank': String(handle.rank),
    });
    raw.flushHeaders();
    if (!outcome.finished) sse.send(streamStart(outcome));
    return reply;
  }

  return app;
}
