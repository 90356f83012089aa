// Parse and validate request bodies into one normalized shape. Validation is
// deliberately shallow beyond what routing and the mock worker need: the router
// forwards the raw body, so fields we do not read pass through untouched, but
// every field we do read is checked and a wrong one gets a 400 naming it.
import { badRequest } from './errors.ts';
import {
  common,
  isPlainObject,
  missing,
  optionalNumber,
  requireObjectBody,
  tokenIds,
  wrongType,
} from './fields.ts';
import { checkJsonDepth, checkOutputTokens, DEFAULT_LIMITS, type RequestLimits } from './limits.ts';
import {
  parseEmbeddingRequest,
  parseRerankRequest,
  parseResponsesRequest,
} from './parse-inputs.ts';
import type { ChatMessage, ParsedRequest, PromptSource, RequestKind } from './request.ts';

export { isPlainObject } from './fields.ts';

export type {
  ChatContentPart,
  ChatMessage,
  ParsedRequest,
  PromptSource,
  RequestKind,
} from './request.ts';

/** Engine defaults when the client gives no limit: OpenAI completions 16, SGLang 128; chat has no
 * fixed limit in OpenAI, SGLang uses the remaining context, we use 128 for accounting. */
export const DEFAULT_MAX_TOKENS: Readonly<Record<RequestKind, number>> = {
  chat: 128,
  completion: 16,
  generate: 128,
  // Embeddings and rerank only prefill: no output tokens to account for.
  embedding: 0,
  rerank: 0,
  responses: 128,
};

/**
 * The URL path each request kind is served at: OpenAI's (SGLang and vLLM serve the same
 * paths) and SGLang's /generate. These are the requests routed by their prompt.
 */
export const REQUEST_PATHS: Readonly<Record<RequestKind, string>> = {
  chat: '/v1/chat/completions',
  completion: '/v1/completions',
  generate: '/generate',
  embedding: '/v1/embeddings',
  rerank: '/v1/rerank',
  responses: '/v1/responses',
};

const PATH_KINDS: Readonly<Record<string, RequestKind>> = Object.fromEntries(
  Object.entries(REQUEST_PATHS).map(([kind, path]) => [path, kind as RequestKind]),
);

/** The request kind served at a URL path (query string ignored), or undefined. */
export function kindForPath(path: string): RequestKind | undefined {
  const q = path.indexOf('?');
  return PATH_KINDS[q === -1 ? path : path.slice(0, q)];
}

/**
 * JSON text to an object body; 400 `invalid_json` / `invalid_body` otherwise, and 400
 * `nesting_too_deep` past `limits.maxJsonDepth`.
 */
export function parseJsonBody(
  raw: string | Uint8Array,
  limits: RequestLimits = DEFAULT_LIMITS,
): Record<string, unknown> {
  let text: string;
  if (typeof raw === 'string') text = raw;
  else {
    // A view over the caller's bytes: Buffer.from(raw) would copy the whole body first.
    const bytes = Buffer.isBuffer(raw)
      ? raw
      : Buffer.from(raw.buffer, raw.byteOffset, raw.byteLength);
    text = bytes.toString('utf8');
  }
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch (err) {
    throw badRequest(`Request body is not valid JSON: ${(err as Error).message}`, {
      code: 'invalid_json',
    });
  }
  const body = requireObjectBody(value);
  checkJsonDepth(body, limits.maxJsonDepth);
  return body;
}

/** `limits` bounds the output-token fields (see limits.ts); the depth is parseJsonBody's. */
export function parseRequest(
  kind: RequestKind,
  body: unknown,
  limits: RequestLimits = DEFAULT_LIMITS,
): ParsedRequest {
  switch (kind) {
    case 'chat':
      return parseChatCompletionRequest(body, limits);
    case 'completion':
      return parseCompletionRequest(body, limits);
    case 'generate':
      return parseGenerateRequest(body, limits);
    case 'embedding':
      return parseEmbeddingRequest(body);
    case 'rerank':
      return parseRerankRequest(body);
    case 'responses':
      return parseResponsesRequest(body, limits);
  }
}

