import { describe, expect, it } from 'vitest';
import {
  approximateTokenizer,
  buildRouteRequest,
  kindForPath,
  ProtocolError,
  parseEmbeddingRequest,
  parseGenerateRequest,
  parseRequest,
  parseRerankRequest,
  parseResponsesRequest,
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

describe('batch /generate', () => {
  it('a list of texts or of id lists becomes items, the first is the prompt', () => {
    const p = parseGenerateRequest({ text: ['ab', 'cd'], rid: ['r1', 'r2'] });
    expect(p.items).toEqual([
      { type: 'text', text: 'ab' },
      { type: 'text', text: 'cd' },
    ]);
    expect(p.prompt).toEqual({ type: 'text', text: 'ab' });
    expect(p.rid).toBe('r1');
    expect(parseGenerateRequest({ input_ids: [[1, 2], [3]] }).items).toEqual([
      { type: 'ids', ids: [1, 2] },
      { type: 'ids', ids: [3] },
    ]);
    // One prompt is not a batch.
    expect(parseGenerateRequest({ text: 'ab' }).items).toBeUndefined();
  });

  it('is routed as one request: all prompts in order, every item output limit', () => {
    const p = parseGenerateRequest({
      input_ids: [[1, 2], [3]],
      sampling_params: { max_new_tokens: 5 },
    });
    const r = buildRouteRequest(p, approximateTokenizer);
    expect([...r.inputIds]).toEqual([1, 2, 3]);
    expect(r.maxTokens).toBe(10);
  });
});

describe('embeddings', () => {
  it('string, list of strings, ids and list of id lists', () => {
    expect(kindForPath('/v1/embeddings')).toBe('embedding');
    const one = parseEmbeddingRequest({ input: 'hello', model: 'm' });
    expect(one).toMatchObject({ kind: 'embedding', model: 'm', maxTokens: 0 });
    expect(one.prompt).toEqual({ type: 'text', text: 'hello' });
    expect(one.items).toBeUndefined();
    expect(parseEmbeddingRequest({ input: ['a', 'b'] }).items).toHaveLength(2);
    expect(parseEmbeddingRequest({ input: [5, 6] }).prompt).toEqual({ type: 'ids', ids: [5, 6] });
    expect(parseEmbeddingRequest({ input: [[5], [6]] }).items).toEqual([
      { type: 'ids', ids: [5] },
      { type: 'ids', ids: [6] },
    ]);
    const r = buildRouteRequest(parseEmbeddingRequest({ input: ['a', 'b'] }), approximateTokenizer);
    expect(r.maxTokens).toBe(0);
    expect(r.inputIds.length).toBe(2);
  });

  it.each([
    ['missing input', {}, 'input', 'missing_required_parameter'],
    ['input a number', { input: 3 }, 'input', 'invalid_type'],
    ['empty list', { input: [] }, 'input', 'invalid_value'],
    ['list with an object', { input: ['a', {}] }, 'input[1]', 'invalid_type'],
    [
      'bad encoding_format',
      { input: 'a', encoding_format: 'hex' },
      'encoding_format',
      'invalid_value',
    ],
    ['dimensions 0', { input: 'a', dimensions: 0 }, 'dimensions', 'invalid_value'],
  ])('400 for %s', (_name, body, param, code) => {
    const err = errorOf(() => parseEmbeddingRequest(body));
    expect([err.status, err.param, err.code]).toEqual([400, param, code]);
  });
});

describe('rerank', () => {
  it('query then documents (strings or {text}), routed by the query first', () => {
    expect(kindForPath('/v1/rerank')).toBe('rerank');
    const p = parseRerankRequest({ query: 'q', documents: ['d1', { text: 'd2' }], top_n: 1 });
    expect(p.kind).toBe('rerank');
    expect(p.prompt).toEqual({ type: 'text', text: 'q' });
    expect(p.items?.map((i) => (i.type === 'text' ? i.text : ''))).toEqual(['q', 'd1', 'd2']);
  });

  it.each([
    ['missing query', { documents: ['a'] }, 'query', 'missing_required_parameter'],
    ['query not string', { query: 1, documents: ['a'] }, 'query', 'invalid_type'],
    ['missing documents', { query: 'q' }, 'documents', 'missing_required_parameter'],
    ['no documents', { query: 'q', documents: [] }, 'documents', 'invalid_value'],
    ['a document number', { query: 'q', documents: ['a', 2] }, 'documents[1]', 'invalid_type'],
    ['top_n 0', { query: 'q', documents: ['a'], top_n: 0 }, 'top_n', 'invalid_value'],
  ])('400 for %s', (_name, body, param, code) => {
    const err = errorOf(() => parseRerankRequest(body));
    expect([err.status, err.param, err.code]).toEqual([400, param, code]);
  });
});

describe('responses', () => {
  it('instructions and a string input read as system + user messages', () => {
    expect(kindForPath('/v1/responses')).toBe('responses');
    const p = parseResponsesRequest({
      model: 'm',
      instructions: 'be brief',
      input: 'hi',
      max_output_tokens: 20,
      stream: true,
    });
    expect(p).toMatchObject({ kind: 'responses', model: 'm', maxTokens: 20, stream: true });
    expect(p.prompt).toEqual({
      type: 'chat',
      messages: [
        { role: 'system', content: 'be brief' },
        { role: 'user', content: 'hi' },
      ],
    });
  });

  it('input items: messages with text parts, other items by type; same prefix as chat', () => {
    const p = parseRequest('responses', {
      input: [
        { role: 'user', content: [{ type: 'input_text', text: 'hello' }] },
        { type: 'message', role: 'assistant', content: [{ type: 'output_text', text: 'yo' }] },
        { type: 'function_call_output', call_id: 'c1', output: '42' },
      ],
    });
    const chat = parseRequest('chat', {
      messages: [
        { role: 'user', content: 'hello' },
        { role: 'assistant', content: 'yo' },
      ],
    });
    const a = approximateTokenizer.encodePrompt(p.prompt);
    const b = approximateTokenizer.encodePrompt(chat.prompt);
    // The chat turns are a prefix of the responses turns (up to the generation prompt).
    const common = b.length - 4;
    expect([...a.slice(0, common)]).toEqual([...b.slice(0, common)]);
    expect(p.prompt.type === 'chat' && p.prompt.messages[2]?.role).toBe('function_call_output');
  });

  it.each([
    ['missing input', {}, 'input', 'missing_required_parameter'],
    ['input a number', { input: 1 }, 'input', 'invalid_type'],
    ['empty input list', { input: [] }, 'input', 'invalid_value'],
    ['item without role', { input: [{ content: 'x' }] }, 'input[0].role', 'invalid_type'],
    [
      'bad part',
      { input: [{ role: 'user', content: [{ text: 'x' }] }] },
      'input[0].content[0]',
      'invalid_type',
    ],
    ['instructions number', { input: 'x', instructions: 1 }, 'instructions', 'invalid_type'],
    [
      'max_output_tokens 0',
      { input: 'x', max_output_tokens: 0 },
      'max_output_tokens',
      'invalid_value',
    ],
  ])('400 for %s', (_name, body, param, code) => {
    const err = errorOf(() => parseResponsesRequest(body));
    expect([err.status, err.param, err.code]).toEqual([400, param, code]);
  });
});
