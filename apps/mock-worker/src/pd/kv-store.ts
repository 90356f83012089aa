// A KV store the mock PD workers share, standing in for SGLang's HiCache storage backend
// (Mooncake store, 3FS, a file directory) in a PD deployment that keeps multi-turn prefixes:
//   - prefill servers (--enable-hierarchical-cache --hicache-storage-backend ...) write every
//     prompt they computed through to it and, on a miss in their GPU cache, load from it what
//     it holds;
//   - decode servers (--disaggregation-decode-enable-offload-kvcache) write the tokens they
//     generated to it, chained after the prompt, so the next turn's prefill finds the previous
//     reply, which a prefill server never computes.
// The store holds token paths in the simulator's RadixCache (least recently used leaves evicted
// at its capacity), which is the same model the simulator's PD layout uses for `--kv-store-gbps
// --decode-offload`. It moves no KV bytes: a prefill worker charges the load at its own
// --kv-store-gbps (the store's time is the loading rank's time, as in the simulator).
//
// HTTP, JSON bodies, loopback by default:
//   POST /match {"input_ids":[...]}  -> {"matched_tokens": n}   longest stored prefix
//   POST /write {"input_ids":[...]}  -> {"new_tokens": n, "used_tokens": u}
//   GET  /stats                      -> counters
//   POST /flush_cache                -> empties it
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { RadixCache, writeBack } from '@kvroute/sim/model';

export interface KvStoreOptions {
  host?: string;
  /** 0: any free port. */
  port?: number;
  /** Tokens the store holds before evicting (default: unbounded). */
  capacityTokens?: number;
  /** Radix page size in tokens (default 1, as the workers' default). */
  pageSize?: number;
}

export interface KvStoreStats {
  used_tokens: number;
  capacity_tokens: number | null;
  matches: number;
  matched_tokens: number;
  writes: number;
  written_tokens: number;
}

export interface RunningKvStore {
  url: string;
  server: Server;
  stats(): KvStoreStats;
  close(): Promise<void>;
}

/** Largest body the store reads: 8 M token ids as JSON, far above any context. */
const MAX_BODY_BYTES = 64 * 1024 * 1024;

class StoreRequestError extends Error {}

/** `{"input_ids":[...]}` with non-negative integer ids below 2^32, else a StoreRequestError. */
export function parseInputIds(text: string): Uint32Array {
  let body: unknown;
  try {
    body = JSON.parse(text);
  } catch {
    throw new StoreRequestError('body must be JSON like {"input_ids":[1,2,3]}');
  }
  const ids = (body as { input_ids?: unknown } | null)?.input_ids;
  if (!Array.isArray(ids)) {
    throw new StoreRequestError("'input_ids' must be an array of token ids");
  }
  const out = new Uint32Array(ids.length);
  for (let i = 0; i < ids.length; i++) {
    const v = ids[i];
    if (typeof v !== 'number' || !Number.isInteger(v) || v < 0 || v > 0xffff_ffff) {
      throw new StoreRequestError(
        `'input_ids[${i}]' must be an integer token id in [0, 2^32), got ${JSON.stringify(v)}`,
      );
    }
    out[i] = v;
  }
  return out;
}

