// Prefill and decode roles of the mock worker (--role prefill|decode), for the two ways a
// router pairs them:
//   SGLang: the router sends the same request to both servers at once, with bootstrap_host,
//     bootstrap_port (the prefill server's bootstrap server) and a random 63-bit
//     bootstrap_room. The prefill server prefills the prompt on one DP rank; the decode server
//     finds that rank, receives the KV, and generates. How the decode side finds the prefill DP
//     rank follows SGLang's decode (DecodePreallocQueue._resolve_prefill_dp_rank), in order:
//       1. disagg_prefill_dp_rank in the request (the router says which rank it pinned);
//       2. the prefill server has dp_size 1: rank 0;
//       3. the prefill server dispatches by follow_bootstrap_room: bootstrap_room % dp_size;
//       4. otherwise ask its bootstrap server (POST /query_dp_ranks) until the prefill side
//          has registered the room's rank (it registers every room, whatever its dispatch).
//   vLLM (disaggregated-serving proxy, NIXL connector): the router first sends the prefill
//     server the request with max_tokens 1 and kv_transfer_params {do_remote_decode: true};
//     the answer carries kv_transfer_params naming where the KV is (remote_host/port,
//     remote_engine_id, remote_block_ids, remote_request_id); the router then sends the decode
//     server the request with those kv_transfer_params, and it pulls the KV before decoding.
// The decode side waits for the KV transfer (kv-transfer.ts: bytes of the whole prompt over
// --kv-transfer-gbps) before its first token, and records which prefill DP rank it pulled
// from, so tests can check both sides agree. Bad or missing bootstrap data is a 400 naming the
// field; a transfer that cannot happen (prefill gone, wrong rank, aborted) is a 5xx, which a
// router treats as a retryable failure of the pair.
import { randomUUID } from 'node:crypto';
import {
  badRequest,
  type ParsedRequest,
  ProtocolError,
  type RoutingHints,
  topLevelSpans,
} from '@kvroute/protocol';
import type { MockEngine } from '../engine.ts';
import type { Generation } from '../generation.ts';
import type { ResolvedOptions } from '../options.ts';
import type { BootstrapServer } from './bootstrap.ts';
import { KvStoreClient } from './kv-store.ts';
import { finishedPath, kvTransferMs, profileKvBytesPerToken, writeBack } from './kv-transfer.ts';

export type PdRole = 'prefill' | 'decode';

/** What one decode recorded about its transfer (GET /pd/transfers, and tests). */
export interface TransferRecord {
  style: 'sglang' | 'vllm';
  room: string;
  bootstrapAddr: string;
  /** The prefill DP rank the KV was pulled from, and how the decode side learned it. */
  prefillDpRank: number;
  rankSource: 'told' | 'dp-size-1' | 'follow-bootstrap-room' | 'bootstrap-query' | 'kv-params';
  decodeDpRank: number;
  kvTokens: number;
  /** Model ms of the transfer itself, and wall ms from arrival until the KV was in. */
  transferMs: number;
  waitMs: number;
  /**
   * performance.now() of this process when the request arrived and when its first output token
   * was produced: the decode side's own TTFT is their difference (comparable with a router's
   * clock only in one process, as in the e2e tests).
   */
  arrivalAt: number;
  firstTokenAt?: number;
}

