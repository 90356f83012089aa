// Property tests of the request parser and its bounds: whatever bytes or JSON a client sends,
// parsing either returns a request whose output-token limit is a finite integer within the
// limits, or throws a 400 ProtocolError naming a parameter. Never another exception (a
// TypeError or RangeError here would be a 500 from the router), never a non-finite number.
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { isProtocolError } from '../src/errors.ts';
import { checkJsonDepth, checkOutputTokens, DEFAULT_LIMITS } from '../src/limits.ts';
import { parseJsonBody, parseRequest, type RequestKind } from '../src/parse.ts';

const KINDS: RequestKind[] = ['chat', 'completion', 'generate'];
const limits = { maxOutputTokens: 32_768, maxJsonDepth: 16 };

/** Numbers a hostile client would try, plus anything JSON can carry. */
const nasty = fc.oneof(
  fc.constantFrom(
    Number.MAX_VALUE,
    -Number.MAX_VALUE,
    Number.MIN_VALUE,
    Number.MAX_SAFE_INTEGER,
    2 ** 53 + 2,
    1e308,
    -1,
    0,
    1,
    1.5,
    32_768,
    32_769,
    '8',
    null,
    true,
  ),
  fc.double(),
  fc.integer(),
  fc.jsonValue({ maxDepth: 3 }),
);

function expectBadRequestOrBounded(run: () => { maxTokens?: number }): void {
  try {
    const parsed = run();
    if (parsed.maxTokens !== undefined) {
      expect(Number.isSafeInteger(parsed.maxTokens)).toBe(true);
      expect(parsed.maxTokens).toBeGreaterThanOrEqual(0);
      expect(parsed.maxTokens).toBeLessThanOrEqual(limits.maxOutputTokens);
    }
  } catch (err) {
    if (!isProtocolError(err)) throw err;
    expect(err.status).toBe(400);
  }
}

describe('parser properties', () => {
  it('any output-token value parses to a bounded integer or a 400 naming the field', () => {
    fc.assert(
      fc.property(fc.constantFrom(...KINDS), nasty, nasty, (kind, a, b) => {
        const body: Record<string, unknown> =
          kind === 'chat'
            ? {
                messages: [{ role: 'user', content: 'x' }],
                max_tokens: a,
                max_completion_tokens: b,
              }
            : kind === 'completion'
              ? { prompt: 'x', max_tokens: a }
              : { text: 'x', sampling_params: { max_new_tokens: a } };
        try {
          const p = parseRequest(kind, body, limits);
          if (p.maxTokens !== undefined) {
            expect(Number.isSafeInteger(p.maxTokens)).toBe(true);
            expect(p.maxTokens).toBeLessThanOrEqual(limits.maxOutputTokens);
          }
        } catch (err) {
          if (!isProtocolError(err)) throw err;
          expect(err.status).toBe(400);
          expect(err.param).toMatch(/max_tokens|max_completion_tokens|max_new_tokens/);
        }
      }),
      { numRuns: 2000 },
    );
  });

  it('arbitrary JSON bodies give a request or a 400, never another error', () => {
    fc.assert(
      fc.property(
        fc.constantFrom(...KINDS),
        fc.dictionary(
          fc.constantFrom(
            'messages',
            'prompt',
            'text',
            'input_ids',
            'max_tokens',
            'max_completion_tokens',
            'sampling_params',
            'stream',
            'tools',
            'routed_dp_rank',
            'model',
          ),
          fc.jsonValue({ maxDepth: 4 }),
        ),
        (kind, body) => {
          expectBadRequestOrBounded(() =>
            parseRequest(kind, parseJsonBody(JSON.stringify(body), limits), limits),
          );
        },
      ),
      { numRuns: 2000 },
    );
  });

  it('arbitrary bytes give a body or a 400', () => {
    fc.assert(
      fc.property(fc.uint8Array({ maxLength: 256 }), (bytes) => {
        try {
          parseJsonBody(bytes, limits);
        } catch (err) {
          if (!isProtocolError(err)) throw err;
          expect(err.status).toBe(400);
        }
      }),
      { numRuns: 2000 },
    );
  });

  it('nesting deeper than the limit is a 400 naming where, at any depth and in any field', () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 1, max: 6000 }),
        fc.constantFrom('tools', 'messages'),
        fc.boolean(),
        (depth, field, arrays) => {
          // Built as text: JSON.stringify itself overflows the stack on thousands of levels.
          const inner = arrays
            ? `${'['.repeat(depth)}"leaf"${']'.repeat(depth)}`
            : `${'{"a":'.repeat(depth)}"leaf"${'}'.repeat(depth)}`;
          const text =
            field === 'tools'
              ? `{"messages":[{"role":"user","content":"x"}],"tools":[{"type":"function","f":${inner}}]}`
              : `{"messages":[{"role":"assistant","content":null,"tool_calls":[${inner}]}]}`;
          // The body is level 1; `inner` starts below tools[0] (3) or tool_calls (4).
          const total = (field === 'tools' ? 3 : 4) + depth;
          try {
            parseRequest('chat', parseJsonBody(text, limits), limits);
            expect(total).toBeLessThanOrEqual(limits.maxJsonDepth);
          } catch (err) {
            if (!isProtocolError(err)) throw err;
            expect(err.status).toBe(400);
            expect(total).toBeGreaterThan(limits.maxJsonDepth);
            expect(err.code).toBe('nesting_too_deep');
            expect(err.param).toMatch(
              field === 'tools' ? /^tools\[0\]/ : /^messages\[0\]\.tool_calls/,
            );
          }
        },
      ),
      { numRuns: 300 },
    );
  });
});

describe('limits', () => {
  it('checkOutputTokens: the value, or a 400 naming the field and the bound', () => {
    expect(checkOutputTokens(undefined, 'max_tokens', 1)).toBeUndefined();
    expect(checkOutputTokens(null, 'max_tokens', 1)).toBeUndefined();
    expect(checkOutputTokens(100, 'max_tokens', 1)).toBe(100);
    // Integers past 2^53 are told the bound, not that they are not integers.
    expect(() => checkOutputTokens(Number.MAX_VALUE, 'max_tokens', 1)).toThrow(
      /'max_tokens' must be at most 1048576 \(the model's context length\), got 1\.79.*e\+308/,
    );
    // What JSON.parse makes of a body's 9007199254740993.
    expect(() => checkOutputTokens(JSON.parse('9007199254740993'), 'max_tokens', 1)).toThrow(
      /must be at most 1048576 .*got 9007199254740992/,
    );
    expect(() => checkOutputTokens(1.5, 'max_tokens', 1)).toThrow(
      /'max_tokens' must be an integer/,
    );
    expect(() => checkOutputTokens(Number.NaN, 'max_tokens', 1)).toThrow(/must be an integer/);
    expect(() => checkOutputTokens(0, 'max_tokens', 1)).toThrow(/at least 1/);
    expect(() =>
      checkOutputTokens(5000, 'max_new_tokens', 0, { maxOutputTokens: 4096, maxJsonDepth: 8 }),
    ).toThrow(/'max_new_tokens' must be at most 4096 \(the model's context length\), got 5000/);
    expect(DEFAULT_LIMITS.maxOutputTokens).toBe(1 << 20);
  });

  it('checkJsonDepth passes at the limit and names the path beyond it', () => {
    const at = { a: { b: [{ c: 1 }] } }; // depth 4
    expect(() => checkJsonDepth(at, 4)).not.toThrow();
    try {
      checkJsonDepth(at, 3);
      expect.unreachable();
    } catch (err) {
      expect(isProtocolError(err) && err.param).toBe('a.b[0]');
    }
  });
});
