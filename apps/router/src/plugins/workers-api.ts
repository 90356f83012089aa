// The GET routes a client reaches that are answered from the fleet rather than proxied:
//   /liveness   the router process is up (200 always);
//   /readiness  some rank is routable and its worker has passed a check or served a request;
//   /health     SGLang's meaning, "this endpoint can serve requests": the same condition as
//               /readiness, so it never says ok before any worker was checked;
//   /v1/models  the union of the healthy workers' model lists (no load accounting); with worker
//               groups keyed by model, one card per name a client may send (model and
//               aliases): the workers' own card when one of the group's workers lists that id,
//               else a card made from the configured name, so the list is never missing a
//               group whose workers are down, nor shows a name the router would refuse.

import { describeError, getText } from '@kvroute/protocol';
import type { FastifyInstance } from 'fastify';
import { noRankLeft } from '../proxy/route.ts';
import type { RankTable } from '../rank-table.ts';
import type { RouterState } from '../state.ts';
import { clientGuard } from './engine-api.ts';

export interface WorkersApiOptions {
  state: RouterState;
}

export async function workersApiPlugin(
  app: FastifyInstance,
  opts: WorkersApiOptions,
): Promise<void> {
  const { config, table, health } = opts.state;
  // Workers may serve different models: the list is the union of what every healthy worker
  // reports (first card per id wins), as the router serves all of them.
  const { policy } = opts.state;
  // A client's route like the inference ones: with API keys it needs one (the probes below
  // do not: orchestrators call them without credentials).
  app.get('/v1/models', { onRequest: clientGuard(opts.state) }, async (_req, reply) => {
    const workers = table.workers().filter((w) => w.healthy && !w.ejected);
    const lists = await Promise.all(
      workers.map(async (w) => {
        try {
          const res = await getText(
            opts.state.agent,
            `${w.url}/v1/models`,
            config.health.timeoutMs,
            health.headers,
          );
          if (res.status !== 200) return undefined;
          const body = JSON.parse(res.text) as { data?: unknown };
          return Array.isArray(body.data) ? (body.data as { id?: unknown }[]) : undefined;
        } catch (err) {
          health.reportConnectError(w, describeError(err));
          return undefined;
        }
      }),
    );
    if (policy.multiModel) {
      const reported = new Map<string, Map<string, unknown>>();
      workers.forEach((w, i) => {
        const g = policy.groupOfUrl(w.url);
        if (!g) return;
        const cards = reported.get(g.name) ?? new Map<string, unknown>();
        reported.set(g.name, cards);
        for (const card of lists[i] ?? []) {
          if (card && typeof card.id === 'string' && !cards.has(card.id)) cards.set(card.id, card);
        }
      });
      const data: unknown[] = [];
      for (const g of policy.groups) {
        for (const id of g.names) {
          data.push(
            reported.get(g.name)?.get(id) ?? {
              id,
              object: 'model',
              created: 0,
              owned_by: 'kvroute-router',
            },
          );
        }
      }
      reply.send({ object: 'list', data });
      return;
    }
    const answered = lists.filter((l) => l !== undefined);
    if (answered.length === 0) throw noRankLeft(undefined, 'no worker answered /v1/models');
    const byId = new Map<string, unknown>();
    for (const card of answered.flat()) {
      if (card && typeof card.id === 'string' && !byId.has(card.id)) byId.set(card.id, card);
    }
    reply.send({ object: 'list', data: [...byId.values()] });
  });

  /** Whether `t` has a routable rank whose worker passed a check, and the counts. */
  const side = (t: RankTable) => {
    const ranks = t.info().filter((r) => r.healthy);
    const checked = t.workers().filter((w) => w.everPassed && w.healthy && !w.ejected);
    return { ready: ranks.length > 0 && checked.length > 0, ranks, checked, size: t.size };
  };
  const readiness = () => {
    const p = side(table);
    // With prefill/decode disaggregation a request needs both sides: the decode side too.
    const pd = opts.state.pd;
    const d = pd ? side(pd.decodeTable) : undefined;
    const ready = p.ready && (d === undefined || d.ready);
    return {
      ready,
      body: {
        status: ready ? 'ok' : 'unavailable',
        healthy_ranks: p.ranks.length,
        ranks: p.size,
        checked_workers: p.checked.length,
        ...(d
          ? {
              decode: {
                healthy_ranks: d.ranks.length,
                ranks: d.size,
                checked_workers: d.checked.length,
              },
            }
          : {}),
      },
    };
  };
  app.get('/health', async (_req, reply) => {
    const r = readiness();
    reply.code(r.ready ? 200 : 503).send(r.body);
  });
  app.get('/readiness', async (_req, reply) => {
    const r = readiness();
    reply.code(r.ready ? 200 : 503).send(r.body);
  });
  app.get('/liveness', async () => ({ status: 'ok' }));
}