/** What the inference route does differently for a PD request. */
export interface PdPlan {
  routedRank?: number;
  /** The prefill side generates one token whatever the request asked for. */
  maxTokens?: number;
  /** Copied into a non-streaming answer (vLLM's kv_transfer_params). */
  extraBody?: Record<string, unknown>;
  headers: Record<string, string>;
  /**
   * Awaited before the generation starts (prefill role with a KV store): learns what the
   * store holds of the prompt, so the rank loads it instead of computing it.
   */
  prefetch?(inputIds: Uint32Array, signal: AbortSignal): Promise<void>;
  /** Called right before the generation starts: the decode side lands the transferred KV. */
  beforeStart?(rank: number, inputIds: Uint32Array): void;
  /** The first output token was produced (the decode side stamps its record). */
  firstToken?(): void;
  /**
   * The cached_tokens the answer reports instead of this rank's own count: SGLang's decode
   * reports the prefill's prefix-cache hit (passed with the KV), not the transferred prompt it
   * finds in its own pool. Unset for vLLM's decode, which reports that pool hit (the whole
   * prompt, as vLLM's NIXL decode does).
   */
  reportCachedTokens?: number;
  /** Called right after the generation starts (synchronously): the prefill side registers. */
  started(
    gen: Generation,
    outcome: {
      readonly promptTokens: number;
      readonly cachedTokens: number;
      readonly finished: boolean;
      readonly completionTokens: number;
      readonly outputIds: readonly number[];
    },
  ): void;
}

/** 400 in SGLang's words for a request sent to a PD server without bootstrap data. */
function missingBootstrap(role: PdRole, what: string): Error {
  return badRequest(
    `req.${what} should not be None. Do not send requests directly to prefill or decode instances; send to the router instead. (this worker runs --role ${role}: it needs bootstrap_host, bootstrap_port and bootstrap_room as SGLang's router adds them, or vLLM's kv_transfer_params)`,
    { param: what, code: 'missing_bootstrap' },
  );
}

/** A transfer that cannot happen: 500 in OpenAI's shape, so a router retries the pair. */
export class TransferError extends ProtocolError {
  constructor(message: string) {
    super(500, message, { code: 'kv_transfer_failed' });
  }
}

interface PrefillInfo {
  dp_size: number;
  follow_bootstrap_room: boolean;
}

export interface PdDeps {
  opts: ResolvedOptions;
  engine: MockEngine;
  bootstrap: BootstrapServer | undefined;
  transfers: TransferRecord[];
}