export function parseChatCompletionRequest(
  input: unknown,
  limits: RequestLimits = DEFAULT_LIMITS,
): ParsedRequest {
  const body = requireObjectBody(input);
  const messages = body.messages;
  if (messages === undefined) throw missing('messages');
  if (!Array.isArray(messages)) throw wrongType('messages', 'an array', messages);
  if (messages.length === 0) {
    throw badRequest("'messages' must contain at least one message", {
      param: 'messages',
      code: 'invalid_value',
    });
  }
  messages.forEach(checkMessage);
  let tools: unknown[] | undefined;
  if (body.tools !== undefined && body.tools !== null) {
    if (!Array.isArray(body.tools)) throw wrongType('tools', 'an array', body.tools);
    body.tools.forEach((tool, i) => {
      if (!isPlainObject(tool)) throw wrongType(`tools[${i}]`, 'an object', tool);
    });
    tools = body.tools;
  }
  const maxCompletion = checkOutputTokens(
    body.max_completion_tokens,
    'max_completion_tokens',
    1,
    limits,
  );
  const maxTokens = checkOutputTokens(body.max_tokens, 'max_tokens', 1, limits);
  return {
    kind: 'chat',
    ...common(body),
    maxTokens: maxCompletion ?? maxTokens,
    prompt: { type: 'chat', messages: messages as ChatMessage[], ...(tools ? { tools } : {}) },
  };
}

export function parseCompletionRequest(
  input: unknown,
  limits: RequestLimits = DEFAULT_LIMITS,
): ParsedRequest {
  const body = requireObjectBody(input);
  const prompt = body.prompt;
  if (prompt === undefined || prompt === null) throw missing('prompt');
  return {
    kind: 'completion',
    ...common(body),
    maxTokens: checkOutputTokens(body.max_tokens, 'max_tokens', 0, limits),
    prompt: completionPrompt(prompt),
  };
}

export function parseGenerateRequest(
  input: unknown,
  limits: RequestLimits = DEFAULT_LIMITS,
): ParsedRequest {
  const body = requireObjectBody(input);
  const { text, input_ids: inputIds } = body;
  let prompt: PromptSource;
  let items: PromptSource[] | undefined;
  if (inputIds !== undefined && inputIds !== null) {
    if (text !== undefined && text !== null) {
      throw badRequest("Give either 'text' or 'input_ids', not both", {
        param: 'input_ids',
        code: 'invalid_value',
      });
    }
    // SGLang's batch form: a list of id lists.
    if (Array.isArray(inputIds) && inputIds.length > 0 && Array.isArray(inputIds[0])) {
      items = inputIds.map((ids, i) => ({ type: 'ids', ids: tokenIds(`input_ids[${i}]`, ids) }));
      prompt = items[0] as PromptSource;
    } else prompt = { type: 'ids', ids: tokenIds('input_ids', inputIds) };
  } else if (text !== undefined && text !== null) {
    if (Array.isArray(text)) {
      if (text.length === 0) {
        throw badRequest("'text' must not be an empty list", {
          param: 'text',
          code: 'invalid_value',
        });
      }
      items = text.map((t, i) => {
        if (typeof t !== 'string') throw wrongType(`text[${i}]`, 'a string', t);
        return { type: 'text', text: t };
      });
      prompt = items[0] as PromptSource;
    } else if (typeof text !== 'string') {
      throw wrongType('text', 'a string or a list of strings', text);
    } else prompt = { type: 'text', text };
  } else {
    throw badRequest("Missing required parameter: one of 'text' or 'input_ids'", {
      param: 'text',
      code: 'missing_required_parameter',
    });
  }
  let maxTokens: number | undefined;
  let itemMaxTokens: (number | undefined)[] | undefined;
  let temperature: number | undefined;
  const sp = body.sampling_params;
  if (Array.isArray(sp)) {
    // SGLang's batch form: one dict per prompt, in order.
    if (!items) throw wrongType('sampling_params', 'an object (a list is for a batch)', sp);
    if (sp.length !== items.length) {
      throw badRequest(
        `'sampling_params' has ${sp.length} entries for a batch of ${items.length}`,
        { param: 'sampling_params', code: 'invalid_value' },
      );
    }
    // maxTokens bounds every item: the largest item limit, an item without one counting the
    // default; undefined when no item sets one.
    let largest = 0;
    let any = false;
    itemMaxTokens = sp.map((one, i) => {
      const at = `sampling_params[${i}]`;
      if (!isPlainObject(one)) throw wrongType(at, 'an object', one);
      const t = optionalNumber(one, 'temperature', `${at}.temperature`);
      if (i === 0) temperature = t;
      const n = checkOutputTokens(one.max_new_tokens, `${at}.max_new_tokens`, 0, limits);
      if (n !== undefined) any = true;
      largest = Math.max(largest, n ?? DEFAULT_MAX_TOKENS.generate);
      return n;
    });
    if (any) maxTokens = largest;
  } else if (sp !== undefined && sp !== null) {
    if (!isPlainObject(sp)) throw wrongType('sampling_params', 'an object', sp);
    maxTokens = checkOutputTokens(sp.max_new_tokens, 'sampling_params.max_new_tokens', 0, limits);
    temperature = optionalNumber(sp, 'temperature', 'sampling_params.temperature');
  }
  const parsed: ParsedRequest = {
    kind: 'generate',
    ...common(body),
    maxTokens,
    prompt,
  };
  if (items) parsed.items = items;
  if (itemMaxTokens) parsed.itemMaxTokens = itemMaxTokens;
  if (temperature !== undefined) parsed.temperature = temperature;
  const rid = body.rid;
  if (Array.isArray(rid) && items) {
    // A batch may name each item's rid: one string per prompt, in order.
    if (rid.length !== items.length) {
      throw badRequest(`'rid' has ${rid.length} ids for a batch of ${items.length}`, {
        param: 'rid',
        code: 'invalid_value',
      });
    }
    rid.forEach((r, i) => {
      if (typeof r !== 'string') throw wrongType(`rid[${i}]`, 'a string', r);
    });
    parsed.rid = rid[0] as string;
  } else if (rid !== undefined && rid !== null) {
    if (typeof rid !== 'string') {
      throw wrongType('rid', items ? 'a string or a list of strings' : 'a string', rid);
    }
    parsed.rid = rid;
  }
  return parsed;
}

