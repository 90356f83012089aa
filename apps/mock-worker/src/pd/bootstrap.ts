// The prefill role's bootstrap server, on its own port as SGLang's (--disaggregation-bootstrap-port,
// an aiohttp app beside the HTTP server). Control plane, as SGLang's:
//   GET  /route?prefill_dp_rank=-1&prefill_cp_rank=-1&target_tp_rank=-1&target_pp_rank=-1
//        the prefill server's parallel info: dp_size, page_size, and follow_bootstrap_room
//        (whether its DP dispatch is bootstrap_room % dp_size, so a decode server may infer the
//        rank instead of asking);
//   GET  /route?prefill_dp_rank=R&...   one rank's transfer endpoint (404 for an unknown rank);
//   POST /register_dp_rank {bootstrap_room, dp_rank}   the DP rank a room was prefilled on;
//   POST /query_dp_ranks {bootstrap_rooms: [...]}       -> {"<room>": dp_rank} for the known ones;
//   GET  /health.
// And a stand-in for the data plane (SGLang pushes the KV over RDMA; here the decode side
// long-polls for it): GET /kv/<room>?prefill_dp_rank=R answers once the room's prefill is done
// with {kv_tokens, cached_tokens (the prefill's own prefix-cache hit, which SGLang passes to
// the decode side with the KV), prefill_dp_rank}, 409 when R is not the rank holding the
// room's KV (what a decode server that guessed the rank wrong would run into), 410 when the prefill was aborted.
// Rooms are 63-bit integers: they are kept as decimal strings, never as JS numbers.
import { randomUUID } from 'node:crypto';
import Fastify, { type FastifyInstance } from 'fastify';

interface RoomState {
  dpRank: number;
  state: 'running' | 'ready' | 'failed';
  kvTokens: number;
  /** The prefill's own prefix-cache hit: what SGLang's decode reports as the answer's cached_tokens. */
  cachedTokens: number;
  reason?: string;
  waiters: Set<() => void>;
  at: number;
}

/** Rooms are forgotten this long after their last change (SGLang's entry cleanup interval). */
const ROOM_TTL_MS = 120_000;

/** Digit runs of a JSON body's `key` value (a number or a list of them), read as text. */
export function bigIntTexts(text: string, key: string): string[] {
  const at = text.indexOf(`"${key}"`);
  if (at < 0) return [];
  const colon = text.indexOf(':', at + key.length + 2);
  if (colon < 0) return [];
  let i = colon + 1;
  while (i < text.length && /\s/.test(text[i] as string)) i++;
  if (text[i] === '[') {
    const end = text.indexOf(']', i);
    return (text.slice(i + 1, end < 0 ? undefined : end).match(/-?\d+/g) ?? []).map(norm);
  }
  const m = /^"?(-?\d+)"?/.exec(text.slice(i));
  return m ? [norm(m[1] as string)] : [];
}

const norm = (digits: string): string => BigInt(digits).toString();

export interface BootstrapInfo {
  dpSize: number;
  pageSize: number;
  followBootstrapRoom: boolean;
}

export class BootstrapServer {
  readonly app: FastifyInstance;
  readonly engineId = randomUUID();
  private readonly rooms = new Map<string, RoomState>();
  private readonly registered = new Map<string, { dpRank: number; at: number }>();
  private sweep: NodeJS.Timeout | undefined;
  port = 0;

