// The engines' routes beside inference, as SGLang's router serves them: what any one worker
// can answer is forwarded to one healthy worker (round robin, no load accounting, no
// policy: they create no KV cache), and what concerns every worker is fanned out.
//
//   GET  /v1/models/{id}, /get_server_info, /get_model_info, /health_generate
//   POST /tokenize, /detokenize                                     one healthy worker
//   GET, DELETE /v1/responses/{id}, GET .../input_items, POST .../cancel
//                          the worker holding the stored response (response-homes.ts)
//   POST /flush_cache      every worker, behind the admin token (a fleet-wide cache drop)
//   any unknown path       one healthy worker, with --pass-through-unknown (else 404), but
//                          never a path the router owns (metrics, admin routes)
//
// With inference API keys, every route here asks for one as the inference routes do (and
// counts toward the same rate limit): a model card, a tokenizer or a generation check is the
// workers' service too. The client's credentials and identity headers stay behind, as on the
// inference routes.
//
// Inference paths (chat, completions, /generate, embeddings, rerank, responses) are the
// proxy's: they are routed by their prompt through the policy (protocol's REQUEST_PATHS).
import { describeError, routeNotFound } from '@kvroute/protocol';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { request } from 'undici';
import { redactUrlCredentials } from '../credentials.ts';
import { RouterError } from '../errors.ts';
import { dispatcherConfigOf, type WorkerGroup } from '../model-groups.ts';
import { isClientIdentityHeader } from '../proxy/forward.ts';
import { noRankLeft } from '../proxy/route.ts';
import type { Worker } from '../rank-table.ts';
import type { RouterState } from '../state.ts';

export interface EngineApiOptions {
  state: RouterState;
}

/** Request headers a worker must not see from the client (hop-by-hop, or the router's). */
const DROP_REQUEST = new Set([
  'host',
  'connection',
  'keep-alive',
  'transfer-encoding',
  'content-length',
  'upgrade',
  'proxy-authorization',
  'te',
  'trailer',
]);
const DROP_RESPONSE = new Set(['connection', 'keep-alive', 'transfer-encoding', 'content-length']);

export type ForwardHandler = (req: FastifyRequest, reply: FastifyReply) => Promise<void>;

/**
 * Paths the router answers itself (or refuses): never passed through to a worker, even under
 * --pass-through-unknown, so that a scraper of /metrics never reads a worker's metrics in
 * place of the router's and an admin route left unconfigured is never a worker's.
 */
const ROUTER_PATHS = new Set(['/metrics', '/ranks', '/policy', '/flush_cache', '/trace_recording']);

/** The inference routes' API key and rate limit, for the routes beside them. */
export function clientGuard(state: RouterState): (req: FastifyRequest) => Promise<void> {
  return async (req) =>
    state.admission.checkClient(req.headers.authorization, req.socket?.remoteAddress);
}

/** The --pass-through-unknown handler: a router path is a 404 here, anything else a worker's. */
export function passThroughUnknown(state: RouterState): ForwardHandler {
  const forward = forwardToOneWorker(state);
  const guard = clientGuard(state);
  return async (req, reply) => {
    if (ROUTER_PATHS.has(req.url.split('?')[0] ?? '')) {
      const err = routeNotFound(req.method, req.url);
      reply.code(err.status).send(err.toJSON());
      return;
    }
    await guard(req);
    return forward(req, reply);
  };
}

/**
 * A handler that sends the client's request to one healthy worker (round robin) and pipes the
 * answer back; a worker that cannot be reached is reported and the next one tried. The path
 * and query go as received. router.ts also uses it as the 404 handler under
 * --pass-through-unknown.
 */
export function forwardToOneWorker(
  state: RouterState,
  /** With worker groups: the group whose workers may answer (undefined: any worker). */
  groupOf?: (req: FastifyRequest) => WorkerGroup | undefined,
  /** Adds to a worker's 200 JSON object before it goes back (the answer is read whole). */
  augment?: (body: Record<string, unknown>) => Record<string, unknown>,
  /**
   * For what one worker holds: the URL of the worker to ask first, and every other in turn
   * while they answer 404 (the last answer stands); `found` hears which one answered 2xx.
   */
  holder?: {
    first(req: FastifyRequest): string | undefined;
    found(req: FastifyRequest, worker: Worker): void;
  },
): ForwardHandler {
  const { table, health, config } = state;
  let cursor = 0;
  return async (req, reply) => {
    const group = groupOf?.(req);
    const workers = table
      .workers()
      .filter(
        (w) =>
          w.healthy &&
          !w.ejected &&
          !w.removed &&
          (group === undefined || state.policy.groupOfUrl(w.url) === group),
      );
    const first = holder?.first(req);
    const at = first === undefined ? -1 : workers.findIndex((w) => w.url === first);
    if (at > 0) workers.unshift(...workers.splice(at, 1));
    const headers: Record<string, string> = {};
    for (const [k, v] of Object.entries(req.headers)) {
      if (v === undefined || DROP_REQUEST.has(k)) continue;
      if (isClientIdentityHeader(k, config.forwardClientAuth)) continue;
      headers[k] = Array.isArray(v) ? v.join(', ') : v;
    }
    if (config.workerApiKey !== undefined) headers.authorization = `Bearer ${config.workerApiKey}`;
    const body = Buffer.isBuffer(req.body) && req.body.length > 0 ? req.body : undefined;
    // A holder search starts at the known holder (or the first worker), not the round robin.
    const from = holder ? 0 : cursor;
    for (let i = 0; i < workers.length; i++) {
      const w = workers[(from + i) % workers.length] as Worker;
      try {
        const res = await request(`${w.url}${req.url}`, {
          method: req.method as 'GET',
          dispatcher: state.agent,
          headers,
          ...(body ? { body } : {}),
          headersTimeout: config.requestTimeoutMs,
          bodyTimeout: config.requestTimeoutMs,
        });
        if (holder) {
          if (res.statusCode === 404 && i < workers.length - 1) {
            await res.body.dump();
            continue;
          }
          if (res.statusCode < 300) holder.found(req, w);
        } else {
          cursor = (cursor + i + 1) % workers.length;
        }
        reply.code(res.statusCode);
        for (const [k, v] of Object.entries(res.headers)) {
          if (v !== undefined && !DROP_RESPONSE.has(k)) reply.header(k, v);
        }
        reply.header('x-kvroute-rank', String(w.ranks[0] ?? ''));
        if (augment && res.statusCode === 200) {
          const text = await res.body.text();
          let body: unknown;
          try {
            body = JSON.parse(text);
          } catch {
            return reply.send(text);
          }
          if (body === null || typeof body !== 'object' || Array.isArray(body)) {
            return reply.send(text);
          }
          return reply.send(augment(body as Record<string, unknown>));
        }
        return reply.send(res.body);
      } catch (err) {
        health.reportConnectError(w, describeError(err));
      }
    }
    throw noRankLeft(undefined, `no worker answered ${req.method} ${req.url.split('?')[0]}`);
  };
}

