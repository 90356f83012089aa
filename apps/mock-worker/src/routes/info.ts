// Everything but inference, as SGLang serves it (and vLLM where SGLang has no equivalent):
// health, server and model info, the model list, per-rank loads, /flush_cache, /tokenize, /detokenize and
// the metrics. None of it goes through the dispatcher except /health_generate, which runs a
// one-token generation as SGLang's does.
import {
  badRequest,
  modelNotFound,
  parseChatCompletionRequest,
  parseJsonBody,
  type RoutingTokenizer,
  wrongType,
} from '@kvroute/protocol';
import type { FastifyInstance } from 'fastify';
import type { MockEngine } from '../engine.ts';
import type { Faults } from '../faults.ts';
import { startGeneration } from '../generation.ts';
import type { WorkerMetrics } from '../metrics.ts';
import type { ResolvedOptions } from '../options.ts';
import { newOutcome } from '../responses.ts';

export interface InfoDeps {
  opts: ResolvedOptions;
  engine: MockEngine;
  metrics: WorkerMetrics;
  tokenizer: RoutingTokenizer;
  faults: Faults;
}

export function registerInfoRoutes(app: FastifyInstance, deps: InfoDeps): void {
  const { opts, engine, metrics, tokenizer, faults } = deps;

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
    disaggregation_mode: opts.role === 'colocated' ? 'null' : opts.role,
    ...(app.mockPd.bootstrap ? { disaggregation_bootstrap_port: app.mockPd.bootstrap.port } : {}),
  });
  const modelCard = () => ({
    id: opts.modelName,
    object: 'model',
    created: 0,
    owned_by: 'kvroute',
    root: opts.modelName,
    max_model_len: opts.maxContext,
  });

  app.get('/health', async (_req, reply) => {
    // After --fail-after trips the engine counts as broken, so active health checks see it.
    if (faults.failing()) return reply.code(503).send(faults.healthError());
    return {};
  });
  // SGLang's deep health check: a one-token generation must complete.
  app.get('/health_generate', async (_req, reply) => {
    if (faults.failing()) return reply.code(503).send(faults.healthError());
    const outcome = newOutcome({
      id: 'health_generate',
      kind: 'generate',
      model: opts.modelName,
      created: 0,
      includeUsage: false,
    });
    const gen = startGeneration(
      { engine, metrics },
      { inputIds: Uint32Array.of(0), maxTokens: 1 },
      outcome,
      performance.now(),
    );
    reply.raw.once('close', () => gen.abort());
    await gen.done;
    return reply.code(200).send();
  });
  app.get('/get_server_info', async () => serverInfo());
  app.get('/get_model_info', async () => ({
    model_path: opts.modelName,
    tokenizer_path: opts.tokenizer ?? null,
    is_generation: true,
  }));
  app.get('/v1/models', async () => ({ object: 'list', data: [modelCard()] }));
  app.get<{ Params: { id: string } }>('/v1/models/:id', async (req) => {
    if (req.params.id !== opts.modelName) throw modelNotFound(req.params.id);
    return modelCard();
  });
  // The decode role's KV transfers (which prefill DP rank each came from): tests and debugging.
  app.get('/pd/transfers', async () => ({ role: opts.role, transfers: app.mockPd.transfers }));
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
  // SGLang's and vLLM's /tokenize: `prompt` (a string or a list of them) or vLLM's `messages`.
  app.post('/tokenize', async (req) => {
    const body = parseJsonBody(typeof req.body === 'string' ? req.body : '');
    const max_model_len = opts.maxContext;
    if (body.messages !== undefined) {
      const chat = parseChatCompletionRequest({ messages: body.messages, tools: body.tools });
      const tokens = [...tokenizer.encodePrompt(chat.prompt)];
      return { tokens, count: tokens.length, max_model_len };
    }
    const prompt = body.prompt;
    if (typeof prompt === 'string') {
      const tokens = [...tokenizer.encodeText(prompt)];
      return { tokens, count: tokens.length, max_model_len };
    }
    if (Array.isArray(prompt) && prompt.every((p) => typeof p === 'string')) {
      const tokens = prompt.map((p) => [...tokenizer.encodeText(p)]);
      return { tokens, count: tokens.map((t) => t.length), max_model_len };
    }
    throw wrongType('prompt', 'a string or a list of strings', prompt);
  });
  // SGLang's and vLLM's /detokenize: `tokens` (a list of ids) back to text with the same
  // routing tokenizer. The answer carries the text as both names in use: SGLang's `text` and
  // vLLM's `prompt`.
  app.post('/detokenize', async (req) => {
    const body = parseJsonBody(typeof req.body === 'string' ? req.body : '');
    const tokens = body.tokens;
    const isId = (t: unknown) =>
      Number.isInteger(t) && (t as number) >= 0 && (t as number) <= 0xffffffff;
    if (!Array.isArray(tokens) || !tokens.every(isId)) {
      throw wrongType('tokens', 'a list of token ids (integers from 0 to 4294967295)', tokens);
    }
    const skip = body.skip_special_tokens;
    if (skip !== undefined && typeof skip !== 'boolean') {
      throw wrongType('skip_special_tokens', 'true or false', skip);
    }
    const text = tokenizer.decode(tokens as number[], { skipSpecialTokens: skip === true });
    return { text, prompt: text };
  });
  app.get('/metrics', async (_req, reply) => {
    reply.header('content-type', metrics.registry.contentType);
    return metrics.registry.metrics();
  });
}
