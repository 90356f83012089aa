import { describe, expect, it } from 'vitest';
import {
  approximateTokenizer,
  buildRouteRequest,
  DEFAULT_MAX_TOKENS,
  kindForPath,
  ProtocolError,
  parseChatCompletionRequest,
  parseCompletionRequest,
  parseGenerateRequest,
  parseJsonBody,
  parseRequest,
  REQUEST_PATHS,
  type RequestKind,
} from '../src/index.ts';

function errorOf(fn: () => unknown): ProtocolError {
  try {
    fn();
  } catch (err) {
    expect(err).toBeInstanceOf(ProtocolError);
    return err as ProtocolError;
  }
  throw new Error('expected a ProtocolError');
}

describe('parseJsonBody', () => {
  it('parses an object body', () => {
    expect(parseJsonBody('{"a":1}')).toEqual({ a: 1 });
    expect(parseJsonBody(Buffer.from('{"b":[2]}'))).toEqual({ b: [2] });
  });
  it('rejects malformed JSON with 400 invalid_json', () => {
    const err = errorOf(() => parseJsonBody('{"a":'));
    expect(err.status).toBe(400);
    expect(err.code).toBe('invalid_json');
    expect(err.toJSON().error.type).toBe('invalid_request_error');
    expect(err.message).toMatch(/not valid JSON/);
  });
  it.each(['[]', '3', '"x"', 'null'])('rejects non-object body %s', (raw) => {
    const err = errorOf(() => parseJsonBody(raw));
    expect(err.status).toBe(400);
    expect(err.code).toBe('invalid_body');
  });
});

describe('kindForPath', () => {
  it('maps the three endpoints and ignores the query string', () => {
    expect(kindForPath('/v1/chat/completions')).toBe('chat');
    expect(kindForPath('/v1/completions?x=1')).toBe('completion');
    expect(kindForPath('/generate')).toBe('generate');
    expect(kindForPath('/v1/tokenize')).toBeUndefined();
  });

  it('is the inverse of REQUEST_PATHS', () => {
    for (const kind of ['chat', 'completion', 'generate'] as const) {
      expect(kindForPath(REQUEST_PATHS[kind])).toBe(kind);
    }
  });
});

