// Response bodies and SSE frames in the shapes real engines send: SGLang's /generate, OpenAI's
// completions, chat completions and Responses API. Pure functions of a request's outcome,
// so the streaming and the non-streaming paths share them.
import { type RequestKind, SSE_DONE, sseEvent as sse } from '@kvroute/protocol';

/** The kinds that generate text (embeddings and rerank only prefill; see dense.ts). */
export type GenerativeKind = Extract<RequestKind, 'chat' | 'completion' | 'generate' | 'responses'>;

export interface Outcome {
  id: string;
  kind: GenerativeKind;
  model: string;
  /** Unix seconds, OpenAI's `created`. */
  created: number;
  dpRank: number;
  promptTokens: number;
  completionTokens: number;
  cachedTokens: number;
  /** Cumulative output text so far. */
  text: string;
  /** Cumulative output token ids (SGLang's `output_ids`). */
  outputIds: number[];
  finished: boolean;
  /** Seconds from arrival to finish (SGLang's e2e_latency), model time scaled to wall. */
  e2eLatency: number;
  /** OpenAI `stream_options.include_usage`: a stream ends with a usage chunk only when asked. */
  includeUsage: boolean;
  /** Place in a /generate batch: its streamed frames carry it as `index`, as SGLang's do. */
  index?: number;
  /** The Responses API numbers every streamed event (`sequence_number`). */
  seq: number;
  /** Echoed by the Responses API object. */
  maxOutputTokens?: number;
  instructions?: string | null;
}

/** A request's outcome before it ran: nothing served, generated or cached yet. */
export function newOutcome(
  init: Pick<Outcome, 'id' | 'kind' | 'model' | 'created' | 'includeUsage'>,
): Outcome {
  return {
    ...init,
    dpRank: 0,
    promptTokens: 0,
    completionTokens: 0,
    cachedTokens: 0,
    text: '',
    outputIds: [],
    finished: false,
    e2eLatency: 0,
    seq: 0,
  };
}

function usage(o: Outcome) {
  return {
    prompt_tokens: o.promptTokens,
    completion_tokens: o.completionTokens,
    total_tokens: o.promptTokens + o.completionTokens,
    prompt_tokens_details: { cached_tokens: o.cachedTokens },
  };
}

/** SGLang's meta_info, plus `dp_rank` (the internal rank that served it). */
function metaInfo(o: Outcome) {
  return {
    id: o.id,
    finish_reason: o.finished ? { type: 'length', length: o.completionTokens } : null,
    prompt_tokens: o.promptTokens,
    weight_version: 'default',
    total_retractions: 0,
    completion_tokens: o.completionTokens,
    cached_tokens: o.cachedTokens,
    e2e_latency: o.e2eLatency,
    dp_rank: o.dpRank,
  };
}

/** SGLang's /generate body; a streamed frame of a batch item also names its `index`. */
function generateBody(o: Outcome, streamed = false): Record<string, unknown> {
  const body: Record<string, unknown> = {
    text: o.text,
    output_ids: o.outputIds,
    meta_info: metaInfo(o),
  };
  if (streamed && o.index !== undefined) body.index = o.index;
  return body;
}

/** Non-streaming body. */
export function finalBody(o: Outcome): Record<string, unknown> {
  switch (o.kind) {
    case 'generate':
      return generateBody(o);
    case 'completion':
      return {
        id: o.id,
        object: 'text_completion',
        created: o.created,
        model: o.model,
        choices: [{ index: 0, text: o.text, logprobs: null, finish_reason: 'length' }],
        usage: usage(o),
      };
    case 'chat':
      return {
        id: o.id,
        object: 'chat.completion',
        created: o.created,
        model: o.model,
        choices: [
          {
            index: 0,
            message: { role: 'assistant', content: o.text },
            logprobs: null,
            finish_reason: 'length',
          },
        ],
        usage: usage(o),
      };
    case 'responses':
      return responseObject(o);
  }
}

function openAIChunk(o: Outcome, choice: Record<string, unknown> | null, withUsage: boolean) {
  return {
    id: o.id,
    object: o.kind === 'chat' ? 'chat.completion.chunk' : 'text_completion',
    created: o.created,
    model: o.model,
    choices: choice ? [choice] : [],
    ...(withUsage ? { usage: usage(o) } : {}),
  };
}

