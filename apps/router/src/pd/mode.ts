// The router's prefill/decode disaggregation mode (--pd-disaggregation). The prefill servers
// are the router's main rank table, chosen by the main (cache-aware) method: prefix caches
// live there. The decode servers get their own rank table, load method, health checks and
// outlier ejection: their KV arrives with the request, so only load matters.
//
// Two ways to drive a pair (--pd-style):
//   sglang  both requests leave at once, each with bootstrap_host (the prefill server's host),
//           bootstrap_port (its bootstrap server) and one random 63-bit bootstrap_room; the
//           decode server's answer is streamed back, the prefill's read for its usage. With
//           --dp-aware the prefill rank the method chose is pinned with routed_dp_rank, the
//           decode rank too, and the decode server learns the prefill DP rank either from
//           disagg_prefill_dp_rank (--pd-rank-discovery told) or from the prefill bootstrap
//           server's rank registry (bootstrap: it asks /query_dp_ranks, since the prefill
//           server registers every room's rank).
//   vllm    vLLM's disaggregated-serving proxy: the prefill server gets the request with
//           max_tokens 1, stream false and kv_transfer_params {do_remote_decode: true}; its
//           answer's kv_transfer_params go into the decode request, whose answer is streamed.
//
// Failures: while the client has seen nothing, a failure on either side aborts the other and
// the pair is retried (up to --max-retries), without the rank that failed; the side blamed is
// the prefill when its request failed (a decode server that lost its prefill fails too), else
// the decode. Once decode bytes reached the client, a failure ends the answer as the
// colocated proxy does (an error event in a stream); nothing is retried.
import type { IncomingMessage, ServerResponse } from 'node:http';
import { performance } from 'node:perf_hooks';
import {
  createDispatcher,
  type Dispatcher,
  type DispatchTicket,
  NoHealthyRankError,
} from '@kvroute/policy';
import {
  badRequest,
  buildRouteRequest,
  getJson,
  parseJsonBody,
  parseRequest,
  type RequestKind,
  type RequestLimits,
  type RoutingTokenizer,
  UsageScanner,
  usageFromObject,
} from '@kvroute/protocol';
import type { FastifyBaseLogger } from 'fastify';
import type { Registry } from 'prom-client';
import type { Agent } from 'undici';
import type { RouterConfig } from '../config.ts';
import { RouterError } from '../errors.ts';
import { HealthMonitor } from '../health.ts';
import { OutlierDetector } from '../outlier.ts';
import {
  type AttemptFailure,
  classifyNetworkError,
  clientSafe,
  ForwardCall,
  type ForwardResult,
  type OutboundHeaderPolicy,
  upstreamRequestHeaders,
} from '../proxy/forward.ts';
import { OutstandingBy } from '../proxy/outstanding.ts';
import { RankTable, type Worker } from '../rank-table.ts';
import { boundedOutputTokens, firstByteTimeoutMs } from '../timeouts.ts';
import { addWorker } from '../topology.ts';
import { type Members, newBootstrapRoom, withMembers } from './body.ts';
import { createPdMetrics, type PdMetrics } from './metrics.ts';

export interface PdDeps {
  config: RouterConfig;
  /** The router's main table and method: the prefill side (the method may be switched live). */
  prefillTable: RankTable;
  prefillDispatcher: () => Dispatcher;
  prefillHealth: HealthMonitor;
  prefillOutlier: OutlierDetector;
  agent: Agent;
  registry: Registry;
  log: FastifyBaseLogger;
  tokenizer: RoutingTokenizer;
  limits(): RequestLimits;
  /**
   * Counts a pair's answer to the client in the router's request counter (rank and reason:
   * the prefill side's, as the answer's x-kvroute-rank says), so request rates and error
   * ratios cover this mode too.
   */
  countRequest(route: string, rank: string, reason: string, status: string): void;
}

/** What one pair's attempt came to. */
/** What the request's close listener can do to the pair in flight. */
interface PairControl {
  abort(): void;
  clientGone?(): void;
}

type PairOutcome =
  /** The client has its answer; status as the router's request counter gives it. */
  | { kind: 'done'; status: string }
  | { kind: 'aborted' }
  | { kind: 'retry'; side: 'prefill' | 'decode'; failure: AttemptFailure };