function checkMessage(msg: unknown, i: number): void {
  const at = `messages[${i}]`;
  if (!isPlainObject(msg)) throw wrongType(at, 'an object', msg);
  if (msg.role === undefined) throw missing(`${at}.role`);
  if (typeof msg.role !== 'string' || msg.role === '') {
    throw wrongType(`${at}.role`, 'a non-empty string', msg.role);
  }
  const content = msg.content;
  if (Array.isArray(content)) {
    content.forEach((part, j) => {
      const pat = `${at}.content[${j}]`;
      if (!isPlainObject(part)) throw wrongType(pat, 'an object', part);
      if (typeof part.type !== 'string') throw wrongType(`${pat}.type`, 'a string', part.type);
      if (part.type === 'text' && typeof part.text !== 'string') {
        throw wrongType(`${pat}.text`, 'a string', part.text);
      }
    });
  } else if (content !== undefined && content !== null && typeof content !== 'string') {
    throw wrongType(`${at}.content`, 'a string, an array of content parts or null', content);
  }
  if (msg.tool_calls !== undefined && msg.tool_calls !== null && !Array.isArray(msg.tool_calls)) {
    throw wrongType(`${at}.tool_calls`, 'an array', msg.tool_calls);
  }
}

function completionPrompt(prompt: unknown): PromptSource {
  if (typeof prompt === 'string') return { type: 'text', text: prompt };
  if (!Array.isArray(prompt)) {
    throw wrongType('prompt', 'a string or an array of token ids', prompt);
  }
  // OpenAI also accepts a batch (array of strings or of id arrays); one-element batches are
  // unwrapped, larger ones rejected because one HTTP request is routed to one rank.
  if (prompt.length > 0 && prompt.every((p) => typeof p === 'number')) {
    return { type: 'ids', ids: tokenIds('prompt', prompt) };
  }
  if (prompt.length === 1) {
    const only = prompt[0];
    if (typeof only === 'string') return { type: 'text', text: only };
    if (Array.isArray(only)) return { type: 'ids', ids: tokenIds('prompt[0]', only) };
  }
  if (prompt.length === 0) {
    throw badRequest("'prompt' must not be an empty array", {
      param: 'prompt',
      code: 'invalid_value',
    });
  }
  throw badRequest(
    "'prompt' must be a string or an array of token ids (batches of several prompts are not supported)",
    { param: 'prompt', code: 'invalid_value' },
  );
}
