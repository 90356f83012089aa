// Response bodies and SSE chunks in the shapes real engines send (spec S-4): SGLang's
// /generate and OpenAI's completions / chat completions. Pure functions of the request's
// outcome, so both the streaming and the non-streaming paths share them.
import { type RequestKind, SSE_DONE, sseEvent as sse } from '@kvroute/protocol';

export interface Outcome {
  id: string;
  kind: RequestKind;
  model: string;
  /** Unix seconds, OpenAI's `created`. */
  created: number;
  dpRank: number;
  promptTokens: number;
  completionTokens: number;
  cachedTokens: number;
  /** Cumulative output text so far. */
  text: string;
  finished: boolean;
  /** Seconds from arrival to finish (SGLang's e2e_latency), model time scaled to wall. */
  e2eLatency: number;
}

function usage(o: Outcome) {
  return {
    prompt_tokens: o.promptTokens,
    completion_tokens: o.completionTokens,
    total_tokens: o.promptTokens + o.completionTokens,
    prompt_tokens_details: { cached_tokens: o.cachedTokens },
  };
}

function metaInfo(o: Outcome) {
  return {
    id: o.id,
    prompt_tokens: o.promptTokens,
    completion_tokens: o.completionTokens,
    cached_tokens: o.cachedTokens,
    finish_reason: o.finished ? { type: 'length', length: o.completionTokens } : null,
    e2e_latency: o.e2eLatency,
    dp_rank: o.dpRank,
  };
}

/** Non-streaming body. */
export function finalBody(o: Outcome): Record<string, unknown> {
  switch (o.kind) {
    case 'generate':
      return { text: o.text, meta_info: metaInfo(o) };
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
      // SGLang streams the cumulative text with the meta_info so far.
      return sse({ text: o.text, meta_info: metaInfo(o) });
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
  }
}

/** SSE text after the last token: finish chunk, usage chunk (OpenAI), [DONE]. */
export function streamEnd(o: Outcome): string {
  if (o.kind === 'generate') return sse({ text: o.text, meta_info: metaInfo(o) }) + SSE_DONE;
  const finish =
    o.kind === 'chat'
      ? { index: 0, delta: {}, logprobs: null, finish_reason: 'length' }
      : { index: 0, text: '', logprobs: null, finish_reason: 'length' };
  // The usage chunk has no choices, as OpenAI sends it with stream_options.include_usage.
  return sse(openAIChunk(o, finish, false)) + sse(openAIChunk(o, null, true)) + SSE_DONE;
}