/** The 63-bit room as decimal text, read from the raw body (JSON numbers lose its low bits). */
function roomText(raw: string): string | undefined {
  const buf = Buffer.from(raw);
  const spans = topLevelSpans(buf, 'bootstrap_room');
  const span = spans[0];
  if (!span) return undefined;
  const m = /"bootstrap_room"\s*:\s*("?)(-?\d+)\1/.exec(buf.subarray(span[0], span[1]).toString());
  if (!m) return 'invalid';
  return BigInt(m[2] as string).toString();
}

/** fetch() hides the socket error under `cause`. */
function causeOf(err: unknown): string {
  const e = err as Error & { cause?: Error };
  return e.cause?.message ? `${e.message} (${e.cause.message})` : e.message;
}

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

export function createPdRoles(deps: PdDeps) {
  const { opts, engine, bootstrap, transfers } = deps;
  const role = opts.role as PdRole;
  const infoCache = new Map<string, PrefillInfo>();
  const kvBytes = profileKvBytesPerToken(engine.profile);
  const store = opts.kvStore !== undefined ? new KvStoreClient(opts.kvStore) : null;
  let lastStoreWarning = Number.NEGATIVE_INFINITY;
  let storeErrors = 0;

  /** A store that fails is a miss (as a HiCache storage backend's error is), said every 5 s. */
  function storeFailed(err: unknown): void {
    storeErrors++;
    const now = performance.now();
    if (now - lastStoreWarning < 5_000) return;
    lastStoreWarning = now;
    console.warn(
      `mock worker (--role ${role}): ${(err as Error).message} (${storeErrors} store errors so far)`,
    );
  }

  /**
   * The prefill side of a shared KV store (SGLang HiCache with a storage backend): before the
   * prefill, what the store holds of the prompt joins the ranks' host tier (loaded at
   * --kv-store-gbps, counted as cached); after it, the prompt is written through to the store.
   * Changes the plan in place (the vLLM plan sets its own extraBody when it starts).
   */
  function withStorePrefill(plan: PdPlan): PdPlan {
    const view = engine.storeView;
    if (store === null || view === null) return plan;
    let prompt: Uint32Array | undefined;
    plan.prefetch = async (inputIds, signal) => {
      prompt = inputIds;
      let held: number;
      try {
        held = await store.match(inputIds, signal);
      } catch (err) {
        if (!signal.aborted) storeFailed(err);
        return;
      }
      if (held > view.match(inputIds).matchedTokens) writeBack(view, inputIds.subarray(0, held));
    };
    const started = plan.started;
    plan.started = (gen, outcome) => {
      started.call(plan, gen, outcome);
      void gen.done.then(() => {
        if (!outcome.finished || prompt === undefined) return;
        writeBack(view, prompt);
        store.write(prompt).catch(storeFailed);
      });
    };
    return plan;
  }

  function intField(body: Record<string, unknown>, key: string): number | undefined {
    const v = body[key];
    if (v === undefined || v === null) return undefined;
    if (typeof v !== 'number' || !Number.isInteger(v) || v < 0) {
      throw badRequest(`'${key}' must be a non-negative integer, got ${JSON.stringify(v)}`, {
        param: key,
        code: 'invalid_value',
      });
    }
    return v;
  }

  function checkRank(rank: number, param: string): number {
    if (rank >= opts.dpSize) {
      throw badRequest(
        `${param} ${rank} is out of range: this worker has dp_size ${opts.dpSize} (valid 0..${opts.dpSize - 1})`,
        { param, code: 'invalid_value' },
      );
    }
    return rank;
  }

  /** The least loaded DP rank (the decode side's own choice when the router named none). */
  function leastLoaded(): number {
    let best = 0;
    let bestLoad = Number.POSITIVE_INFINITY;
    for (const r of engine.tracker.ranks) {
      if (r.inFlightTokens < bestLoad) {
        bestLoad = r.inFlightTokens;
        best = r.rank;
      }
    }
    return best;
  }

  async function prefillInfo(addr: string, signal: AbortSignal): Promise<PrefillInfo> {
    const cached = infoCache.get(addr);
    if (cached) return cached;
    let res: Response;
    let text: string;
    try {
      res = await fetch(
        `http://${addr}/route?prefill_dp_rank=-1&prefill_cp_rank=-1&target_tp_rank=-1&target_pp_rank=-1`,
        { signal: AbortSignal.any([signal, AbortSignal.timeout(5_000)]) },
      );
      text = await res.text();
    } catch (err) {
      throw new TransferError(
        `Error fetching prefill parallel info from bootstrap ${addr}: ${causeOf(err)}`,
      );
    }
    if (res.status !== 200) {
      throw new TransferError(
        `Failed to get prefill server info from bootstrap ${addr}: ${res.status}, ${text}`,
      );
    }
    const info = JSON.parse(text) as PrefillInfo;
    infoCache.set(addr, info);
    return info;
  }

  async function queryDpRank(addr: string, room: string, signal: AbortSignal): Promise<number> {
    const deadline = performance.now() + opts.bootstrapTimeoutMs;
    for (let i = 0; ; i++) {
      let got: Record<string, number>;
      try {
        const res = await fetch(`http://${addr}/query_dp_ranks`, {
          method: 'POST',
          body: `{"bootstrap_rooms":[${room}]}`,
          headers: { 'content-type': 'application/json' },
          signal,
        });
        got = (await res.json()) as Record<string, number>;
      } catch (err) {
        throw new TransferError(`Error querying dp_ranks from bootstrap ${addr}: ${causeOf(err)}`);
      }
      const rank = got[room];
      if (typeof rank === 'number') return rank;
      if (performance.now() > deadline) {
        throw new TransferError(
          `KVTransferError(bootstrap_room=${room}): the prefill server registered no DP rank for this room within ${opts.bootstrapTimeoutMs} ms`,
        );
      }
      await sleep(Math.min(20, 1 + i));
    }
  }

  /** Long-polls the prefill side until the room's KV is there, then waits the transfer. */
  async function pullKv(
    addr: string,
    room: string,
    prefillDpRank: number | undefined,
    signal: AbortSignal,
  ): Promise<{
    kvTokens: number;
    cachedTokens: number;
    prefillDpRank: number;
    transferMs: number;
  }> {
    const q = prefillDpRank === undefined ? '' : `prefill_dp_rank=${prefillDpRank}&`;
    let res: Response;
    let body: {
      kv_tokens?: number;
      cached_tokens?: number;
      prefill_dp_rank?: number;
      error?: string;
    };
    try {
      res = await fetch(`http://${addr}/kv/${room}?${q}timeout_ms=${opts.bootstrapTimeoutMs}`, {
        signal,
      });
      body = (await res.json()) as typeof body;
    } catch (err) {
      throw new TransferError(
        `KVTransferError(bootstrap_room=${room}): lost the prefill server at ${addr}: ${causeOf(err)}`,
      );
    }
    if (res.status !== 200) {
      throw new TransferError(
        body.error ?? `KVTransferError(bootstrap_room=${room}): ${res.status}`,
      );
    }
    const kvTokens = body.kv_tokens ?? 0;
    const transferMs = kvTransferMs(kvTokens, kvBytes, {
      gbps: opts.kvTransferGbps,
      setupMs: opts.kvTransferSetupMs,
    });
    const wall = transferMs * opts.timeScale;
    if (wall >= 1) await sleep(wall);
    return {
      kvTokens,
      cachedTokens: body.cached_tokens ?? 0,
      prefillDpRank: body.prefill_dp_rank ?? 0,
      transferMs,
    };
  }

  /**
   * The PD part of one request: validates the bootstrap data, and on the decode side waits
   * for the KV. `signal` aborts when the client (the router) goes away.
   */
  async function prepare(
    parsed: ParsedRequest,
    raw: string,
    hints: RoutingHints,
    prompts: number,
    signal: AbortSignal,
  ): Promise<PdPlan> {
    const arrival = performance.now();
    if (prompts !== 1) {
      throw badRequest(
        `the mock worker's --role ${role} serves one prompt per request, got ${prompts}`,
        {
          code: 'invalid_value',
        },
      );
    }
    const body = parsed.body;
    const kvParams = body.kv_transfer_params;
    const routed =
      hints.routedRank !== undefined ? checkRank(hints.routedRank, 'routed_dp_rank') : undefined;
    if (kvParams !== undefined && kvParams !== null) {
      if (typeof kvParams !== 'object' || Array.isArray(kvParams)) {
        throw badRequest(
          `'kv_transfer_params' must be an object, got ${JSON.stringify(kvParams)}`,
          {
            param: 'kv_transfer_params',
            code: 'invalid_type',
          },
        );
      }
      return role === 'prefill'
        ? vllmPrefill(kvParams as Record<string, unknown>, routed)
        : vllmDecode(kvParams as Record<string, unknown>, routed, arrival, signal);
    }
    const room = roomText(raw);
    if (room === undefined) throw missingBootstrap(role, 'bootstrap_room');
    if (room === 'invalid' || BigInt(room) < 0n) {
      throw badRequest(`'bootstrap_room' must be a non-negative integer`, {
        param: 'bootstrap_room',
        code: 'invalid_value',
      });
    }
    const host = body.bootstrap_host;
    if (host === undefined || host === null) throw missingBootstrap(role, 'bootstrap_host');
    if (typeof host !== 'string' || host === '') {
      throw badRequest(`'bootstrap_host' must be a host name, got ${JSON.stringify(host)}`, {
        param: 'bootstrap_host',
        code: 'invalid_value',
      });
    }
    const port = intField(body, 'bootstrap_port');
    if (role === 'prefill') {
      if (!bootstrap) throw new Error('prefill role without a bootstrap server');
      // A prefill server that is not the bootstrap_port named is being sent someone else's room.
      if (port !== undefined && port !== bootstrap.port) {
        throw badRequest(
          `bootstrap_port ${port} is not this prefill server's bootstrap port (${bootstrap.port}): the decode side would wait on a server that never gets the KV`,
          { param: 'bootstrap_port', code: 'invalid_value' },
        );
      }
      // SGLang's prefill dispatch: an explicit rank first, then bootstrap_room % dp_size when
      // it dispatches by room, else its own load balance method.
      const rank =
        routed ??
        (opts.loadBalanceMethod === 'follow_bootstrap_room'
          ? Number(BigInt(room) % BigInt(opts.dpSize))
          : undefined);
      return withStorePrefill({
        ...(rank !== undefined ? { routedRank: rank } : {}),
        maxTokens: 1,
        headers: { 'x-kvroute-bootstrap-room': room },
        started(gen, outcome) {
          bootstrap.begin(room, gen.handle.rank);
          void gen.done.then(() => {
            if (outcome.finished) {
              bootstrap.ready(room, outcome.promptTokens, outcome.cachedTokens);
            } else bootstrap.fail(room, 'prefill aborted');
          });
        },
      });
    }
    if (port === undefined) throw missingBootstrap(role, 'bootstrap_port');
    const addr = `${host.includes(':') ? `[${host}]` : host}:${port}`;
    const told = intField(body, 'disagg_prefill_dp_rank');
    let prefillDpRank: number;
    let rankSource: TransferRecord['rankSource'];
    const info = await prefillInfo(addr, signal);
    if (told !== undefined) {
      if (told >= info.dp_size) {
        throw badRequest(
          `disagg_prefill_dp_rank ${told} is out of range: the prefill server at bootstrap ${addr} has dp_size ${info.dp_size}`,
          { param: 'disagg_prefill_dp_rank', code: 'invalid_value' },
        );
      }
      prefillDpRank = told;
      rankSource = 'told';
    } else if (info.dp_size === 1) {
      prefillDpRank = 0;
      rankSource = 'dp-size-1';
    } else if (info.follow_bootstrap_room) {
      prefillDpRank = Number(BigInt(room) % BigInt(info.dp_size));
      rankSource = 'follow-bootstrap-room';
    } else {
      prefillDpRank = await queryDpRank(addr, room, signal);
      rankSource = 'bootstrap-query';
    }
    const kv = await pullKv(addr, room, prefillDpRank, signal);
    const decodeDpRank = routed ?? leastLoaded();
    transfers.push({
      style: 'sglang',
      room,
      bootstrapAddr: addr,
      prefillDpRank,
      rankSource,
      decodeDpRank,
      kvTokens: kv.kvTokens,
      transferMs: kv.transferMs,
      waitMs: performance.now() - arrival,
      arrivalAt: arrival,
    });
    trim();
    return decodePlan(
      decodeDpRank,
      prefillDpRank,
      kv.transferMs,
      performance.now() - arrival,
      kv.cachedTokens,
    );
  }

  function trim(): void {
    if (transfers.length > 100_000) transfers.splice(0, transfers.length - 50_000);
  }

  /** `reportCachedTokens`: SGLang's decode reports the prefill's count (PdPlan); vLLM's none. */
  function decodePlan(
    rank: number,
    prefillDpRank: number,
    transferMs: number,
    waitMs: number,
    reportCachedTokens?: number,
  ): PdPlan {
    const record = transfers[transfers.length - 1];
    let prompt: Uint32Array | undefined;
    return {
      reportCachedTokens,
      firstToken() {
        if (record) record.firstTokenAt = performance.now();
      },
      routedRank: rank,
      headers: {
        'x-kvroute-prefill-dp-rank': String(prefillDpRank),
        'x-kvroute-kv-transfer-ms': transferMs.toFixed(3),
        'x-kvroute-kv-wait-ms': waitMs.toFixed(3),
      },
      beforeStart(r, inputIds) {
        prompt = inputIds;
        // The transferred KV lands in this rank's pool (evictable once the request is done), so
        // its own prefill finds the whole prompt cached and computes no more than a page.
        engine.ranks[r]?.cache.insert(inputIds);
      },
      started(gen, outcome) {
        if (store === null || !opts.decodeOffload) return;
        // SGLang's decode offload: the finished request's prompt + reply (minus the last
        // sampled token, whose KV was never computed) goes to the store, after the prompt's
        // pages, so the next turn's prefill loads the reply instead of computing it.
        void gen.done.then(() => {
          if (!outcome.finished || prompt === undefined) return;
          const path = finishedPath(prompt, outcome.outputIds, outcome.completionTokens) ?? prompt;
          store.write(path).catch(storeFailed);
        });
      },
    };
  }

  function vllmPrefill(params: Record<string, unknown>, routed: number | undefined): PdPlan {
    if (params.do_remote_decode !== true) {
      throw badRequest(
        `this worker runs --role prefill: kv_transfer_params must ask for remote decode ({"do_remote_decode": true}), got ${JSON.stringify(params)}`,
        { param: 'kv_transfer_params', code: 'invalid_value' },
      );
    }
    if (!bootstrap) throw new Error('prefill role without a bootstrap server');
    const requestId = BigInt.asUintN(
      63,
      BigInt(`0x${randomUUID().replaceAll('-', '').slice(0, 16)}`),
    ).toString();
    const plan: PdPlan = {
      ...(routed !== undefined ? { routedRank: routed } : {}),
      maxTokens: 1,
      headers: {},
      started(gen, outcome) {
        const promptTokens = outcome.promptTokens;
        bootstrap.begin(requestId, gen.handle.rank);
        plan.extraBody = {
          kv_transfer_params: {
            do_remote_prefill: true,
            do_remote_decode: false,
            remote_engine_id: bootstrap.engineId,
            remote_block_ids: Array.from({ length: Math.ceil(promptTokens / 16) }, (_, i) => i),
            remote_host: '127.0.0.1',
            remote_port: bootstrap.port,
            remote_request_id: requestId,
            remote_dp_rank: gen.handle.rank,
            tp_size: 1,
          },
        };
        void gen.done.then(() => {
          if (outcome.finished) bootstrap.ready(requestId, promptTokens);
          else bootstrap.fail(requestId, 'prefill aborted');
        });
      },
    };
    return withStorePrefill(plan);
  }

  async function vllmDecode(
    params: Record<string, unknown>,
    routed: number | undefined,
    arrival: number,
    signal: AbortSignal,
  ): Promise<PdPlan> {
    if (params.do_remote_prefill !== true) {
      throw badRequest(
        `this worker runs --role decode: kv_transfer_params must come from the prefill server's answer ({"do_remote_prefill": true, "remote_host", "remote_port", ...}), got ${JSON.stringify(params)}`,
        { param: 'kv_transfer_params', code: 'invalid_value' },
      );
    }
    const host = params.remote_host;
    const port = params.remote_port;
    const id = params.remote_request_id;
    if (
      typeof host !== 'string' ||
      !Number.isInteger(port) ||
      (typeof id !== 'string' && typeof id !== 'number')
    ) {
      throw badRequest(
        `kv_transfer_params needs remote_host, remote_port and remote_request_id from the prefill server's answer, got ${JSON.stringify(params)}`,
        { param: 'kv_transfer_params', code: 'invalid_value' },
      );
    }
    const addr = `${host.includes(':') ? `[${host}]` : host}:${port}`;
    const want = typeof params.remote_dp_rank === 'number' ? params.remote_dp_rank : undefined;
    const kv = await pullKv(addr, String(id), want, signal);
    const decodeDpRank = routed ?? leastLoaded();
    transfers.push({
      style: 'vllm',
      room: String(id),
      bootstrapAddr: addr,
      prefillDpRank: kv.prefillDpRank,
      rankSource: 'kv-params',
      decodeDpRank,
      kvTokens: kv.kvTokens,
      transferMs: kv.transferMs,
      waitMs: performance.now() - arrival,
      arrivalAt: arrival,
    });
    trim();
    return decodePlan(decodeDpRank, kv.prefillDpRank, kv.transferMs, performance.now() - arrival);
  }

  return { prepare };
}
