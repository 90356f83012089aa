// The admin API as a fastify plugin: GET /ranks (a snapshot of ranks and policy state),
// POST /ranks (add or remove a worker at runtime) and POST /flush_cache (every worker's
// cache dropped), all behind a bearer token. Registered only
// when an admin token is configured, so without one these routes do not exist.
import { createHash, timingSafeEqual } from 'node:crypto';
import { parseJsonBody } from '@kvroute/protocol';
import type { FastifyInstance, FastifyRequest } from 'fastify';
import { RouterError } from '../errors.ts';
import type { RouterState } from '../router.ts';
import { registerFlushCache } from './engine-api.ts';

export interface AdminPluginOptions {
  state: RouterState;
  token: string;
}

function tokenDigest(token: string): Buffer {
  return createHash('sha256').update(token).digest();
}

export async function adminPlugin(app: FastifyInstance, opts: AdminPluginOptions): Promise<void> {
  const { state } = opts;
  const expected = tokenDigest(opts.token);
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
    // Worker groups keyed by model: each group's names, method, options and ranks.
    ...(state.policy.multiModel
      ? {
          models: state.policy.groups.map((g) => ({
            model: g.name,
            aliases: g.names.slice(1),
            default: g.isDefault,
            method: g.dispatcher.method,
            options: g.dispatcher.options,
            ranks: state.table
              .info()
              .filter((r) => !r.removed && state.policy.groupOfUrl(r.url) === g)
              .map((r) => r.rank),
            policy: g.dispatcher.stats(),
          })),
        }
      : {}),
  });

  app.get('/ranks', { onRequest: authorize }, async () => snapshot());
  registerFlushCache(app, state, authorize);
  app.post('/ranks', { onRequest: authorize }, async (req) => {
    const body = parseJsonBody((req.body as Buffer | undefined) ?? Buffer.alloc(0));
    const { action, url, dp_size: dpSize, model } = body;
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
    if (model !== undefined && (typeof model !== 'string' || !state.policy.find(model))) {
      throw new RouterError(
        'invalid_admin_request',
        `'model' must name a worker group (${state.policy.groups.map((g) => g.name).join(', ')}), got ${JSON.stringify(model)}`,
        'model',
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
        await state.addWorker(
          normalized,
          dpSize as number | undefined,
          model as string | undefined,
        );
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
