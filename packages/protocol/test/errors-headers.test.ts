import { describe, expect, it } from 'vitest';
import {
  buildRouteRequest,
  contextLengthExceeded,
  createRoutingTokenizer,
  errorTypeForStatus,
  forbidden,
  gatewayTimeout,
  isProtocolError,
  notFound,
  openAIErrorBody,
  type ProtocolError,
  parseChatCompletionRequest,
  parseGenerateRequest,
  payloadTooLarge,
  routedRankFromHeaders,
  routeNotFound,
  routingHints,
  routingKeyFromHeaders,
  serviceUnavailable,
} from '../src/index.ts';

describe('error helpers', () => {
  it('build OpenAI-shaped bodies with the right status and type', () => {
    const cases: Array<[ProtocolError, number, string, string]> = [
      [
        forbidden('rank override needs --allow-rank-override'),
        403,
        'permission_error',
        'forbidden',
      ],
      [notFound('no such rank'), 404, 'not_found_error', 'not_found'],
      [routeNotFound('POST', '/v1/nope'), 404, 'invalid_request_error', 'unknown_url'],
      [payloadTooLarge(1024), 413, 'invalid_request_error', 'payload_too_large'],
      [serviceUnavailable('no healthy rank'), 503, 'server_error', 'service_unavailable'],
      [gatewayTimeout('upstream timed out'), 504, 'server_error', 'upstream_timeout'],
      [contextLengthExceeded(5000, 4096), 400, 'invalid_request_error', 'context_length_exceeded'],
    ];
    for (const [err, status, type, code] of cases) {
      expect(isProtocolError(err)).toBe(true);
      expect(err.status).toBe(status);
      const body = JSON.parse(JSON.stringify(err));
      expect(body).toEqual({ error: { message: err.message, type, param: err.param, code } });
    }
    expect(routeNotFound('POST', '/v1/nope').message).toBe('Invalid URL (POST /v1/nope)');
    expect(payloadTooLarge(1024).message).toContain('1024');
    expect(contextLengthExceeded(5000, 4096).message).toMatch(/4096.*5000/);
  });
  it('openAIErrorBody fills nulls and maps statuses', () => {
    expect(openAIErrorBody(500, 'boom')).toEqual({
      error: { message: 'boom', type: 'server_error', param: null, code: null },
    });
    expect(errorTypeForStatus(401)).toBe('authentication_error');
    expect(errorTypeForStatus(429)).toBe('rate_limit_error');
    expect(errorTypeForStatus(413)).toBe('invalid_request_error');
  });
});

describe('header helpers', () => {
  it('routing key from X-Routing-Key, then x-smg-routing-key', () => {
    expect(routingKeyFromHeaders({ 'x-routing-key': 'a', 'x-smg-routing-key': 'b' })).toBe('a');
    expect(routingKeyFromHeaders({ 'x-smg-routing-key': 'b' })).toBe('b');
    expect(routingKeyFromHeaders({ 'x-routing-key': '  ' })).toBeUndefined();
    expect(routingKeyFromHeaders(new Headers({ 'X-SMG-Routing-Key': 'c' }))).toBe('c');
    expect(routingKeyFromHeaders({ 'x-routing-key': ['d', 'e'] })).toBe('d');
  });
  it('rank from X-Data-Parallel-Rank, 400 naming the header when malformed', () => {
    expect(routedRankFromHeaders({ 'x-data-parallel-rank': '2' })).toBe(2);
    expect(routedRankFromHeaders(new Headers({ 'X-Data-Parallel-Rank': '0' }))).toBe(0);
    expect(routedRankFromHeaders({})).toBeUndefined();
    for (const bad of ['-1', 'one', '1.5', '99999999999999999999']) {
      try {
        routedRankFromHeaders({ 'x-data-parallel-rank': bad });
        expect.unreachable();
      } catch (err) {
        expect((err as ProtocolError).status).toBe(400);
        expect((err as ProtocolError).param).toBe('X-Data-Parallel-Rank');
      }
    }
  });
  it('routingHints: headers win over body fields', () => {
    const parsed = parseChatCompletionRequest({
      messages: [{ role: 'user', content: 'x' }],
      routing_key: 'body-key',
      routed_dp_rank: 1,
      bootstrap_room: 7,
    });
    expect(routingHints(parsed, {})).toEqual({
      routingKey: 'body-key',
      routedRank: 1,
      routedRankSource: 'body',
      bootstrapRoom: 7,
    });
    expect(
      routingHints(parsed, { 'x-routing-key': 'hdr', 'x-data-parallel-rank': '3' }),
    ).toMatchObject({ routingKey: 'hdr', routedRank: 3, routedRankSource: 'header' });
  });
  it('buildRouteRequest tokenizes and applies default max tokens', () => {
    const tok = createRoutingTokenizer();
    const r = buildRouteRequest(parseGenerateRequest({ text: 'abcdefgh' }), tok, {
      'x-routing-key': 'k',
    });
    expect(Array.from(r.inputIds)).toEqual([0x64636261, 0x68676665]);
    expect(r.maxTokens).toBe(128);
    expect(r.routingKey).toBe('k');
    const ids = buildRouteRequest(
      parseGenerateRequest({ input_ids: [9, 8], sampling_params: { max_new_tokens: 4 } }),
      tok,
    );
    expect(Array.from(ids.inputIds)).toEqual([9, 8]);
    expect(ids.maxTokens).toBe(4);
    expect(ids.routedRankSource).toBeUndefined();
    const body = parseGenerateRequest({ text: 'x', routed_dp_rank: 2 });
    // An empty header is absent: the rank and its source are the body's.
    expect(buildRouteRequest(body, tok, { 'x-data-parallel-rank': '' })).toMatchObject({
      routedRank: 2,
      routedRankSource: 'body',
    });
    expect(buildRouteRequest(body, tok, { 'x-data-parallel-rank': '1' })).toMatchObject({
      routedRank: 1,
      routedRankSource: 'header',
    });
  });
});