/** SSE text to send before the first output token (chat announces the role). */
export function streamStart(o: Outcome): string {
  if (o.kind === 'responses') {
    const response = responseObject(o);
    return (
      event(o, 'response.created', { response }) +
      event(o, 'response.in_progress', { response }) +
      event(o, 'response.output_item.added', {
        output_index: 0,
        item: { ...messageItem(o), status: 'in_progress', content: [] },
      }) +
      event(o, 'response.content_part.added', {
        item_id: messageId(o),
        output_index: 0,
        content_index: 0,
        part: { type: 'output_text', text: '', annotations: [] },
      })
    );
  }
  if (o.kind !== 'chat') return '';
  return sse(
    openAIChunk(
      o,
      { index: 0, delta: { role: 'assistant', content: '' }, logprobs: null, finish_reason: null },
      false,
    ),
  );
}

/** SSE text for new output `delta` (the Outcome already includes it). */
export function streamDelta(o: Outcome, delta: string): string {
  switch (o.kind) {
    case 'generate':
      // SGLang streams the cumulative text and output_ids with the meta_info so far.
      return sse(generateBody(o, true));
    case 'completion':
      return sse(
        openAIChunk(o, { index: 0, text: delta, logprobs: null, finish_reason: null }, false),
      );
    case 'chat':
      return sse(
        openAIChunk(
          o,
          { index: 0, delta: { content: delta }, logprobs: null, finish_reason: null },
          false,
        ),
      );
    case 'responses':
      return event(o, 'response.output_text.delta', {
        item_id: messageId(o),
        output_index: 0,
        content_index: 0,
        delta,
        logprobs: [],
      });
  }
}

/**
 * SSE text after the last token: the finish chunk, OpenAI's usage chunk (`choices: []`) only
 * when the client set stream_options.include_usage, then `[DONE]` unless `done` is false (an
 * item of a batch, whose stream ends after its last item). The Responses API ends with its
 * closing events and no [DONE], as OpenAI's does.
 */
export function streamEnd(o: Outcome, done = true): string {
  const end = done ? SSE_DONE : '';
  if (o.kind === 'generate') return sse(generateBody(o, true)) + end;
  if (o.kind === 'responses') {
    const item = messageItem(o);
    return (
      event(o, 'response.output_text.done', {
        item_id: item.id,
        output_index: 0,
        content_index: 0,
        text: o.text,
        logprobs: [],
      }) +
      event(o, 'response.content_part.done', {
        item_id: item.id,
        output_index: 0,
        content_index: 0,
        part: item.content[0],
      }) +
      event(o, 'response.output_item.done', { output_index: 0, item }) +
      event(o, `response.${responseStatus(o)}`, { response: responseObject(o) })
    );
  }
  const finish =
    o.kind === 'chat'
      ? { index: 0, delta: {}, logprobs: null, finish_reason: 'length' }
      : { index: 0, text: '', logprobs: null, finish_reason: 'length' };
  const usageChunk = o.includeUsage ? sse(openAIChunk(o, null, true)) : '';
  return sse(openAIChunk(o, finish, false)) + usageChunk + end;
}

// OpenAI's Responses API. The mock always stops at the output limit, which OpenAI reports
// as status "incomplete" with reason max_output_tokens (a chat completion's "length").

function event(o: Outcome, type: string, fields: Record<string, unknown>): string {
  return `event: ${type}\ndata: ${JSON.stringify({ type, sequence_number: o.seq++, ...fields })}\n\n`;
}

const messageId = (o: Outcome) => `msg_${o.id.slice(5)}`;

function messageItem(o: Outcome) {
  return {
    type: 'message',
    id: messageId(o),
    status: o.finished ? 'incomplete' : 'in_progress',
    role: 'assistant',
    content: [{ type: 'output_text', text: o.text, annotations: [], logprobs: [] }],
  };
}

function responseStatus(o: Outcome): 'in_progress' | 'incomplete' {
  return o.finished ? 'incomplete' : 'in_progress';
}

function responseObject(o: Outcome) {
  const status = responseStatus(o);
  return {
    id: o.id,
    object: 'response',
    created_at: o.created,
    status,
    background: false,
    error: null,
    incomplete_details: status === 'incomplete' ? { reason: 'max_output_tokens' } : null,
    instructions: o.instructions ?? null,
    max_output_tokens: o.maxOutputTokens ?? null,
    model: o.model,
    output: o.finished ? [messageItem(o)] : [],
    parallel_tool_calls: true,
    previous_response_id: null,
    reasoning: { effort: null, summary: null },
    store: false,
    temperature: 1,
    text: { format: { type: 'text' } },
    tool_choice: 'auto',
    tools: [],
    top_p: 1,
    truncation: 'disabled',
    usage: o.finished
      ? {
          input_tokens: o.promptTokens,
          input_tokens_details: { cached_tokens: o.cachedTokens },
          output_tokens: o.completionTokens,
          output_tokens_details: { reasoning_tokens: 0 },
          total_tokens: o.promptTokens + o.completionTokens,
        }
      : null,
    metadata: {},
  };
}