  constructor(private readonly info: BootstrapInfo) {
    const app = Fastify({ logger: false });
    this.app = app;
    app.removeAllContentTypeParsers();
    app.addContentTypeParser('*', { parseAs: 'string' }, (_r, body, done) => done(null, body));
    app.get('/health', async (_req, reply) => reply.type('text/plain').send('OK'));
    app.get<{ Querystring: Record<string, string> }>('/route', async (req, reply) => {
      const q = req.query;
      const fields = ['prefill_dp_rank', 'prefill_cp_rank', 'target_tp_rank', 'target_pp_rank'];
      if (fields.some((f) => !q[f])) {
        return reply.code(400).type('text/plain').send('Missing inputs for bootstrap server.');
      }
      const dp = Number(q.prefill_dp_rank);
      if (fields.every((f) => Number(q[f]) === -1)) {
        return {
          attn_tp_size: 1,
          attn_cp_size: 1,
          dp_size: this.info.dpSize,
          pp_size: 1,
          page_size: this.info.pageSize,
          kv_cache_dtype: 'auto',
          follow_bootstrap_room: this.info.followBootstrapRoom,
        };
      }
      if (
        !Number.isInteger(dp) ||
        dp < 0 ||
        dp >= this.info.dpSize ||
        Number(q.target_tp_rank) !== 0
      ) {
        return reply
          .code(404)
          .type('text/plain')
          .send(
            `Bootstrap info not found for dp_rank=${q.prefill_dp_rank} cp_rank=${q.prefill_cp_rank} tp_rank=${q.target_tp_rank} pp_rank=${q.target_pp_rank}`,
          );
      }
      return { rank_ip: '127.0.0.1', rank_port: this.port };
    });
    app.post('/register_dp_rank', async (req, reply) => {
      const text = String(req.body ?? '');
      const room = bigIntTexts(text, 'bootstrap_room')[0];
      const dp = Number(bigIntTexts(text, 'dp_rank')[0]);
      if (room === undefined || !Number.isInteger(dp)) {
        return reply
          .code(400)
          .type('text/plain')
          .send('expected {"bootstrap_room": int, "dp_rank": int}');
      }
      this.register(room, dp);
      return reply.type('text/plain').send('OK');
    });
    app.post('/query_dp_ranks', async (req) => {
      const out: Record<string, number> = {};
      for (const room of bigIntTexts(String(req.body ?? ''), 'bootstrap_rooms')) {
        const r = this.registered.get(room);
        if (r) out[room] = r.dpRank;
      }
      return out;
    });
    app.get<{
      Params: { room: string };
      Querystring: { prefill_dp_rank?: string; timeout_ms?: string };
    }>('/kv/:room', (req, reply) => {
      let room: string;
      try {
        room = norm(req.params.room);
      } catch {
        return reply.code(400).send({ error: `bad room ${req.params.room}` });
      }
      const want =
        req.query.prefill_dp_rank === undefined ? undefined : Number(req.query.prefill_dp_rank);
      const timeoutMs = Math.min(Number(req.query.timeout_ms ?? 30_000) || 30_000, 600_000);
      return new Promise((resolve) => {
        let timer: NodeJS.Timeout | undefined;
        const check = (): boolean => {
          const s = this.rooms.get(room);
          if (!s) return false;
          if (want !== undefined && s.dpRank !== want) {
            resolve(
              reply.code(409).send({
                error: `KVTransferError(bootstrap_room=${room}): prefill DP rank ${want} holds no KV for this room (it was prefilled on DP rank ${s.dpRank})`,
                prefill_dp_rank: s.dpRank,
              }),
            );
            return true;
          }
          if (s.state === 'running') return false;
          if (s.state === 'failed') {
            resolve(
              reply.code(410).send({
                error: `KVTransferError(bootstrap_room=${room}): ${s.reason ?? 'prefill aborted'}`,
              }),
            );
            return true;
          }
          resolve(
            reply.send({
              kv_tokens: s.kvTokens,
              cached_tokens: s.cachedTokens,
              prefill_dp_rank: s.dpRank,
            }),
          );
          return true;
        };
        const waiter = (): void => {
          if (check()) done();
        };
        const done = (): void => {
          clearTimeout(timer);
          this.rooms.get(room)?.waiters.delete(waiter);
          const p = this.pending.get(room);
          p?.delete(waiter);
          if (p?.size === 0) this.pending.delete(room);
        };
        if (check()) return;
        // The room may not exist yet: both requests of a pair are sent at once.
        const s = this.rooms.get(room);
        if (s) s.waiters.add(waiter);
        else {
          let p = this.pending.get(room);
          if (!p) {
            p = new Set();
            this.pending.set(room, p);
          }
          p.add(waiter);
        }
        timer = setTimeout(() => {
          done();
          resolve(
            reply.code(504).send({
              error: `KVTransferError(bootstrap_room=${room}): no KV from the prefill server within ${timeoutMs} ms`,
            }),
          );
        }, timeoutMs);
        req.raw.once('close', () => {
          if (!reply.sent) done();
        });
      });
    });
  }

  /** Waiters for rooms that did not exist yet when they asked. */
  private readonly pending = new Map<string, Set<() => void>>();

  async listen(host: string, port: number): Promise<number> {
    await this.app.listen({ host, port });
    const a = this.app.server.address();
    this.port = a && typeof a === 'object' ? a.port : port;
    this.sweep = setInterval(() => this.expire(), 10_000).unref();
    return this.port;
  }

  async close(): Promise<void> {
    clearInterval(this.sweep);
    this.app.server.closeAllConnections();
    await this.app.close();
  }

  register(room: string, dpRank: number): void {
    this.registered.set(room, { dpRank, at: Date.now() });
  }

  /** A prefill for `room` started on `dpRank`: registered for /query_dp_ranks, KV not ready. */
  begin(room: string, dpRank: number): void {
    this.register(room, dpRank);
    const s: RoomState = {
      dpRank,
      state: 'running',
      kvTokens: 0,
      cachedTokens: 0,
      waiters: new Set(),
      at: Date.now(),
    };
    this.rooms.set(room, s);
    const waiting = this.pending.get(room);
    if (!waiting) return;
    this.pending.delete(room);
    for (const w of waiting) {
      s.waiters.add(w);
      w();
    }
  }

  ready(room: string, kvTokens: number, cachedTokens = 0): void {
    this.settle(room, (s) => {
      s.state = 'ready';
      s.kvTokens = kvTokens;
      s.cachedTokens = cachedTokens;
    });
  }

  fail(room: string, reason: string): void {
    this.settle(room, (s) => {
      if (s.state !== 'running') return;
      s.state = 'failed';
      s.reason = reason;
    });
  }

  private settle(room: string, change: (s: RoomState) => void): void {
    const s = this.rooms.get(room);
    if (!s) return;
    change(s);
    s.at = Date.now();
    for (const w of [...s.waiters]) w();
  }

  private expire(): void {
    const cut = Date.now() - ROOM_TTL_MS;
    for (const [k, s] of this.rooms) if (s.at < cut && s.waiters.size === 0) this.rooms.delete(k);
    for (const [k, r] of this.registered) if (r.at < cut) this.registered.delete(k);
  }
}
