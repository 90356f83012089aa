// The admin API as a fastify plugin: GET /ranks (a snapshot of ranks and policy state),
// POST /ranks (add or remove a worker at runtime), GET/POST /policy (each worker group's
// method and options; a POST switches them without dropping a request), POST /flush_cache
// (every worker's cache dropped) and GET/POST /trace_recording (recording/admin-routes.ts),
// all behind a bearer token. Registered only when an admin token is configured, so without
// one these routes do not exist.
import { createHash, timingSafeEqual } from 'node:crypto';
import { methodOptionSchema } from '@kvroute/policy';
import { parseJsonBody } from '@kvroute/protocol';
import type { FastifyInstance, FastifyRequest } from 'fastify';
import { readGroupKey } from '../config.ts';
import { redactUrlCredentials } from '../credentials.ts';
import { RouterConfigError, RouterError } from '../errors.ts';
import type { PolicySettings, WorkerGroup } from '../model-groups.ts';
import { registerTraceRecording } from '../recording/admin-routes.ts';
import type { RouterState } from '../state.ts';
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
      url: redactUrlCredentials(r.url),
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

  const policyOf = (g: WorkerGroup) => ({
    model: g.name === '' ? null : g.name,
    default: g.isDefault,
    method: g.dispatcher.method,
    options: { ...g.dispatcher.options },
  });
  app.get('/policy', { onRequest: authorize }, async () => ({
    models: state.policy.groups.map(policyOf),
  }));
  // {"model"?: name, "method"?: name, "options"?: {option: value}}: the group's new policy.
  // `options` replaces the group's method options (flag or option names, as in YAML); without
  // it they are kept. The new dispatcher takes the next decision; requests in flight finish
  // on the one that began them.
  app.post('/policy', { onRequest: authorize }, async (req) => {
    const body = parseJsonBody((req.body as Buffer | undefined) ?? Buffer.alloc(0));
    const refuse = (message: string, param: string | null = null): never => {
      state.noteSwitchRefused('admin');
      throw new RouterError('invalid_policy', message, param);
    };
    for (const k of Object.keys(body)) {
      if (!['model', 'method', 'load_balance_method', 'options'].includes(k))
        refuse(`unknown field '${k}': send model, method and options`, k);
    }
    const model = body.model;
    if (model !== undefined && model !== null && typeof model !== 'string')
      refuse("'model' must be a model name", 'model');
    const group = state.policy.find((model as string | null | undefined) ?? undefined);
    if (!group) {
      refuse(
        `no worker group serves the model ${JSON.stringify(model)} (groups: ${state.policy.groups.map((g) => g.name).join(', ')})`,
        'model',
      );
    }
    const g = group as WorkerGroup;
    const method = body.method ?? body.load_balance_method ?? g.settings.loadBalanceMethod;
    if (typeof method !== 'string') refuse("'method' must be a method name", 'method');
    const next: PolicySettings = {
      ...g.settings,
      loadBalanceMethod: method as string,
      // Options given to `options` are the old method's; a new method starts without them.
      policyOptions: method === g.settings.loadBalanceMethod ? g.settings.policyOptions : {},
    };
    const options = body.options;
    if (options !== undefined) {
      if (options === null || typeof options !== 'object' || Array.isArray(options))
        refuse("'options' must be an object of method options", 'options');
      next.methodOptions = {};
      next.policyOptions = {};
      for (const [k, v] of Object.entries(options as Record<string, unknown>)) {
        let r: ReturnType<typeof readGroupKey>;
        try {
          r = readGroupKey(k, v, `options.${k}`);
        } catch (err) {
          return refuse(stripPrefix((err as Error).message), 'options');
        }
        if (!r?.path.startsWith('methodOptions.'))
          refuse(
            `options.${k}: not a method option (see --help for the method options)`,
            'options',
          );
        next.methodOptions[r!.path.slice('methodOptions.'.length)] = r!.value as number | string;
      }
      // Unlike the router-wide flags (set for any method), a switch names options of its own
      // method: another method's option here is a mistake, not something to ignore.
      let own: string[] | undefined;
      try {
        own = Object.keys(methodOptionSchema(method as string));
      } catch {
        own = undefined; // an unknown method: the dispatcher names it below
      }
      for (const name of Object.keys(next.methodOptions)) {
        if (own && !own.includes(name))
          refuse(
            `${method} has no option '${name}'; its options: ${own.length > 0 ? own.join(', ') : '(none)'}`,
            'options',
          );
      }
    }
    try {
      const event = state.policy.switchPolicy(g, next, 'admin');
      return { switched: true, ...policyOf(g), from: event.from };
    } catch (err) {
      if (err instanceof RouterConfigError) refuse(stripPrefix(err.message));
      throw err;
    }
  });
  registerFlushCache(app, state, authorize);
  registerTraceRecording(app, state, authorize);
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

function stripPrefix(message: string): string {
  return message.replace(/^kvroute-router: /, '');
}