describe('chat completions', () => {
  it('normalizes a full body', () => {
    const body = {
      model: 'llama',
      messages: [{ role: 'user', content: 'hi' }],
      stream: true,
      stream_options: { include_usage: true },
      max_tokens: 50,
      max_completion_tokens: 20,
      temperature: 0.7,
      routing_key: 'session-1',
      routed_dp_rank: 3,
      bootstrap_room: 99,
      tools: [{ type: 'function', function: { name: 'f' } }],
    };
    const p = parseChatCompletionRequest(body);
    expect(p).toMatchObject({
      kind: 'chat',
      stream: true,
      includeUsage: true,
      maxTokens: 20,
      model: 'llama',
      temperature: 0.7,
      routingKey: 'session-1',
      routedRank: 3,
      bootstrapRoom: 99,
    });
    expect(p.prompt).toEqual({ type: 'chat', messages: body.messages, tools: body.tools });
    expect(p.body).toBe(body);
  });
  it('defaults: not streaming, no limit, max_tokens used when max_completion_tokens absent', () => {
    const p = parseChatCompletionRequest({ messages: [{ role: 'user', content: 'x' }] });
    expect(p.stream).toBe(false);
    expect(p.maxTokens).toBeUndefined();
    expect(p.routedRank).toBeUndefined();
    const q = parseChatCompletionRequest({ messages: [{ role: 'user' }], max_tokens: 7 });
    expect(q.maxTokens).toBe(7);
  });
  it('accepts null/missing content, content parts and tool_calls', () => {
    const p = parseChatCompletionRequest({
      messages: [
        {
          role: 'user',
          content: [
            { type: 'text', text: 'a' },
            { type: 'image_url', image_url: {} },
          ],
        },
        { role: 'assistant', content: null, tool_calls: [{ id: '1' }] },
        { role: 'tool', tool_call_id: '1' },
      ],
    });
    expect(p.prompt.type).toBe('chat');
  });

  const bad: Array<[string, unknown, string, string]> = [
    ['missing messages', {}, 'messages', 'missing_required_parameter'],
    ['messages not an array', { messages: 'hi' }, 'messages', 'invalid_type'],
    ['empty messages', { messages: [] }, 'messages', 'invalid_value'],
    ['message not an object', { messages: ['hi'] }, 'messages[0]', 'invalid_type'],
    [
      'missing role',
      { messages: [{ content: 'x' }] },
      'messages[0].role',
      'missing_required_parameter',
    ],
    ['role not a string', { messages: [{ role: 5 }] }, 'messages[0].role', 'invalid_type'],
    [
      'content a number',
      { messages: [{ role: 'user', content: 5 }] },
      'messages[0].content',
      'invalid_type',
    ],
    [
      'content part not object',
      { messages: [{ role: 'user', content: ['x'] }] },
      'messages[0].content[0]',
      'invalid_type',
    ],
    [
      'content part text missing',
      { messages: [{ role: 'user', content: [{ type: 'text' }] }] },
      'messages[0].content[0].text',
      'invalid_type',
    ],
    [
      'content part type missing',
      { messages: [{ role: 'user', content: [{ text: 'x' }] }] },
      'messages[0].content[0].type',
      'invalid_type',
    ],
    [
      'tool_calls not array',
      { messages: [{ role: 'assistant', tool_calls: {} }] },
      'messages[0].tool_calls',
      'invalid_type',
    ],
    ['tools not array', { messages: [{ role: 'user' }], tools: {} }, 'tools', 'invalid_type'],
    ['tool not object', { messages: [{ role: 'user' }], tools: ['f'] }, 'tools[0]', 'invalid_type'],
    [
      'stream not boolean',
      { messages: [{ role: 'user' }], stream: 'yes' },
      'stream',
      'invalid_type',
    ],
    [
      'stream_options not object',
      { messages: [{ role: 'user' }], stream_options: 1 },
      'stream_options',
      'invalid_type',
    ],
    [
      'include_usage not boolean',
      { messages: [{ role: 'user' }], stream_options: { include_usage: 1 } },
      'stream_options.include_usage',
      'invalid_type',
    ],
    [
      'max_tokens string',
      { messages: [{ role: 'user' }], max_tokens: '10' },
      'max_tokens',
      'invalid_type',
    ],
    [
      'max_tokens fractional',
      { messages: [{ role: 'user' }], max_tokens: 1.5 },
      'max_tokens',
      'invalid_type',
    ],
    [
      'max_tokens zero',
      { messages: [{ role: 'user' }], max_tokens: 0 },
      'max_tokens',
      'invalid_value',
    ],
    [
      'max_completion_tokens negative',
      { messages: [{ role: 'user' }], max_completion_tokens: -1 },
      'max_completion_tokens',
      'invalid_value',
    ],
    ['model not string', { messages: [{ role: 'user' }], model: 1 }, 'model', 'invalid_type'],
    [
      'temperature not number',
      { messages: [{ role: 'user' }], temperature: 'hot' },
      'temperature',
      'invalid_type',
    ],
    [
      'routing_key not string',
      { messages: [{ role: 'user' }], routing_key: 1 },
      'routing_key',
      'invalid_type',
    ],
    [
      'routed_dp_rank string',
      { messages: [{ role: 'user' }], routed_dp_rank: '1' },
      'routed_dp_rank',
      'invalid_type',
    ],
    [
      'routed_dp_rank negative',
      { messages: [{ role: 'user' }], routed_dp_rank: -1 },
      'routed_dp_rank',
      'invalid_value',
    ],
    [
      'bootstrap_room fractional',
      { messages: [{ role: 'user' }], bootstrap_room: 0.5 },
      'bootstrap_room',
      'invalid_type',
    ],
  ];
  it.each(bad)('400 for %s, naming the field', (_name, body, param, code) => {
    const err = errorOf(() => parseChatCompletionRequest(body));
    expect(err.status).toBe(400);
    expect(err.toJSON()).toEqual({
      error: { message: err.message, type: 'invalid_request_error', param, code },
    });
    expect(err.message).toContain(param);
  });
});