export async function startKvStore(opts: KvStoreOptions = {}): Promise<RunningKvStore> {
  const capacity = opts.capacityTokens;
  if (capacity !== undefined && (!Number.isInteger(capacity) || capacity < 1)) {
    throw new RangeError(`KV store capacity must be an integer >= 1 tokens, got ${capacity}`);
  }
  const pageSize = opts.pageSize ?? 1;
  if (!Number.isInteger(pageSize) || pageSize < 1) {
    throw new RangeError(`KV store page size must be an integer >= 1, got ${pageSize}`);
  }
  const cache = new RadixCache({
    capacityTokens: capacity ?? Number.MAX_SAFE_INTEGER,
    pageSize,
  });
  const counters = { matches: 0, matched_tokens: 0, writes: 0, written_tokens: 0 };
  const stats = (): KvStoreStats => ({
    used_tokens: cache.used,
    capacity_tokens: capacity ?? null,
    ...counters,
  });

  const send = (res: ServerResponse, status: number, body: unknown): void => {
    const text = JSON.stringify(body);
    res.writeHead(status, {
      'content-type': 'application/json',
      'content-length': Buffer.byteLength(text),
    });
    res.end(text);
  };

  const readBody = (req: IncomingMessage): Promise<string> =>
    new Promise((resolve, reject) => {
      const chunks: Buffer[] = [];
      let size = 0;
      req.on('data', (c: Buffer) => {
        size += c.length;
        if (size > MAX_BODY_BYTES) {
          reject(new StoreRequestError(`body over ${MAX_BODY_BYTES} bytes`));
          req.destroy();
          return;
        }
        chunks.push(c);
      });
      req.on('end', () => resolve(Buffer.concat(chunks).toString('utf8')));
      req.on('error', reject);
    });

  const server = createServer((req, res) => {
    const path = (req.url ?? '/').split('?')[0];
    const route = `${req.method} ${path}`;
    if (route === 'GET /stats') {
      send(res, 200, stats());
      return;
    }
    if (route === 'POST /flush_cache') {
      cache.reset();
      send(res, 200, { ok: true });
      return;
    }
    if (route !== 'POST /match' && route !== 'POST /write') {
      send(res, 404, {
        error: `no route ${route}: the KV store serves POST /match, POST /write, GET /stats, POST /flush_cache`,
      });
      return;
    }
    readBody(req)
      .then((text) => {
        const ids = parseInputIds(text);
        if (route === 'POST /match') {
          const { matchedTokens } = cache.match(ids);
          counters.matches++;
          counters.matched_tokens += matchedTokens;
          send(res, 200, { matched_tokens: matchedTokens });
          return;
        }
        const before = cache.used;
        writeBack(cache, ids);
        counters.writes++;
        const added = Math.max(0, cache.used - before);
        counters.written_tokens += added;
        send(res, 200, { new_tokens: added, used_tokens: cache.used });
      })
      .catch((err: unknown) => {
        if (res.headersSent) return;
        if (err instanceof StoreRequestError) send(res, 400, { error: err.message });
        else send(res, 500, { error: (err as Error).message });
      });
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(opts.port ?? 0, opts.host ?? '127.0.0.1', () => resolve());
  });
  const addr = server.address() as AddressInfo;
  const host = addr.family === 'IPv6' ? `[${addr.address}]` : addr.address;
  return {
    url: `http://${host}:${addr.port}`,
    server,
    stats,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

/** A worker's client of the store; every call fails with a message naming the store. */
export class KvStoreClient {
  constructor(readonly url: string) {}

  async match(ids: ArrayLike<number>, signal?: AbortSignal): Promise<number> {
    const body = (await this.post('/match', ids, signal)) as { matched_tokens?: unknown };
    const n = body.matched_tokens;
    if (typeof n !== 'number' || !Number.isInteger(n) || n < 0) {
      throw new Error(`KV store ${this.url}: /match answered ${JSON.stringify(body)}`);
    }
    return n;
  }

  async write(ids: ArrayLike<number>): Promise<void> {
    await this.post('/write', ids);
  }

  private async post(path: string, ids: ArrayLike<number>, signal?: AbortSignal) {
    let res: Response;
    let text: string;
    try {
      res = await fetch(`${this.url}${path}`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: `{"input_ids":[${Array.prototype.join.call(ids, ',')}]}`,
        signal: signal
          ? AbortSignal.any([signal, AbortSignal.timeout(10_000)])
          : AbortSignal.timeout(10_000),
      });
      text = await res.text();
    } catch (err) {
      const e = err as Error & { cause?: Error };
      throw new Error(
        `KV store ${this.url}${path}: ${e.message}${e.cause ? ` (${e.cause.message})` : ''}`,
      );
    }
    if (res.status !== 200) {
      throw new Error(`KV store ${this.url}${path}: ${res.status} ${text}`);
    }
    return JSON.parse(text) as unknown;
  }
}