/** What the router routes over: the routable ranks and the default group's policy. */
function routerInfo(state: RouterState): Record<string, unknown> {
  const ranks = state.table.info().filter((r) => !r.removed);
  const group = state.policy.defaultGroup;
  return {
    ranks: ranks.length,
    healthy_ranks: ranks.filter((r) => r.healthy).length,
    dispatcher: dispatcherConfigOf(group.settings),
    ...(state.policy.multiModel ? { model_groups: state.policy.groups.map((g) => g.name) } : {}),
  };
}

export async function engineApiPlugin(app: FastifyInstance, opts: EngineApiOptions): Promise<void> {
  app.addHook('onRequest', clientGuard(opts.state));
  const forward = forwardToOneWorker(opts.state);
  // With worker groups, a model card comes from a worker of the group that serves it, and a
  // model no group serves is OpenAI's 404.
  const { policy } = opts.state;
  app.get(
    '/v1/models/:id',
    policy.multiModel
      ? forwardToOneWorker(opts.state, (req) => policy.resolve((req.params as { id: string }).id))
      : forward,
  );
  // A worker's server info describes one worker; the router adds what it routes over, so a
  // client (kvroute-sim validate) predicting this endpoint sees the ranks and the policy the
  // router uses rather than one worker's dp_size and internal dispatcher.
  app.get(
    '/get_server_info',
    forwardToOneWorker(opts.state, undefined, (body) => ({
      ...body,
      kvroute_router: routerInfo(opts.state),
    })),
  );
  for (const path of ['/get_model_info', '/health_generate']) app.get(path, forward);
  for (const path of ['/tokenize', '/detokenize']) app.post(path, forward);
  // A stored Responses API response is its worker's: asked there first (the router remembers
  // who answered it), else of each worker until one has it.
  const homes = opts.state.responseHomes;
  const stored = forwardToOneWorker(opts.state, undefined, undefined, {
    first: (req) => homes.home((req.params as { id: string }).id),
    found: (req, w) => {
      const id = (req.params as { id: string }).id;
      // A deleted response is no longer anyone's.
      if (req.method === 'DELETE') homes.forget(id);
      else homes.remember(id, w.url);
    },
  });
  app.get('/v1/responses/:id', stored);
  app.delete('/v1/responses/:id', stored);
  app.get('/v1/responses/:id/input_items', stored);
  app.post('/v1/responses/:id/cancel', stored);
}

/**
 * POST /flush_cache on every worker (SGLang's cache drop, router-wide), registered with the
 * admin routes behind their token. 200 when every worker flushed; otherwise the status of the
 * first refusal (a busy worker's 400) or 502, with each worker's answer in `workers`.
 */
export function registerFlushCache(
  app: FastifyInstance,
  state: RouterState,
  authorize: (req: FastifyRequest) => Promise<void>,
): void {
  app.post('/flush_cache', { onRequest: authorize }, async (_req, reply) => {
    const workers = state.table.workers().filter((w) => !w.removed);
    if (workers.length === 0) {
      throw new RouterError('no_healthy_rank', 'No worker to flush: the router has none');
    }
    const headers: Record<string, string> =
      state.config.workerApiKey !== undefined
        ? { authorization: `Bearer ${state.config.workerApiKey}` }
        : {};
    const results = await Promise.all(
      workers.map(async (w) => {
        try {
          const res = await request(`${w.url}/flush_cache`, {
            method: 'POST',
            dispatcher: state.agent,
            headers,
            headersTimeout: state.config.health.timeoutMs * 5,
            bodyTimeout: state.config.health.timeoutMs * 5,
          });
          const text = await res.body.text();
          return {
            url: redactUrlCredentials(w.url),
            status: res.statusCode,
            body: text.slice(0, 500),
          };
        } catch (err) {
          return { url: redactUrlCredentials(w.url), status: 0, body: describeError(err) };
        }
      }),
    );
    const failed = results.find((r) => r.status < 200 || r.status >= 300);
    const status = !failed
      ? 200
      : failed.status >= 400 && failed.status < 500
        ? failed.status
        : 502;
    // The live cache model follows the workers' caches (a partial flush leaves it as it was).
    if (status === 200) state.shadow?.reset();
    reply.code(status).send({
      flushed: results.filter((r) => r.status >= 200 && r.status < 300).length,
      workers: results,
    });
  });
}
