// Parsers for the requests that are routed by their input but produce no chat turn of their
// own: OpenAI embeddings, rerank (SGLang's and vLLM's /v1/rerank) and OpenAI's Responses API.
// They yield the same ParsedRequest as chat and completions, so a router routes them by
// their prompt like any other request, and the mock worker reads the same shape.
import { badRequest } from './errors.ts';
import {
  common,
  isPlainObject,
  missing,
  optionalInt,
  requireObjectBody,
  tokenIds,
  wrongType,
} from './fields.ts';
import { checkOutputTokens, DEFAULT_LIMITS, type RequestLimits } from './limits.ts';
import type { ChatContentPart, ChatMessage, ParsedRequest, PromptSource } from './request.ts';

/**
 * OpenAI `/v1/embeddings`: `input` is a string, a list of strings, a list of token ids or a
 * list of id lists. Each input is one prompt (`items`); there is no output to account for.
 */
export function parseEmbeddingRequest(input: unknown): ParsedRequest {
  const body = requireObjectBody(input);
  const raw = body.input;
  if (raw === undefined || raw === null) throw missing('input');
  let items: PromptSource[];
  if (typeof raw === 'string') items = [{ type: 'text', text: raw }];
  else if (!Array.isArray(raw)) {
    throw wrongType('input', 'a string, a list of strings or a list of token ids', raw);
  } else if (raw.length === 0) {
    throw badRequest("'input' must not be an empty list", {
      param: 'input',
      code: 'invalid_value',
    });
  } else if (raw.every((v) => typeof v === 'number')) {
    items = [{ type: 'ids', ids: tokenIds('input', raw) }];
  } else {
    items = raw.map((v, i): PromptSource => {
      if (typeof v === 'string') return { type: 'text', text: v };
      if (Array.isArray(v)) return { type: 'ids', ids: tokenIds(`input[${i}]`, v) };
      throw wrongType(`input[${i}]`, 'a string or a list of token ids', v);
    });
  }
  const format = body.encoding_format;
  if (format !== undefined && format !== null && format !== 'float' && format !== 'base64') {
    throw badRequest(
      `'encoding_format' must be "float" or "base64", got ${JSON.stringify(format)}`,
      { param: 'encoding_format', code: 'invalid_value' },
    );
  }
  optionalInt(body, 'dimensions', 1);
  return withItems({ kind: 'embedding', ...common(body), maxTokens: 0 }, items);
}

/**
 * Rerank (SGLang and vLLM `/v1/rerank`): a `query` and its `documents` (strings, or objects
 * with `text` as vLLM's Jina/Cohere-style API takes). The items are the query, then each
 * document, so the request routes by the query: the prefix every pair shares.
 */
export function parseRerankRequest(input: unknown): ParsedRequest {
  const body = requireObjectBody(input);
  const query = body.query;
  if (query === undefined || query === null) throw missing('query');
  if (typeof query !== 'string') throw wrongType('query', 'a string', query);
  const docs = body.documents;
  if (docs === undefined || docs === null) throw missing('documents');
  if (!Array.isArray(docs)) throw wrongType('documents', 'a list of strings', docs);
  if (docs.length === 0) {
    throw badRequest("'documents' must not be an empty list", {
      param: 'documents',
      code: 'invalid_value',
    });
  }
  const items: PromptSource[] = [{ type: 'text', text: query }];
  for (const [i, d] of docs.entries()) items.push({ type: 'text', text: rerankDocumentText(d, i) });
  optionalInt(body, 'top_n', 1);
  return withItems({ kind: 'rerank', ...common(body), maxTokens: 0 }, items);
}

/** A rerank document's text: the string, or `text` of an object; 400 otherwise. */
export function rerankDocumentText(doc: unknown, i: number): string {
  if (typeof doc === 'string') return doc;
  if (isPlainObject(doc) && typeof doc.text === 'string') return doc.text;
  throw wrongType(`documents[${i}]`, 'a string or an object with a string "text"', doc);
}

/**
 * OpenAI's Responses API (`/v1/responses`): `instructions` and `input` (a string, or a list of
 * input items) read as the chat messages a worker's template would see, so a multi-turn
 * conversation keeps routing by the same prefix as through chat completions.
 */
export function parseResponsesRequest(
  input: unknown,
  limits: RequestLimits = DEFAULT_LIMITS,
): ParsedRequest {
  const body = requireObjectBody(input);
  const raw = body.input;
  if (raw === undefined || raw === null) throw missing('input');
  const messages: ChatMessage[] = [];
  const instructions = body.instructions;
  if (instructions !== undefined && instructions !== null) {
    if (typeof instructions !== 'string') {
      throw wrongType('instructions', 'a string', instructions);
    }
    messages.push({ role: 'system', content: instructions });
  }
  if (typeof raw === 'string') messages.push({ role: 'user', content: raw });
  else if (Array.isArray(raw)) {
    for (const [i, item] of raw.entries()) messages.push(responsesItem(item, i));
  } else throw wrongType('input', 'a string or a list of input items', raw);
  if (messages.length === 0) {
    throw badRequest("'input' must not be an empty list", {
      param: 'input',
      code: 'invalid_value',
    });
  }
  let tools: unknown[] | undefined;
  if (body.tools !== undefined && body.tools !== null) {
    if (!Array.isArray(body.tools)) throw wrongType('tools', 'an array', body.tools);
    tools = body.tools;
  }
  return {
    kind: 'responses',
    ...common(body),
    maxTokens: checkOutputTokens(body.max_output_tokens, 'max_output_tokens', 1, limits),
    prompt: { type: 'chat', messages, ...(tools && tools.length > 0 ? { tools } : {}) },
  };
}

/** One Responses input item as a chat message: messages keep their role, other items
 * (function calls and their outputs, reasoning) become a message named after their type. */
function responsesItem(item: unknown, i: number): ChatMessage {
  const at = `input[${i}]`;
  if (!isPlainObject(item)) throw wrongType(at, 'an object', item);
  const type = item.type;
  if (type !== undefined && type !== 'message') {
    if (typeof type !== 'string') throw wrongType(`${at}.type`, 'a string', type);
    const { id: _id, status: _status, ...rest } = item;
    return { role: type, content: JSON.stringify(rest) };
  }
  if (typeof item.role !== 'string' || item.role === '') {
    throw wrongType(`${at}.role`, 'a non-empty string', item.role);
  }
  const content = item.content;
  if (typeof content === 'string') return { role: item.role, content };
  if (!Array.isArray(content)) {
    throw wrongType(`${at}.content`, 'a string or a list of content parts', content);
  }
  const parts: ChatContentPart[] = content.map((part, j) => {
    const pat = `${at}.content[${j}]`;
    if (!isPlainObject(part) || typeof part.type !== 'string') {
      throw wrongType(pat, 'an object with a string "type"', part);
    }
    // input_text / output_text are the Responses API's names for a text part.
    if (part.type === 'input_text' || part.type === 'output_text' || part.type === 'text') {
      if (typeof part.text !== 'string') throw wrongType(`${pat}.text`, 'a string', part.text);
      return { type: 'text', text: part.text };
    }
    return { ...part, type: part.type };
  });
  return { role: item.role, content: parts };
}

function withItems(parsed: Omit<ParsedRequest, 'prompt'>, items: PromptSource[]): ParsedRequest {
  const out: ParsedRequest = { ...parsed, prompt: items[0] as PromptSource };
  if (items.length > 1) out.items = items;
  return out;
}
