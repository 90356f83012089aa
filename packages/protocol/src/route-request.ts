// The bridge from an HTTP request to the policy's RouteRequest. Declared structurally here
// (same field names as @kvroute/policy's RouteRequest) so this package needs no policy import.
import { type HeaderSource, routingHints } from './headers.ts';
import { DEFAULT_MAX_TOKENS } from './parse.ts';
import type { ParsedRequest, ScannedRequest } from './request.ts';
import type { RoutingTokenizer } from './tokenizer.ts';

export interface ProtocolRouteRequest {
  inputIds: Uint32Array;
  routingKey?: string;
  routedRank?: number;
  /** Where routedRank came from, for error messages: the header or the body field. */
  routedRankSource?: 'header' | 'body';
  bootstrapRoom?: number;
  /** Output tokens for load accounting: the client's limit or DEFAULT_MAX_TOKENS[kind]. */
  maxTokens: number;
  /**
   * True when the client set no output limit and `maxTokens` is DEFAULT_MAX_TOKENS[kind]: an
   * engine then generates up to its own default (SGLang's /generate 128 tokens; a chat or
   * Responses request, and a vLLM completion, until the context is full), so the default
   * suits load accounting but not a bound on how long the answer may take.
   */
  maxTokensDefaulted?: boolean;
  /**
   * The whole prompt's length in routing tokens when `inputIds` holds only its leading
   * tokens (scanRequest with a prefix cap); absent: `inputIds.length`.
   */
  promptTokens?: number;
  /** The body's `model` (a router with several worker groups routes by it). */
  model?: string;
}

/** Tokenizes the prompt and merges header/body routing hints (headers win). */
export function buildRouteRequest(
  parsed: ParsedRequest,
  tokenizer: RoutingTokenizer,
  headers: HeaderSource = {},
): ProtocolRouteRequest {
  const hints = routingHints(parsed, headers);
  const items = parsed.items;
  // A request with several prompts is routed as one: its prompt is theirs in order (so it
  // routes by the first one's prefix) and it holds every item's output limit.
  const out: ProtocolRouteRequest = {
    inputIds: items
      ? concatIds(items.map((p) => tokenizer.encodePrompt(p)))
      : tokenizer.encodePrompt(parsed.prompt),
    maxTokens: outputTokens(parsed, items?.length ?? 1),
    maxTokensDefaulted: parsed.maxTokens === undefined,
  };
  if (hints.routingKey !== undefined) out.routingKey = hints.routingKey;
  if (hints.routedRank !== undefined) {
    out.routedRank = hints.routedRank;
    if (hints.routedRankSource !== undefined) out.routedRankSource = hints.routedRankSource;
  }
  if (hints.bootstrapRoom !== undefined) out.bootstrapRoom = hints.bootstrapRoom;
  if (parsed.model !== undefined) out.model = parsed.model;
  return out;
}

/**
 * The output tokens a request holds: each item's own limit where a batch gives one per item
 * (an item without one counts the kind's default), else the request's limit times its items.
 */
function outputTokens(parsed: ParsedRequest, items: number): number {
  const fallback = DEFAULT_MAX_TOKENS[parsed.kind];
  const each = parsed.itemMaxTokens;
  if (each !== undefined) {
    let sum = 0;
    for (const t of each) sum += t ?? fallback;
    return sum;
  }
  return (parsed.maxTokens ?? fallback) * items;
}

function concatIds(parts: Uint32Array[]): Uint32Array {
  let n = 0;
  for (const p of parts) n += p.length;
  const out = new Uint32Array(n);
  let at = 0;
  for (const p of parts) {
    out.set(p, at);
    at += p.length;
  }
  return out;
}

/** The RouteRequest of a scanned body (scan.ts), with header hints merged (headers win). */
export function routeRequestFromScan(
  scanned: ScannedRequest,
  headers: HeaderSource = {},
): ProtocolRouteRequest {
  const hints = routingHints(scanned, headers);
  const out: ProtocolRouteRequest = {
    inputIds: scanned.inputIds,
    maxTokens: scanned.maxTokens ?? DEFAULT_MAX_TOKENS[scanned.kind],
    maxTokensDefaulted: scanned.maxTokens === undefined,
    promptTokens: scanned.promptTokens,
  };
  if (hints.routingKey !== undefined) out.routingKey = hints.routingKey;
  if (hints.routedRank !== undefined) {
    out.routedRank = hints.routedRank;
    if (hints.routedRankSource !== undefined) out.routedRankSource = hints.routedRankSource;
  }
  if (hints.bootstrapRoom !== undefined) out.bootstrapRoom = hints.bootstrapRoom;
  if (scanned.model !== undefined) out.model = scanned.model;
  return out;
}
