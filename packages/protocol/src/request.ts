// The shapes a request takes once read: the full parse (ParsedRequest, parse.ts) and the
// routing scan (ScannedRequest, scan.ts). Types only, in a module of their own, so the
// parsers, the field helpers and the route builder share them without importing each other.

export type RequestKind = 'chat' | 'completion' | 'generate' | 'embedding' | 'rerank' | 'responses';

export interface ChatContentPart {
  type: string;
  text?: string;
  [key: string]: unknown;
}

export interface ChatMessage {
  role: string;
  content?: string | ChatContentPart[] | null;
  tool_calls?: unknown[];
  [key: string]: unknown;
}

/** Where the prompt comes from; the routing tokenizer turns it into token ids. */
export type PromptSource =
  | { type: 'chat'; messages: ChatMessage[]; tools?: unknown[] }
  | { type: 'text'; text: string }
  | { type: 'ids'; ids: number[] };

export interface ParsedRequest {
  kind: RequestKind;
  stream: boolean;
  /** OpenAI `stream_options.include_usage`: a stream ends with a usage chunk only when set. */
  includeUsage: boolean;
  /**
   * Output token limit the client asked for: chat `max_completion_tokens` (else `max_tokens`),
   * completions `max_tokens`, generate `sampling_params.max_new_tokens`. Undefined when absent:
   * the host applies its default (see DEFAULT_MAX_TOKENS). A /generate batch with one
   * `sampling_params` per prompt: the largest item's limit (an item without one counts the
   * default), so it bounds every item; `itemMaxTokens` has each one.
   */
  maxTokens?: number;
  /**
   * A /generate batch whose `sampling_params` is a list (one per prompt, SGLang's form): each
   * item's `max_new_tokens`, undefined where that item sets none (the default applies).
   */
  itemMaxTokens?: (number | undefined)[];
  model?: string;
  temperature?: number;
  prompt: PromptSource;
  /** Body `routing_key` (headers are read separately, see headers.ts). */
  routingKey?: string;
  /** Body `routed_dp_rank`. */
  routedRank?: number;
  /** Body `bootstrap_room`. */
  bootstrapRoom?: number;
  /** SGLang request id (`rid`, /generate only; a batch's `rid` list: its first one). */
  rid?: string;
  /**
   * Set for a request that carries several prompts (a /generate batch, an embeddings input
   * list, a rerank query and its documents): every prompt in order; `prompt` is the first.
   * A worker prefills each one; a router routes the request as one, by their concatenation.
   */
  items?: PromptSource[];
  /** The parsed JSON body as received, for proxying. */
  body: Record<string, unknown>;
}

/** The fields routing reads, the prompt's leading routing ids, and where routed_dp_rank sits. */
export interface ScannedRequest {
  kind: RequestKind;
  stream: boolean;
  maxTokens?: number;
  routingKey?: string;
  routedRank?: number;
  bootstrapRoom?: number;
  /** The body's `model`: which worker group serves it when the router has several. */
  model?: string;
  /** The first min(promptTokens, maxPromptTokens) routing ids (approximate tokenizer). */
  inputIds: Uint32Array;
  /**
   * The whole prompt's length in routing tokens, for load accounting. Exact, except that a
   * `tools` or `tool_calls` value past the decoded prefix counts its raw bytes (the full path
   * counts them re-serialised without whitespace).
   */
  promptTokens: number;
  /** Byte ranges [start, end) of top-level `routed_dp_rank` members, for withRoutedRank. */
  routedRankSpans: [number, number][];
}