describe('completions', () => {
  it('string prompt, id prompt and batches of one', () => {
    expect(parseCompletionRequest({ prompt: 'abc', max_tokens: 3 })).toMatchObject({
      kind: 'completion',
      maxTokens: 3,
      prompt: { type: 'text', text: 'abc' },
    });
    expect(parseCompletionRequest({ prompt: [1, 2] }).prompt).toEqual({ type: 'ids', ids: [1, 2] });
    expect(parseCompletionRequest({ prompt: ['x'] }).prompt).toEqual({ type: 'text', text: 'x' });
    expect(parseCompletionRequest({ prompt: [[5]] }).prompt).toEqual({ type: 'ids', ids: [5] });
    expect(parseCompletionRequest({ prompt: '' }).prompt).toEqual({ type: 'text', text: '' });
    expect(parseCompletionRequest({ prompt: 'x', max_tokens: 0 }).maxTokens).toBe(0);
  });
  const bad: Array<[string, unknown, string, string]> = [
    ['missing prompt', {}, 'prompt', 'missing_required_parameter'],
    ['null prompt', { prompt: null }, 'prompt', 'missing_required_parameter'],
    ['prompt a number', { prompt: 5 }, 'prompt', 'invalid_type'],
    ['prompt empty array', { prompt: [] }, 'prompt', 'invalid_value'],
    ['batch of two', { prompt: ['a', 'b'] }, 'prompt', 'invalid_value'],
    ['negative token id', { prompt: [1, -2] }, 'prompt[1]', 'invalid_type'],
    ['token id too large', { prompt: [2 ** 32] }, 'prompt[0]', 'invalid_type'],
    ['bad id in batch of one', { prompt: [[1, 'x']] }, 'prompt[0][1]', 'invalid_type'],
    ['max_tokens negative', { prompt: 'x', max_tokens: -5 }, 'max_tokens', 'invalid_value'],
  ];
  it.each(bad)('400 for %s', (_name, body, param, code) => {
    const err = errorOf(() => parseCompletionRequest(body));
    expect(err.status).toBe(400);
    expect(err.param).toBe(param);
    expect(err.code).toBe(code);
  });
});

