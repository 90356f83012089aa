// The inference routes, one per kind of protocol's REQUEST_PATHS (the table the router
// forwards by), over HTTP: parse and check the request, start one generation per prompt
// (a /generate batch, embeddings inputs and rerank pairs have several), and frame what they
// produce as JSON or SSE in the engine's shapes.
import { randomUUID } from 'node:crypto';
import {
  badRequest,
  contextLengthExceeded,
  DEFAULT_LIMITS,
  DEFAULT_MAX_TOKENS,
  type ParsedRequest,
  parseJsonBody,
  parseRequest,
  REQUEST_PATHS,
  type RequestKind,
  type RequestLimits,
  type RoutingHints,
  type RoutingTokenizer,
  rerankDocumentText,
  routedRankParam,
  routingHints,
  SSE_DONE,
  type SseSink,
  SseWriter,
} from '@kvroute/protocol';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { EMBEDDING_DIMENSIONS, embeddingBase64, embeddingOf, rerankScore } from '../dense.ts';
import type { MockEngine } from '../engine.ts';
import type { Faults } from '../faults.ts';
import { type Generation, startGeneration } from '../generation.ts';
import type { WorkerMetrics } from '../metrics.ts';
import type { ResolvedOptions } from '../options.ts';
import type { createPdRoles, PdPlan } from '../pd/roles.ts';
import {
  finalBody,
  type GenerativeKind,
  newOutcome,
  type Outcome,
  streamDelta,
  streamEnd,
  streamStart,
} from '../responses.ts';

export interface InferenceDeps {
  opts: ResolvedOptions;
  engine: MockEngine;
  metrics: WorkerMetrics;
  tokenizer: RoutingTokenizer;
  faults: Faults;
  /** The prefill/decode role's handling (--role prefill|decode); undefined when colocated. */
  pd?: ReturnType<typeof createPdRoles> | undefined;
}

/** The body field a prompt came from, for 400s that name it. */
const PROMPT_PARAM: Record<RequestKind, string> = {
  chat: 'messages',
  completion: 'prompt',
  generate: 'text',
  embedding: 'input',
  rerank: 'documents',
  responses: 'input',
};

/** A prompt ready for the engine, checked against the context and the KV pool. */
interface Planned {
  inputIds: Uint32Array;
  maxTokens: number;
  /** The prompt came as token ids, so a client can send this reply's output ids back. */
  cacheReply: boolean;
}

const hex = () => randomUUID().replaceAll('-', '');