interface PrefillResult {
  ok: boolean;
  status?: number;
  text?: string;
  failure?: AttemptFailure;
  aborted?: boolean;
  endMs: number;
}

export interface PdMode {
  readonly decodeTable: RankTable;
  readonly decodeDispatcher: Dispatcher;
  readonly decodeHealth: HealthMonitor;
  readonly decodeOutlier: OutlierDetector;
  readonly metrics: PdMetrics;
  /** Bootstrap port per prefill URL (given, or read from its /get_server_info). */
  readonly bootstrapPorts: ReadonlyMap<string, number | null>;
  start(): Promise<void>;
  close(): Promise<void>;
  /** Moves attempts on `worker` (either side) that sent the client nothing elsewhere. */
  evacuate(worker: Worker, reason: string): void;
  handle(
    req: IncomingMessage,
    res: ServerResponse,
    kind: RequestKind,
    route: string,
    raw: Buffer,
  ): Promise<void>;
}

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

/** One attempt in flight on a worker, as evacuate() sees it. */
class Tracked {
  registryIndex = -1;
  constructor(
    readonly sent: () => boolean,
    readonly fail: (f: AttemptFailure) => void,
  ) {}
}

export function createPdMode(d: PdDeps): PdMode {
  const { config, prefillTable, agent, log } = d;
  const decodeTable = new RankTable();
  const decodeDispatcher = createDispatcher({ method: config.decodePolicy ?? 'total_tokens' });
  const decodeHealth = new HealthMonitor(decodeTable, agent, config.health, log);
  const decodeOutlier = new OutlierDetector(
    decodeTable,
    config.outlier,
    (w) => decodeHealth.probe(w),
    log,
  );
  if (config.workerApiKey !== undefined) {
    decodeHealth.headers = { authorization: `Bearer ${config.workerApiKey}` };
  }
  const metrics = createPdMetrics(d.registry, () => decodeTable.info());
  const bootstrapPorts = new Map<string, number | null>();
  /** bootstrap_host per prefill worker: its URL's host, parsed once, not per request. */
  const bootstrapHosts = new WeakMap<Worker, string>();
  const bootstrapHost = (w: Worker): string => {
    let h = bootstrapHosts.get(w);
    if (h === undefined) {
      h = new URL(w.url).hostname.replace(/^\[|\]$/g, '');
      bootstrapHosts.set(w, h);
    }
    return h;
  };
  const outbound: OutboundHeaderPolicy = {
    forwardClientAuth: config.forwardClientAuth,
    ...(config.workerApiKey !== undefined ? { workerApiKey: config.workerApiKey } : {}),
  };
  /** Attempts outstanding per worker: prefill aborters and decode calls. */
  const inflight = new OutstandingBy<Worker, Tracked>();
  const track = (w: Worker, sent: () => boolean, fail: (f: AttemptFailure) => void) => {
    const entry = new Tracked(sent, fail);
    inflight.add(w, entry);
    return () => inflight.delete(w, entry);
  };

  function evacuate(worker: Worker, reason: string): void {
    for (const c of inflight.snapshot(worker)) {
      if (!c.sent()) c.fail({ kind: 'worker-down', detail: `worker taken out: ${reason}` });
    }
  }
  decodeHealth.onDown = evacuate;
  decodeOutlier.onEject = evacuate;

  async function start(): Promise<void> {
    const timeoutMs = Math.max(config.health.timeoutMs, 5_000);
    for (const url of config.decode) {
      await addWorker(decodeTable, agent, url, {
        dpAware: config.dpAware,
        ...(config.dpSize !== undefined ? { dpSize: config.dpSize } : {}),
        timeoutMs,
      });
    }
    for (const spec of config.prefillWorkers ?? []) {
      let port: number | null = spec.bootstrapPort ?? null;
      if (port === null && config.pdStyle === 'sglang') {
        // SGLang's router sends bootstrap_port null when none is given; a server that says
        // which port its bootstrap server has saves the operator from repeating it.
        try {
          const info = (await getJson(agent, `${spec.url}/get_server_info`, timeoutMs)) as {
            disaggregation_bootstrap_port?: unknown;
          };
          const p = info?.disaggregation_bootstrap_port;
          if (typeof p === 'number' && Number.isInteger(p) && p > 0) port = p;
        } catch {
          // Left null: the server's own default applies, as with SGLang's router.
        }
      }
      bootstrapPorts.set(spec.url, port);
    }
    await decodeHealth.checkAll();
    decodeHealth.start();
  }

  async function close(): Promise<void> {
    decodeHealth.stop();
    decodeOutlier.stop();
  }

  function begin(
    side: 'prefill' | 'decode',
    req: object,
    excluded: Set<number> | undefined,
  ): DispatchTicket {
    const table = side === 'prefill' ? prefillTable : decodeTable;
    const dispatcher = side === 'prefill' ? d.prefillDispatcher() : decodeDispatcher;
    return dispatcher.begin(req, table.tracker, { nowMs: Date.now(), view: table.view(excluded) });
  }

  /**
   * One prefill request, read to its end; never throws. A bare dispatch handler (as the
   * proxy's ForwardCall): no body stream and no promise per chunk, since the prefill leaves in
   * the same tick as its decode and its setup delays the decode's departure.
   */
  function sendPrefill(
    worker: Worker,
    path: string,
    body: Buffer,
    headers: Record<string, string>,
    timeoutMs: number,
  ): { done: Promise<PrefillResult>; fail(f: AttemptFailure): void; settled(): boolean } {
    let own: AttemptFailure | undefined;
    let settled = false;
    let abortUpstream: ((err?: Error) => void) | undefined;
    let pendingAbort: Error | undefined;
    let status = 0;
    const chunks: Buffer[] = [];
    let resolve!: (r: PrefillResult) => void;
    const done = new Promise<PrefillResult>((r) => {
      resolve = r;
    });
    const settle = (r: PrefillResult): void => {
      if (settled) return;
      settled = true;
      resolve(r);
    };
    agent.dispatch(
      {
        origin: worker.origin,
        path: worker.basePath + path,
        method: 'POST',
        headers,
        body,
        ...(timeoutMs > 0 ? { headersTimeout: timeoutMs, bodyTimeout: timeoutMs } : {}),
      },
      {
        onConnect(abort: (err?: Error) => void): void {
          if (pendingAbort) abort(pendingAbort);
          else abortUpstream = abort;
        },
        onHeaders(statusCode: number): boolean {
          status = statusCode;
          return true;
        },
        onData(chunk: Buffer): boolean {
          chunks.push(chunk);
          return true;
        },
        onComplete(): void {
          const endMs = performance.now();
          const text = Buffer.concat(chunks).toString('utf8');
          if (own) settle({ ok: false, failure: own, endMs });
          else if (status >= 500) {
            settle({
              ok: false,
              status,
              text,
              failure: {
                kind: 'status',
                status,
                detail: `prefill answered ${status}: ${text.slice(0, 300)}`,
              },
              endMs,
            });
          } else settle({ ok: status < 400, status, text, endMs });
        },
        onError(err: Error): void {
          const endMs = performance.now();
          settle({ ok: false, failure: own ?? classifyNetworkError(err), endMs });
        },
      },
    );
    return {
      done,
      fail(f) {
        if (settled) return;
        own ??= f;
        const reason = new Error(f.detail);
        if (abortUpstream) abortUpstream(reason);
        else pendingAbort ??= reason;
      },
      settled: () => settled,
    };
  }

  /** Prefill usage from a JSON answer or the last SSE event that has one. */
  function prefillUsage(text: string): ReturnType<typeof usageFromObject> {
    const t = text.trimStart();
    if (t.startsWith('{') || t.startsWith('[')) {
      try {
        const v = JSON.parse(t) as unknown;
        return usageFromObject(Array.isArray(v) ? v[0] : v);
      } catch {
        return undefined;
      }
    }
    // An event stream: protocol's scanner keeps the last event that reports usage.
    const scanner = new UsageScanner(true);
    scanner.push(Buffer.from(text));
    return scanner.result();
  }

  function notePrefill(rank: number, r: PrefillResult, sentAt: number): void {
    const rankLabel = String(rank);
    metrics.requests.inc({
      role: 'prefill',
      rank: rankLabel,
      status: r.status !== undefined ? String(r.status) : r.aborted ? '499' : 'error',
    });
    if (!r.ok || r.text === undefined) return;
    metrics.ttft.observe({ role: 'prefill' }, (r.endMs - sentAt) / 1e3);
    const u = prefillUsage(r.text);
    if (u?.cachedTokens === undefined) metrics.withoutCached.inc();
    else {
      metrics.promptTokens.inc({ rank: rankLabel }, u.promptTokens);
      metrics.cachedTokens.inc({ rank: rankLabel }, u.cachedTokens);
    }
  }

  async function handle(
    req: IncomingMessage,
    res: ServerResponse,
    kind: RequestKind,
    route: string,
    raw: Buffer,
  ): Promise<void> {
    if (raw.length === 0) {
      throw badRequest('Request body is empty: expected a JSON object', { code: 'invalid_json' });
    }
    const limits = d.limits();
    const body = parseJsonBody(raw, limits);
    const parsed = parseRequest(kind, body, limits);
    if (kind === 'embedding' || kind === 'rerank') {
      throw badRequest(
        `${route} has no decode phase: it is not served in --pd-disaggregation mode`,
        {
          code: 'invalid_value',
        },
      );
    }
    if (parsed.items !== undefined && parsed.items.length > 1) {
      throw badRequest(
        'A batch (several prompts in one request) is not routed in --pd-disaggregation mode: send one request per prompt',
        { code: 'invalid_value' },
      );
    }
    const n = body.n ?? (body.sampling_params as Record<string, unknown> | undefined)?.n;
    if (typeof n === 'number' && n > 1) {
      throw badRequest(
        `n ${n}: several samples of one prompt are not routed in --pd-disaggregation mode (each would need its own bootstrap room): send n 1`,
        { param: 'n', code: 'invalid_value' },
      );
    }
    if (config.pdStyle === 'vllm' && kind !== 'chat' && kind !== 'completion') {
      throw badRequest(
        `--pd-style vllm serves /v1/chat/completions and /v1/completions (vLLM's disaggregated proxy), not ${route}`,
        { code: 'invalid_value' },
      );
    }
    const rr = buildRouteRequest(parsed, d.tokenizer, req.headers);
    if (rr.routedRank !== undefined) {
      throw new RouterError(
        'rank_override_forbidden',
        'An explicit rank (routed_dp_rank / X-Data-Parallel-Rank) is not honoured in --pd-disaggregation mode: the router pins both sides itself',
        'routed_dp_rank',
      );
    }
    const cap = d.prefillDispatcher().maxPromptTokens;
    const promptTokens = rr.inputIds.length;
    if (promptTokens > cap) rr.inputIds = rr.inputIds.subarray(0, cap);
    const policyRequest = { ...rr, promptTokens, maxNewTokens: rr.maxTokens };
    const stream = parsed.stream;
    const firstByteMs = firstByteTimeoutMs(
      config,
      promptTokens,
      boundedOutputTokens(kind, rr, stream, limits.maxOutputTokens),
      stream,
    );
    const prefillMs = firstByteTimeoutMs(config, promptTokens, 1, false);

    // The pair in flight: abort() before the client has a byte; clientGone() at any time (mid
    // stream it ends the decode as client-closed and aborts both upstream requests).
    let current: PairControl | undefined;
    let timedOut = false;
    let clientGone = false;
    const timer = setTimeout(() => {
      timedOut = true;
      current?.abort();
    }, config.requestTimeoutMs);
    const onEarlyClose = (): void => {
      if (res.writableFinished) return;
      if (!res.headersSent) {
        clientGone = true;
        current?.abort();
        return;
      }
      // Left mid-stream: without this the decode call waits for a drain that never comes,
      // holding its admission slot and decode load until the request timeout.
      current?.clientGone?.();
    };
    res.on('close', onEarlyClose);
    let exP: Set<number> | undefined;
    let exD: Set<number> | undefined;
    let last: { side: string; failure: AttemptFailure } | undefined;
    try {
      for (let attempt = 0; ; attempt++) {
        if (clientGone) {
          d.countRequest(route, 'none', 'none', '499');
          return;
        }
        if (timedOut) throw deadline();
        let pt: DispatchTicket;
        let dt: DispatchTicket;
        try {
          pt = begin('prefill', policyRequest, exP);
        } catch (err) {
          if (err instanceof NoHealthyRankError) throw noneLeft('prefill', last, err.message);
          throw err;
        }
        try {
          dt = begin('decode', policyRequest, exD);
        } catch (err) {
          pt.done('aborted');
          if (err instanceof NoHealthyRankError) throw noneLeft('decode', last, err.message);
          throw err;
        }
        const canRetry = () => attempt < config.maxRetries;
        let out: PairOutcome;
        try {
          out = await runPair(pt, dt, canRetry, (a) => {
            current = a;
          });
        } finally {
          current = undefined;
        }
        if (out.kind !== 'retry') {
          // A deadline is counted where it is answered (504), as the colocated proxy does.
          if (out.kind === 'aborted' && timedOut) throw deadline();
          const status = out.kind === 'done' ? out.status : '499';
          d.countRequest(route, String(pt.rank), pt.reason, status);
          return;
        }
        last = { side: out.side, failure: out.failure };
        if (out.side === 'prefill') {
          exP ??= new Set();
          exP.add(pt.rank);
        } else {
          exD ??= new Set();
          exD.add(dt.rank);
        }
        if (!canRetry()) throw noneLeft(out.side, last, undefined);
        metrics.retries.inc({ side: out.side });
        log.warn(
          {
            side: out.side,
            rank: out.side === 'prefill' ? pt.rank : dt.rank,
            failure: out.failure.detail,
          },
          'pd pair failed before the client saw a byte; retrying the pair',
        );
        const wait =
          Math.min(config.retryBackoffMaxMs, config.retryBackoffBaseMs * 2 ** attempt) *
          Math.random();
        if (wait >= 1) await sleep(wait);
      }
    } finally {
      clearTimeout(timer);
      res.off('close', onEarlyClose);
    }

    async function runPair(
      pt: DispatchTicket,
      dt: DispatchTicket,
      attemptLeft: () => boolean,
      setCurrent: (a: PairControl) => void,
    ): Promise<PairOutcome> {
      const pslot = prefillTable.slot(pt.rank);
      const dslot = decodeTable.slot(dt.rank);
      if (!pslot || !dslot) {
        pt.done('failed');
        dt.done('failed');
        throw new RouterError('internal_error', 'policy chose a rank that does not exist');
      }
      const pw = pslot.worker;
      const dw = dslot.worker;
      const hdr = (dp: number | undefined, len: number) =>
        upstreamRequestHeaders(req.headers, len, dp, outbound, req.socket?.remoteAddress);
      // Everything both requests need is built first; then they leave back to back, so the
      // decode request is not held behind the prefill's setup.
      let pBody: Buffer;
      let dBody: Buffer | undefined;
      if (config.pdStyle === 'sglang') {
        const common: Members = {
          bootstrap_host: bootstrapHost(pw),
          bootstrap_port: bootstrapPorts.get(pw.url) ?? null,
          bootstrap_room: newBootstrapRoom(),
        };
        const pMembers: Members = { ...common };
        if (pslot.dpRank !== undefined) pMembers.routed_dp_rank = pslot.dpRank;
        // The prefill answer is never shown to the client: asked for whole (not streamed), it
        // carries the usage with the cached-token count on every API, which the prefill-side
        // hit rate needs (an OpenAI stream reports usage only when the client asked for it).
        if (stream) pMembers.stream = false;
        pBody = withMembers(raw, pMembers, stream ? ['stream_options'] : []);
        const dMembers: Members = common;
        if (dslot.dpRank !== undefined) dMembers.routed_dp_rank = dslot.dpRank;
        if (config.pdRankDiscovery === 'told' && pslot.dpRank !== undefined) {
          dMembers.disagg_prefill_dp_rank = pslot.dpRank;
        }
        dBody = withMembers(raw, dMembers);
      } else {
        // Edited in the client's bytes like the SGLang pair (no parse and re-serialisation).
        const pMembers: Members = {
          kv_transfer_params: {
            do_remote_decode: true,
            do_remote_prefill: false,
            remote_engine_id: null,
            remote_block_ids: null,
            remote_host: null,
            remote_port: null,
          },
          max_tokens: 1,
          stream: false,
        };
        if (body.max_completion_tokens !== undefined) pMembers.max_completion_tokens = 1;
        pBody = withMembers(raw, pMembers, ['stream_options']);
      }
      const pHeaders = hdr(pslot.dpRank, pBody.length);
      let prefillFailed: AttemptFailure | undefined;
      let dSent = 0;
      const decodeCall = (dBody: Buffer) =>
        new ForwardCall({
          agent,
          origin: dw.origin,
          path: dw.basePath + route,
          headers: hdr(dslot.dpRank, dBody.length),
          body: dBody,
          kind,
          res,
          extraHeaders: {
            'x-kvroute-rank': String(pt.rank),
            'x-kvroute-reason': pt.reason,
            'x-kvroute-decode-rank': String(dt.rank),
          },
          firstByteTimeoutMs: firstByteMs,
          idleTimeoutMs: config.idleTimeoutMs,
          maxHeldBytes: config.maxHeldResponseBytes,
          decide: (status) => (status >= 500 && attemptLeft() ? 'discard' : 'pipe'),
          onFirstByte: () => {
            const now = performance.now();
            metrics.ttft.observe({ role: 'decode' }, (now - dSent) / 1e3);
            if (stream && prefill.settled()) {
              void prefillDone.then((r) => {
                if (r.ok) metrics.transferWait.observe(Math.max(0, now - r.endMs) / 1e3);
              });
            }
          },
        });
      // SGLang style: the decode call exists before the prefill leaves, and starts right after.
      let call = dBody !== undefined ? decodeCall(dBody) : undefined;
      const pSent = performance.now();
      const prefill = sendPrefill(pw, route, pBody, pHeaders, prefillMs);
      let started: Promise<ForwardResult> | undefined;
      if (call) {
        dSent = performance.now();
        started = call.start();
      }
      const untrackP = track(
        pw,
        () => false,
        (f) => prefill.fail(f),
      );
      const prefillDone = prefill.done.then((r) => {
        untrackP();
        pt.done(r.ok ? 'completed' : r.aborted ? 'aborted' : 'failed');
        notePrefill(pt.rank, r, pSent);
        if (r.failure) {
          if (r.failure.kind === 'connect')
            d.prefillHealth.reportConnectError(pw, r.failure.detail);
          if (r.failure.kind !== 'worker-down') d.prefillOutlier.failure(pw, r.failure.detail);
        } else if (r.ok) {
          d.prefillOutlier.success(pw);
          d.prefillHealth.reportSuccess(pw);
        }
        return r;
      });

      if (!call) {
        // vLLM style: the decode request needs what the prefill answered.
        setCurrent({ abort: () => prefill.fail({ kind: 'socket', detail: 'request aborted' }) });
        const r = await prefillDone;
        if (clientGone || timedOut) {
          dt.done('aborted');
          return { kind: 'aborted' };
        }
        if (!r.ok) {
          dt.done('aborted');
          if (r.failure) return { kind: 'retry', side: 'prefill', failure: r.failure };
          return passClientError(r, 'prefill');
        }
        let kvp: unknown;
        try {
          kvp = (JSON.parse(r.text ?? '') as { kv_transfer_params?: unknown }).kv_transfer_params;
        } catch {
          kvp = undefined;
        }
        if (typeof kvp !== 'object' || kvp === null) {
          dt.done('aborted');
          return {
            kind: 'retry',
            side: 'prefill',
            failure: {
              kind: 'bad-body',
              detail:
                "the prefill answer has no 'kv_transfer_params' (is the server a vLLM KV producer?)",
            },
          };
        }
        call = decodeCall(withMembers(raw, { kv_transfer_params: kvp }));
        dSent = performance.now();
        started = call.start();
      }
      const dcall = call;
      const untrackD = track(
        dw,
        () => dcall.sentToClient,
        (f) => dcall.fail(f),
      );
      setCurrent({
        abort: () => {
          prefill.fail({ kind: 'socket', detail: 'request aborted' });
          dcall.abort(new Error('request aborted'));
        },
        clientGone: () => {
          prefill.fail({ kind: 'socket', detail: 'client closed the connection' });
          dcall.clientGone();
        },
      });
      // A prefill that fails takes its decode with it: that decode would wait for KV in vain.
      void prefillDone.then((r) => {
        if (r.failure && !dcall.sentToClient) {
          prefillFailed = r.failure;
          dcall.fail({
            kind: r.failure.kind === 'worker-down' ? 'worker-down' : 'socket',
            detail: `prefill rank ${pt.rank} failed: ${r.failure.detail}`,
          });
        } else if (r.ok === false && r.failure === undefined && !r.aborted && !dcall.sentToClient) {
          dcall.abort(new Error('prefill refused the request'));
        }
      });
      let result: ForwardResult;
      try {
        result = await (started as Promise<ForwardResult>);
      } finally {
        untrackD();
      }
      const dLabel = String(dt.rank);
      if (result.kind === 'aborted') {
        dt.done('aborted');
        const r = await settlePrefill();
        if (
          !clientGone &&
          !timedOut &&
          r.status !== undefined &&
          r.status >= 400 &&
          r.status < 500
        ) {
          return passClientError(r, 'prefill');
        }
        metrics.requests.inc({ role: 'decode', rank: dLabel, status: '499' });
        return { kind: 'aborted' };
      }
      if (result.kind === 'failed') {
        dt.done('failed');
        // Which side broke: the prefill if its request failed too (give it a moment to say so).
        const r = prefillFailed ? undefined : await settlePrefill(100);
        const pf = prefillFailed ?? r?.failure;
        // A decode given up because its prefill failed is counted as that, not as its own error.
        metrics.requests.inc({
          role: 'decode',
          rank: dLabel,
          status: pf ? 'prefill-failed' : 'error',
        });
        if (pf) return { kind: 'retry', side: 'prefill', failure: pf };
        const f = result.failure;
        if (f.kind === 'connect') decodeHealth.reportConnectError(dw, f.detail);
        if (f.kind !== 'worker-down') decodeOutlier.failure(dw, f.detail);
        return { kind: 'retry', side: 'decode', failure: f };
      }
      dt.done(result.end === 'complete' ? 'completed' : 'failed');
      metrics.requests.inc({
        role: 'decode',
        rank: dLabel,
        status: result.end === 'client-closed' ? '499' : String(result.status),
      });
      // What the client got: a stream cut mid-way is a 502 (504 on a timeout) whatever its
      // status line said, as the colocated proxy counts it.
      const answered =
        result.end === 'complete'
          ? String(result.status)
          : result.end === 'client-closed'
            ? '499'
            : timedOut || result.failure?.kind === 'timeout'
              ? '504'
              : '502';
      if (result.end === 'complete') {
        if (result.status < 500) {
          decodeOutlier.success(dw);
          decodeHealth.reportSuccess(dw);
        }
      } else if (result.end === 'upstream-error' && result.failure) {
        decodeOutlier.failure(dw, result.failure.detail);
      }
      await settlePrefill(1_000);
      return { kind: 'done', status: answered };

      /** Waits for the prefill at most `graceMs` (then aborts it); its accounting runs either way. */
      async function settlePrefill(graceMs = 0): Promise<PrefillResult> {
        if (!prefill.settled() && graceMs > 0) {
          await Promise.race([prefillDone, sleep(graceMs)]);
        }
        if (!prefill.settled())
          prefill.fail({ kind: 'socket', detail: 'pair finished without it' });
        return prefillDone;
      }
    }

    /** The prefill side refused the request (4xx): the client gets that answer as is. */
    function passClientError(r: PrefillResult, side: string): PairOutcome {
      if (!res.headersSent && !res.destroyed) {
        const text = r.text ?? '';
        res.writeHead(r.status ?? 502, {
          'content-type': 'application/json; charset=utf-8',
          'content-length': Buffer.byteLength(text),
          'x-kvroute-pd-side': side,
        });
        res.end(text);
      }
      return { kind: 'done', status: String(r.status ?? 502) };
    }
  }

  function deadline(): RouterError {
    return new RouterError(
      'upstream_timeout',
      `The request was not answered within ${config.requestTimeoutMs} ms (--request-timeout-ms)`,
    );
  }

  function noneLeft(
    side: string,
    last: { side: string; failure: AttemptFailure } | undefined,
    policyMessage: string | undefined,
  ): RouterError {
    if (last) {
      return new RouterError(
        last.failure.kind === 'timeout' ? 'upstream_timeout' : 'upstream_unavailable',
        `${last.side} side failed: ${clientSafe(last.failure.detail)}; no other healthy ${last.side} rank or retry left`,
      );
    }
    return new RouterError(
      'no_healthy_rank',
      `No healthy ${side} rank to route to (${policyMessage ?? 'all workers are down'}); check the ${side} workers' /health`,
    ).withRetryAfter(1);
  }

  return {
    decodeTable,
    decodeDispatcher,
    decodeHealth,
    decodeOutlier,
    metrics,
    bootstrapPorts,
    start,
    close,
    evacuate,
    handle,
  };
}