describe('/generate', () => {
  it('text, input_ids, sampling params, rid', () => {
    const p = parseGenerateRequest({
      text: 'hello',
      sampling_params: { max_new_tokens: 12, temperature: 0 },
      stream: true,
      rid: 'r1',
      routed_dp_rank: 0,
    });
    expect(p).toMatchObject({
      kind: 'generate',
      stream: true,
      maxTokens: 12,
      temperature: 0,
      rid: 'r1',
      routedRank: 0,
      prompt: { type: 'text', text: 'hello' },
    });
    expect(parseGenerateRequest({ input_ids: [3, 4] }).prompt).toEqual({
      type: 'ids',
      ids: [3, 4],
    });
    expect(parseGenerateRequest({ input_ids: [], text: null }).prompt).toEqual({
      type: 'ids',
      ids: [],
    });
  });
  it("a batch's rid list and per-item sampling_params list, as SGLang takes them", () => {
    const p = parseGenerateRequest({
      text: ['a b', 'c d'],
      rid: ['r1', 'r2'],
      sampling_params: { max_new_tokens: 1 },
    });
    expect(p).toMatchObject({ rid: 'r1', maxTokens: 1 });
    expect(p.items).toHaveLength(2);
    expect(p.itemMaxTokens).toBeUndefined();
    expect(
      parseGenerateRequest({
        input_ids: [
          [1, 2],
          [3, 4],
        ],
        rid: ['r1', 'r2'],
      }).rid,
    ).toBe('r1');
    expect(parseGenerateRequest({ input_ids: [[1, 2]], rid: ['r1'] }).rid).toBe('r1');
    // A string rid names the whole batch (SGLang suffixes it per item).
    expect(parseGenerateRequest({ text: ['a', 'b'], rid: 'r' }).rid).toBe('r');

    const q = parseGenerateRequest({
      text: ['a', 'b', 'c'],
      sampling_params: [
        { max_new_tokens: 2, temperature: 0.5 },
        { max_new_tokens: 3 },
        { temperature: 1 },
      ],
    });
    expect(q.itemMaxTokens).toEqual([2, 3, undefined]);
    // The bound on every item: the third takes the default.
    expect(q.maxTokens).toBe(DEFAULT_MAX_TOKENS.generate);
    expect(q.temperature).toBe(0.5);
    const r = parseGenerateRequest({
      input_ids: [[1], [2]],
      sampling_params: [{ max_new_tokens: 2 }, { max_new_tokens: 7 }],
    });
    expect(r.itemMaxTokens).toEqual([2, 7]);
    expect(r.maxTokens).toBe(7);
    // Load accounting holds each item's own limit: 2 + 3 + the default, and 2 + 7.
    expect(buildRouteRequest(q, approximateTokenizer).maxTokens).toBe(
      5 + DEFAULT_MAX_TOKENS.generate,
    );
    expect(buildRouteRequest(r, approximateTokenizer).maxTokens).toBe(9);
    const none = parseGenerateRequest({ text: ['a', 'b'], sampling_params: [{}, {}] });
    expect(none.itemMaxTokens).toEqual([undefined, undefined]);
    expect(none.maxTokens).toBeUndefined();
  });
  const bad: Array<[string, unknown, string, string]> = [
    ['neither text nor input_ids', { sampling_params: {} }, 'text', 'missing_required_parameter'],
    ['both text and input_ids', { text: 'a', input_ids: [1] }, 'input_ids', 'invalid_value'],
    ['a batch item not a string', { text: ['a', 1] }, 'text[1]', 'invalid_type'],
    ['an empty batch', { text: [] }, 'text', 'invalid_value'],
    [
      'a batch of id lists with a bad id',
      { input_ids: [[1], [-1]] },
      'input_ids[1][0]',
      'invalid_type',
    ],
    ['a batch with too few rids', { text: ['a', 'b'], rid: ['r'] }, 'rid', 'invalid_value'],
    ['a batch with too many rids', { text: ['a'], rid: ['r', 's'] }, 'rid', 'invalid_value'],
    ['a batch rid not a string', { text: ['a', 'b'], rid: ['r', 2] }, 'rid[1]', 'invalid_type'],
    ['a batch rid null', { input_ids: [[1], [2]], rid: [null, 'r'] }, 'rid[0]', 'invalid_type'],
    ['a rid list for one prompt', { text: 'a', rid: ['r'] }, 'rid', 'invalid_type'],
    ['a batch rid object', { text: ['a'], rid: { a: 1 } }, 'rid', 'invalid_type'],
    [
      'a sampling_params list for one prompt',
      { text: 'a', sampling_params: [{ max_new_tokens: 1 }] },
      'sampling_params',
      'invalid_type',
    ],
    [
      'a sampling_params list shorter than the batch',
      { text: ['a', 'b'], sampling_params: [{ max_new_tokens: 1 }] },
      'sampling_params',
      'invalid_value',
    ],
    [
      'a sampling_params list item not an object',
      { text: ['a', 'b'], sampling_params: [{}, 3] },
      'sampling_params[1]',
      'invalid_type',
    ],
    [
      'a per-item max_new_tokens negative',
      { text: ['a', 'b'], sampling_params: [{ max_new_tokens: 1 }, { max_new_tokens: -1 }] },
      'sampling_params[1].max_new_tokens',
      'invalid_value',
    ],
    [
      'a per-item max_new_tokens past the context',
      { input_ids: [[1], [2]], sampling_params: [{ max_new_tokens: 1e9 }, {}] },
      'sampling_params[0].max_new_tokens',
      'invalid_value',
    ],
    [
      'a per-item temperature string',
      { text: ['a', 'b'], sampling_params: [{}, { temperature: 'x' }] },
      'sampling_params[1].temperature',
      'invalid_type',
    ],
    ['input_ids not array', { input_ids: 'abc' }, 'input_ids', 'invalid_type'],
    ['input_ids float', { input_ids: [1, 2.5] }, 'input_ids[1]', 'invalid_type'],
    [
      'sampling_params not object',
      { text: 'a', sampling_params: [] },
      'sampling_params',
      'invalid_type',
    ],
    [
      'max_new_tokens string',
      { text: 'a', sampling_params: { max_new_tokens: '5' } },
      'sampling_params.max_new_tokens',
      'invalid_type',
    ],
    [
      'max_new_tokens negative',
      { text: 'a', sampling_params: { max_new_tokens: -1 } },
      'sampling_params.max_new_tokens',
      'invalid_value',
    ],
    [
      'temperature string',
      { text: 'a', sampling_params: { temperature: 'x' } },
      'sampling_params.temperature',
      'invalid_type',
    ],
    ['rid not string', { text: 'a', rid: 5 }, 'rid', 'invalid_type'],
    ['stream not boolean', { text: 'a', stream: 1 }, 'stream', 'invalid_type'],
  ];
  it.each(bad)('400 for %s', (_name, body, param, code) => {
    const err = errorOf(() => parseGenerateRequest(body));
    expect(err.status).toBe(400);
    expect(err.param).toBe(param);
    expect(err.code).toBe(code);
  });
});

describe('parseRequest', () => {
  it('dispatches on kind and rejects non-object bodies for every kind', () => {
    const kinds = Object.keys(REQUEST_PATHS) as RequestKind[];
    expect(kinds).toEqual(['chat', 'completion', 'generate', 'embedding', 'rerank', 'responses']);
    for (const kind of kinds) {
      expect(errorOf(() => parseRequest(kind, [1])).code).toBe('invalid_body');
    }
    expect(parseRequest('generate', { text: 'x' }).kind).toBe('generate');
  });
});