export function registerInferenceRoutes(app: FastifyInstance, deps: InferenceDeps): void {
  const { opts, engine, metrics, tokenizer, faults, pd } = deps;
  // Output limits are bounded by this worker's context, as an engine bounds them by its model's.
  const limits: RequestLimits = { ...DEFAULT_LIMITS, maxOutputTokens: opts.maxContext };

  for (const [kind, path] of Object.entries(REQUEST_PATHS) as [RequestKind, string][]) {
    app.post(path, (req, reply) => handle(kind, req, reply));
  }

  async function handle(kind: RequestKind, req: FastifyRequest, reply: FastifyReply) {
    const arrivalWall = performance.now();
    reply.raw.once('finish', () =>
      metrics.requests.inc({ endpoint: kind, status: String(reply.raw.statusCode) }),
    );
    if (faults.maybeFail(req, reply)) return;

    const parsed = parseRequest(
      kind,
      parseJsonBody(typeof req.body === 'string' ? req.body : '', limits),
      limits,
    );
    refuseUnsupported(kind, parsed.body as Record<string, unknown>);
    // One choice per request: a request for several is refused rather than answered with
    // one (and the router, which accounts one output per request, would undercount it).
    const n = (parsed.body as { n?: unknown }).n;
    if (n !== undefined && n !== null && n !== 1 && (kind === 'chat' || kind === 'completion')) {
      throw badRequest(
        `'n' must be 1: the mock worker generates one choice, got ${JSON.stringify(n)}`,
        {
          param: 'n',
          code: 'invalid_value',
        },
      );
    }
    // The same header/body hints the router reads (headers win).
    const hints = routingHints(parsed, req.headers);
    if (hints.routedRank !== undefined && hints.routedRank >= opts.dpSize) {
      const param = routedRankParam(hints.routedRankSource);
      throw badRequest(
        `${param} ${hints.routedRank} is out of range: this worker has dp_size ${opts.dpSize} (valid 0..${opts.dpSize - 1})`,
        { param, code: 'invalid_value' },
      );
    }
    let planned = plan(kind, parsed);
    let pdPlan: PdPlan | undefined;
    if (pd && (kind === 'embedding' || kind === 'rerank')) {
      throw badRequest(
        `this worker runs --role ${opts.role}: only generation requests are served`,
        {
          code: 'invalid_value',
        },
      );
    }
    if (pd) {
      // The decode side waits here for the prefill's KV; a client that leaves stops the wait.
      const ac = new AbortController();
      const onGone = () => {
        if (!reply.raw.writableFinished) ac.abort(new Error('client closed the connection'));
      };
      reply.raw.once('close', onGone);
      try {
        pdPlan = await pd.prepare(
          parsed,
          typeof req.body === 'string' ? req.body : '',
          hints,
          planned.length,
          ac.signal,
        );
      } catch (err) {
        if (ac.signal.aborted) return reply;
        throw err;
      } finally {
        reply.raw.off('close', onGone);
      }
      if (ac.signal.aborted) return reply;
      const p = pdPlan;
      if (p.maxTokens !== undefined) {
        planned = planned.map((x) => ({
          ...x,
          maxTokens: Math.min(x.maxTokens, p.maxTokens as number),
        }));
      }
      for (const [k, v] of Object.entries(p.headers)) reply.header(k, v);
      if (p.prefetch) {
        reply.raw.once('close', onGone);
        try {
          for (const x of planned) await p.prefetch(x.inputIds, ac.signal);
        } finally {
          reply.raw.off('close', onGone);
        }
        if (ac.signal.aborted) return reply;
      }
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
    // From here to the close listener below nothing awaits, so no close can slip between.
    if (kind === 'embedding' || kind === 'rerank') {
      return dense(kind, parsed, planned, hints, arrivalWall, reply);
    }
    return generate(kind, parsed, planned, hints, arrivalWall, reply, pdPlan);
  }

  /** Each prompt's ids and output limit; 400 for an empty prompt or one that cannot fit. */
  function plan(kind: RequestKind, parsed: ParsedRequest): Planned[] {
    const sources = kind === 'rerank' ? undefined : (parsed.items ?? [parsed.prompt]);
    const prompts =
      sources === undefined ? rerankPairs(parsed) : sources.map((p) => tokenizer.encodePrompt(p));
    const limit = parsed.maxTokens ?? DEFAULT_MAX_TOKENS[kind];
    // A /generate batch may give each prompt its own sampling_params.
    const itemLimits = parsed.itemMaxTokens;
    const batch = prompts.length > 1;
    return prompts.map((inputIds, i) => {
      let param = PROMPT_PARAM[kind];
      if (kind === 'generate' && parsed.prompt.type === 'ids') param = 'input_ids';
      if (batch) param = `${param}[${i}]`;
      if (inputIds.length === 0) {
        throw badRequest('The prompt is empty: at least one input token is needed', {
          param,
          code: 'invalid_value',
        });
      }
      if (inputIds.length >= opts.maxContext) {
        throw contextLengthExceeded(inputIds.length, opts.maxContext, param);
      }
      // As SGLang: the output limit is cut to what fits in the context.
      const asked = itemLimits ? (itemLimits[i] ?? DEFAULT_MAX_TOKENS[kind]) : limit;
      const maxTokens = Math.min(asked, opts.maxContext - inputIds.length);
      const kvTokens = inputIds.length + Math.max(1, maxTokens);
      if (kvTokens > engine.kvCapacity) {
        throw badRequest(
          `The request needs ${kvTokens} KV tokens (prompt + max tokens), more than this worker's KV pool of ${engine.kvCapacity}`,
          { param, code: 'context_length_exceeded' },
        );
      }
      return { inputIds, maxTokens, cacheReply: sources?.[i]?.type === 'ids' };
    });
  }

  /** A cross-encoder reads the query and one document together: one prompt per pair. */
  function rerankPairs(parsed: ParsedRequest): Uint32Array[] {
    const body = parsed.body;
    const docs = body.documents as unknown[];
    return docs.map((d, i) => tokenizer.encodeText(`${body.query}\n${rerankDocumentText(d, i)}`));
  }

  function outcomeFor(kind: GenerativeKind, parsed: ParsedRequest, id: string): Outcome {
    const o = newOutcome({
      id,
      kind,
      model: parsed.model ?? opts.modelName,
      created: Math.floor(Date.now() / 1000),
      includeUsage: parsed.includeUsage,
    });
    if (kind === 'responses') {
      const b = parsed.body;
      o.instructions = typeof b.instructions === 'string' ? b.instructions : null;
      if (parsed.maxTokens !== undefined) o.maxOutputTokens = parsed.maxTokens;
    }
    return o;
  }

  /** Request ids unique across workers and restarts (SGLang draws a uuid per request too). */
  function requestId(kind: GenerativeKind, parsed: ParsedRequest, i: number): string {
    switch (kind) {
      case 'generate': {
        const rid = parsed.body.rid;
        if (Array.isArray(rid) && typeof rid[i] === 'string') return rid[i];
        if (parsed.rid === undefined) return hex();
        // One id for a batch names its items as SGLang does: id_0, id_1, ...
        return parsed.items !== undefined ? `${parsed.rid}_${i}` : parsed.rid;
      }
      case 'chat':
        return `chatcmpl-${hex()}`;
      case 'completion':
        return `cmpl-${hex()}`;
      case 'responses':
        return `resp_${hex()}`;
    }
  }

  /** Starts every planned prompt and aborts them all when the client goes away. */
  function startAll(
    reply: FastifyReply,
    planned: Planned[],
    outcomes: Outcome[],
    hints: RoutingHints,
    arrivalWall: number,
    on: (i: number) => { delta?(text: string): void; finish?(): void } = () => ({}),
    pdPlan?: PdPlan,
  ): Generation[] {
    const gens = planned.map((p, i) => {
      const h = engineHints(hints);
      if (pdPlan) {
        // A PD request's rank is the role's choice; its 63-bit room is not the engine's business.
        delete h.bootstrapRoom;
        if (pdPlan.routedRank !== undefined) h.routedRank = pdPlan.routedRank;
        else delete h.routedRank;
        if (h.routedRank !== undefined) pdPlan.beforeStart?.(h.routedRank, p.inputIds);
      }
      const outcome = outcomes[i] as Outcome;
      const cb = on(i);
      let first = pdPlan?.firstToken !== undefined;
      // The count the answer reports, where the PD role says (SGLang's decode: the prefill's).
      const input = { ...p, ...h, reportCachedTokens: pdPlan?.reportCachedTokens };
      const g = startGeneration({ engine, metrics }, input, outcome, arrivalWall, {
        delta: (text) => {
          if (first) {
            first = false;
            pdPlan?.firstToken?.();
          }
          cb.delta?.(text);
        },
        finish: () => cb.finish?.(),
      });
      pdPlan?.started(g, outcome);
      return g;
    });
    // A client that goes away frees its ranks at once (KV, batch slot, dispatcher load).
    reply.raw.once('close', () => {
      for (const g of gens) g.abort();
    });
    return gens;
  }

  function generate(
    kind: GenerativeKind,
    parsed: ParsedRequest,
    planned: Planned[],
    hints: RoutingHints,
    arrivalWall: number,
    reply: FastifyReply,
    pdPlan?: PdPlan,
  ): Promise<unknown> | FastifyReply {
    const batch = parsed.items !== undefined;
    const outcomes = planned.map((_, i) => {
      const o = outcomeFor(kind, parsed, requestId(kind, parsed, i));
      if (batch) o.index = i;
      return o;
    });
    if (!parsed.stream) {
      const gens = startAll(reply, planned, outcomes, hints, arrivalWall, undefined, pdPlan);
      reply.header('x-kvroute-dp-rank', String(gens[0]?.handle.rank));
      return Promise.all(gens.map((g) => g.done)).then(() =>
        batch
          ? outcomes.map(finalBody)
          : { ...finalBody(outcomes[0] as Outcome), ...(pdPlan?.extraBody ?? {}) },
      );
    }

    const raw = reply.raw;
    // Items of a batch share the response: it ends, with one [DONE], after the last of them.
    let open = planned.length;
    const sink: SseSink = {
      get destroyed() {
        return raw.destroyed;
      },
      write: (chunk) => raw.write(chunk),
      once: (ev, fn) => raw.once(ev, fn),
      end: () => {
        if (--open > 0) return;
        if (batch && !raw.destroyed) raw.write(SSE_DONE);
        raw.end();
      },
    };
    const writers = outcomes.map((o) => new SseWriter(sink, (delta) => streamDelta(o, delta)));
    // SGLang and vLLM send a chat stream's role chunk with the first output, after the
    // prefill, so a stream's first byte is its first token; the Responses API announces
    // `response.created` at once (below).
    const opened = outcomes.map((o) => o.kind === 'responses');
    const announce = (i: number): void => {
      if (opened[i]) return;
      opened[i] = true;
      writers[i]?.send(streamStart(outcomes[i] as Outcome));
    };
    const gens = startAll(
      reply,
      planned,
      outcomes,
      hints,
      arrivalWall,
      (i) => ({
        delta: (text) => {
          announce(i);
          writers[i]?.token(text);
        },
        finish: () => {
          announce(i);
          writers[i]?.end(streamEnd(outcomes[i] as Outcome, !batch));
        },
      }),
      pdPlan,
    );
    reply.hijack();
    raw.writeHead(200, {
      ...(pdPlan?.headers ?? {}),
      'content-type': 'text/event-stream; charset=utf-8',
      'cache-control': 'no-cache',
      connection: 'keep-alive',
      'x-kvroute-dp-rank': String(gens[0]?.handle.rank),
    });
    raw.flushHeaders();
    outcomes.forEach((o, i) => {
      if (o.kind === 'responses' && !o.finished) writers[i]?.send(streamStart(o));
    });
    return reply;
  }

  /** Embeddings and rerank: each prompt prefills (caching it, as a real engine does), then
   * the body is built from the inputs alone. */
  async function dense(
    kind: 'embedding' | 'rerank',
    parsed: ParsedRequest,
    planned: Planned[],
    hints: RoutingHints,
    arrivalWall: number,
    reply: FastifyReply,
  ): Promise<unknown> {
    const outcomes = planned.map(() => outcomeFor('generate', parsed, hex()));
    const gens = startAll(
      reply,
      planned.map((p) => ({ ...p, maxTokens: 0 })),
      outcomes,
      hints,
      arrivalWall,
    );
    reply.header('x-kvroute-dp-rank', String(gens[0]?.handle.rank));
    await Promise.all(gens.map((g) => g.done));
    const model = parsed.model ?? opts.modelName;
    const promptTokens = outcomes.reduce((n, o) => n + o.promptTokens, 0);
    const body = parsed.body;
    if (kind === 'embedding') {
      const dims = typeof body.dimensions === 'number' ? body.dimensions : EMBEDDING_DIMENSIONS;
      const base64 = body.encoding_format === 'base64';
      return {
        object: 'list',
        data: planned.map((p, index) => {
          const v = embeddingOf(p.inputIds, dims);
          return { object: 'embedding', index, embedding: base64 ? embeddingBase64(v) : [...v] };
        }),
        model,
        usage: { prompt_tokens: promptTokens, total_tokens: promptTokens },
      };
    }
    // SGLang's rerank answer: a list sorted by score, best first, cut to top_n.
    const query = String(body.query);
    const docs = (body.documents as unknown[]).map((d, i) => rerankDocumentText(d, i));
    const withDocs = body.return_documents !== false;
    const ranked = docs
      .map((document, index) => {
        const o = outcomes[index] as Outcome;
        return {
          score: rerankScore(query, document),
          ...(withDocs ? { document } : {}),
          index,
          meta_info: {
            id: o.id,
            prompt_tokens: o.promptTokens,
            cached_tokens: o.cachedTokens,
            e2e_latency: o.e2eLatency,
            dp_rank: o.dpRank,
          },
        };
      })
      .sort((a, b) => b.score - a.score || a.index - b.index);
    return typeof body.top_n === 'number' ? ranked.slice(0, body.top_n) : ranked;
  }
}

function engineHints(h: RoutingHints) {
  const out: { routingKey?: string; routedRank?: number; bootstrapRoom?: number } = {};
  if (h.routingKey !== undefined) out.routingKey = h.routingKey;
  if (h.routedRank !== undefined) out.routedRank = h.routedRank;
  if (h.bootstrapRoom !== undefined) out.bootstrapRoom = h.bootstrapRoom;
  return out;
}

/**
 * What the mock worker cannot give is refused, not silently left out: it generates filler
 * text, so it has no token probabilities (logprobs) and does not echo prompts. A client that
 * asks for them gets a 400 naming the field instead of a 200 whose `logprobs` is null.
 */
function refuseUnsupported(kind: RequestKind, body: Record<string, unknown>): void {
  const refuse = (param: string, what: string): never => {
    throw badRequest(
      `'${param}' is not supported by the mock worker: it generates filler text, ${what}`,
      { param, code: 'unsupported_parameter' },
    );
  };
  const noProbs = 'without a model, so it has no token probabilities';
  const positive = (v: unknown) => typeof v === 'number' && v > 0;
  switch (kind) {
    case 'chat':
      if (body.logprobs === true) refuse('logprobs', noProbs);
      if (positive(body.top_logprobs)) refuse('top_logprobs', noProbs);
      break;
    case 'completion':
      if (body.logprobs !== undefined && body.logprobs !== null) refuse('logprobs', noProbs);
      if (body.echo === true) refuse('echo', 'and does not echo the prompt back');
      break;
    case 'responses':
      if (positive(body.top_logprobs)) refuse('top_logprobs', noProbs);
      // A follow-up would be answered without the turns before it.
      if (body.previous_response_id !== undefined && body.previous_response_id !== null) {
        refuse('previous_response_id', 'and keeps no stored responses to continue from');
      }
      break;
    case 'generate': {
      const r = body.return_logprob;
      if (r === true || (Array.isArray(r) && r.includes(true))) refuse('return_logprob', noProbs);
      break;
    }
  }
}
