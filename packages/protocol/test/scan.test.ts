import { readFileSync } from 'node:fs';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import {
  approximateTokenizer,
  buildRouteRequest,
  DEFAULT_LIMITS,
  isProtocolError,
  parseJsonBody,
  parseRequest,
  type RequestKind,
  routeRequestFromScan,
  scanRequest,
  topLevelSpansOf,
  withRoutedRank,
} from '../src/index.ts';

/** The full path: parse the whole body, tokenize the whole prompt. */
function full(kind: RequestKind, text: string) {
  const parsed = parseRequest(kind, parseJsonBody(Buffer.from(text)));
  return { parsed, route: buildRouteRequest(parsed, approximateTokenizer) };
}

function errorOf(fn: () => unknown): unknown {
  try {
    fn();
  } catch (err) {
    return isProtocolError(err) ? err.toJSON() : err;
  }
  return undefined;
}

/** Same ids (up to the cap), counts, hints and limits as the full path, or the same error. */
function agree(kind: RequestKind, text: string, caps = [undefined, 1, 3, 16, 64, 1000]) {
  // Past the cap, a tools / tool_calls value counts its raw bytes (whitespace included).
  const minified =
    !/"tool(s|_calls)"\s*:\s*\[/.test(text) ||
    !/[\n ]/.test(text.replace(/"(?:[^"\\]|\\.)*"/g, ''));
  const fullErr = errorOf(() => full(kind, text));
  for (const cap of caps) {
    const opts = cap === undefined ? {} : { maxPromptTokens: cap };
    if (fullErr !== undefined) {
      expect(errorOf(() => scanRequest(kind, Buffer.from(text), opts))).toEqual(fullErr);
      continue;
    }
    const { parsed, route } = full(kind, text);
    const s = scanRequest(kind, Buffer.from(text), opts);
    const want = Array.from(route.inputIds).slice(0, cap ?? Number.POSITIVE_INFINITY);
    expect(Array.from(s.inputIds), `${text.slice(0, 80)} cap ${cap}`).toEqual(want);
    if (cap === undefined || minified) expect(s.promptTokens).toBe(route.inputIds.length);
    else expect(s.promptTokens).toBeGreaterThanOrEqual(route.inputIds.length);
    expect(s.stream).toBe(parsed.stream);
    expect(s.routingKey).toBe(parsed.routingKey);
    expect(s.routedRank).toBe(parsed.routedRank);
    expect(s.bootstrapRoom).toBe(parsed.bootstrapRoom);
    const r = routeRequestFromScan(s, {});
    expect(r.maxTokens).toBe(route.maxTokens);
    if (parsed.items === undefined) expect(r.maxTokensDefaulted).toBe(route.maxTokensDefaulted);
  }
}

const fixture = JSON.parse(
  readFileSync(new URL('../../../test/fixtures/routing-tokenizer.json', import.meta.url), 'utf8'),
) as { cases: Record<string, unknown>[] };

describe('scanRequest reads what routing needs, as the full path does', () => {
  it('gives the shared fixture ids for every chat, text and ids case', () => {
    let n = 0;
    for (const c of fixture.cases) {
      let kind: RequestKind;
      let body: Record<string, unknown>;
      if (c.kind === 'text') {
        kind = 'generate';
        body = { text: c.text };
      } else {
        kind = c.kind as RequestKind;
        body = c.body as Record<string, unknown>;
      }
      const sent = typeof c.body_json === 'string' ? c.body_json : JSON.stringify(body);
      const s = scanRequest(kind, Buffer.from(sent));
      expect(Array.from(s.inputIds), String(c.name)).toEqual(c.ids);
      // Pretty-printed and \u-escaped bodies carry the same request.
      const pretty = JSON.stringify(body, null, 2).replace(
        /[\u0080-\uffff]/g,
        (ch) => `\\u${ch.charCodeAt(0).toString(16).padStart(4, '0')}`,
      );
      expect(Array.from(scanRequest(kind, Buffer.from(pretty)).inputIds)).toEqual(c.ids);
      agree(kind, pretty);
      n++;
    }
    expect(n).toBeGreaterThan(5);
  });

  it('chat: escapes, unicode, parts, tool_calls, tools in any order, hints and limits', () => {
    const cases = [
      { messages: [{ role: 'user', content: 'hello\n"world"\t\\ é € 😀 \u0001' }] },
      {
        model: 'm',
        stream: true,
        stream_options: { include_usage: true },
        max_completion_tokens: 9,
        max_tokens: 4,
        messages: [
          { role: 'system', content: 'S'.repeat(37), name: 'x', extra: { deep: [1, { a: 'b' }] } },
          {
            role: 'user',
            content: [
              { type: 'text', text: 'a\nb' },
              { type: 'image_url', image_url: { url: 'data:...' } },
              { type: 'text', text: 'c' },
            ],
          },
          { role: 'assistant', content: null, tool_calls: [{ id: '1', function: { b: 2, a: 1 } }] },
          { role: 'tool', tool_calls: null },
        ],
        tools: [{ type: 'function', function: { name: 'f', parameters: { type: 'object' } } }],
        routing_key: 'sess-1',
        routed_dp_rank: 2,
        bootstrap_room: 7,
        temperature: 0.5,
      },
      { tools: [], messages: [{ role: 'user', content: [] }] },
      { tools: null, messages: [{ role: 'u', content: '😀'.repeat(50) }] },
      { messages: [{ role: 'user', content: 'x'.repeat(5000) }], unknown: { a: [[[]]] } },
    ];
    for (const body of cases) {
      agree('chat', JSON.stringify(body));
      agree('chat', JSON.stringify(body, null, 1));
    }
    // Surrogate pairs and lone surrogates written as escapes.
    agree('chat', '{"messages":[{"role":"user","content":"a\\ud83d\\ude00b\\ud800c\\u00e9"}]}');
    // Duplicate keys: the last one counts, as in JSON.parse.
    agree('chat', '{"stream":true,"stream":false,"messages":[{"role":"user","content":"x"}]}');
    agree('chat', '{"messages":[{"role":"a","role":"b","content":"x","content":"y"}]}');
  });

  it('completions and generate: text, ids, batches of one, text xor input_ids', () => {
    agree('completion', JSON.stringify({ prompt: 'hello world, a prompt', max_tokens: 3 }));
    agree('completion', JSON.stringify({ prompt: [1, 2, 3, 4294967295, 0] }));
    agree('completion', JSON.stringify({ prompt: [[5, 6, 7]] }));
    agree('completion', JSON.stringify({ prompt: ['one'] }));
    agree('completion', JSON.stringify({ prompt: [['a'], ['b']] }));
    agree('completion', JSON.stringify({ prompt: ['one', 'two'], max_tokens: 4 }));
    agree('completion', '{"prompt":[1.0, 2e1, -0]}');
    agree(
      'generate',
      JSON.stringify({ input_ids: [9, 8, 7], sampling_params: { max_new_tokens: 5 } }),
    );
    agree('generate', JSON.stringify({ text: 'abc\u00e9', rid: 'r1', stream: true }));
    agree('generate', JSON.stringify({ text: 'a', input_ids: [1] }));
    agree('generate', JSON.stringify({ input_ids: Array.from({ length: 3000 }, (_, i) => i * 7) }));
  });

  it("generate batches: a rid list and per-item sampling_params are the full path's to judge", () => {
    // The small fields are checked on a one-prompt stand-in, where a list rid or
    // sampling_params is wrong; for a batch it is right, so the scan must not answer 400.
    const body = '{"text":["a b","c d"],"rid":["r1","r2"],"sampling_params":{"max_new_tokens":1}}';
    const s = scanRequest('generate', Buffer.from(body));
    // Both items' output limits.
    expect(routeRequestFromScan(s).maxTokens).toBe(2);
    const cases: unknown[] = [
      { text: ['a b', 'c d'], rid: ['r1', 'r2'], sampling_params: { max_new_tokens: 1 } },
      {
        input_ids: [
          [1, 2],
          [3, 4],
        ],
        rid: ['r1', 'r2'],
        sampling_params: { max_new_tokens: 1 },
      },
      { input_ids: [[1, 2]], rid: ['r1'] },
      { text: ['a', 'b'], sampling_params: [{ max_new_tokens: 2 }, { max_new_tokens: 3 }] },
      { input_ids: [[5], [6, 7]], sampling_params: [{ max_new_tokens: 9 }, {}], rid: ['x', 'y'] },
      { text: ['a', 'b'], sampling_params: [{}, {}], stream: true },
      // And what the full path refuses, with its error.
      { text: ['a', 'b'], rid: ['r1'] },
      { text: ['a', 'b'], rid: ['r1', 3] },
      { text: 'a', rid: ['r1'] },
      { text: 'a', sampling_params: [{ max_new_tokens: 1 }] },
      { text: ['a', 'b'], sampling_params: [{ max_new_tokens: 1 }] },
      { text: ['a', 'b'], sampling_params: [{ max_new_tokens: 1 }, { max_new_tokens: -1 }] },
      { text: 5, rid: ['r1'] },
      { input_ids: [[1], [2]], rid: ['r1', 'r2'], stream: 'yes' },
    ];
    for (const c of cases) {
      agree('generate', JSON.stringify(c));
      agree('generate', JSON.stringify(c, null, 1));
    }
    const err = errorOf(() =>
      scanRequest(
        'generate',
        Buffer.from(
          JSON.stringify({ text: ['a', 'b'], sampling_params: [{}, { max_new_tokens: -1 }] }),
        ),
      ),
    ) as { error: { param?: string } };
    expect(err.error.param).toBe('sampling_params[1].max_new_tokens');
  });

  it('generate: any prompt shape with any rid and sampling_params gets the full path answer', () => {
    // The property behind the stand-in check: the scan answers 400 only where the full
    // parser does, and otherwise reads the same request.
    const value = fc.oneof(
      fc.constant(1),
      fc.constant(-1),
      fc.constant('r'),
      fc.constant(null),
      fc.constant(true),
    );
    const params = fc.oneof(
      fc.constant({}),
      fc.record(
        { max_new_tokens: fc.oneof(fc.nat(40), value), temperature: fc.oneof(fc.nat(2), value) },
        { requiredKeys: [] },
      ),
      value,
    );
    const body = fc.record(
      {
        prompt: fc.oneof(
          fc.string({ maxLength: 8 }).map((t) => ({ text: t })),
          fc.array(fc.nat(99), { minLength: 1, maxLength: 4 }).map((ids) => ({ input_ids: ids })),
          fc.array(fc.string({ maxLength: 4 }), { maxLength: 3 }).map((t) => ({ text: t })),
          fc
            .array(fc.array(fc.nat(99), { minLength: 1, maxLength: 3 }), {
              minLength: 1,
              maxLength: 3,
            })
            .map((ids) => ({ input_ids: ids })),
        ),
        rid: fc.oneof(value, fc.array(value, { maxLength: 4 })),
        sampling_params: fc.oneof(params, fc.array(params, { maxLength: 4 })),
        stream: fc.boolean(),
      },
      { requiredKeys: ['prompt'] },
    );
    fc.assert(
      fc.property(body, ({ prompt, ...rest }) => {
        agree('generate', JSON.stringify({ ...prompt, ...rest }), [undefined, 2]);
      }),
      { numRuns: 500 },
    );
  });

  it('says the client set no output limit on bodies the full path reads too', () => {
    // The router bounds a non-streamed answer with no client limit by the context, not by
    // the load-accounting default: every path must say which it is.
    const bodies: Array<[RequestKind, string, boolean]> = [
      ['responses', '{"input":"hi"}', true],
      ['responses', '{"input":"hi","max_output_tokens":5}', false],
      ['chat', '{"messages":[{"role":"a","role":"b","content":"x"}]}', true],
      ['chat', '{"messages":[{"role":"a","role":"b","content":"x"}],"max_tokens":3}', false],
      ['completion', '{"prompt":[[1,2]]}', true],
      ['chat', '{"messages":[{"role":"user","content":"x"}]}', true],
    ];
    for (const [kind, body, defaulted] of bodies) {
      const r = routeRequestFromScan(scanRequest(kind, Buffer.from(body)));
      const f = buildRouteRequest(parseRequest(kind, parseJsonBody(body)), approximateTokenizer);
      expect(r.maxTokensDefaulted, body).toBe(defaulted);
      expect(r.maxTokensDefaulted, body).toBe(f.maxTokensDefaulted);
      expect(r.maxTokens, body).toBe(f.maxTokens);
    }
  });

  it('reads small fields in every scalar form as JSON.parse does (direct reads and fallback)', () => {
    const values = [
      '16',
      '0',
      '-0',
      '-5',
      '007',
      '1.0',
      '1e3',
      '-',
      '123456789012345',
      '1234567890123456',
      'true',
      'false',
      'null',
      'trux',
      'nul',
      'fals',
      '"m"',
      '""',
      '"kvroute-mock"',
      '"a\\"b"',
      '"\\u0041"',
      '"é"',
      `"${'x'.repeat(40)}"`,
      '[1]',
      '{"a":1}',
    ];
    const fields = [
      'max_tokens',
      'stream',
      'model',
      'routing_key',
      'temperature',
      'routed_dp_rank',
    ];
    for (const field of fields) {
      for (const v of values) {
        const text = `{"messages":[{"role":"user","content":"hi"}],"${field}":${v}}`;
        agree('chat', text, [undefined, 16]);
        const fullErr = errorOf(() => full('chat', text));
        if (fullErr === undefined) {
          // Read twice: the second read of a short string comes from the intern cache.
          for (let i = 0; i < 2; i++) {
            const scanned = scanRequest('chat', Buffer.from(text));
            expect(scanned.model, text).toBe(full('chat', text).parsed.model);
          }
        }
      }
    }
  });

  it('refuses what the full parser refuses, with its error', () => {
    const bad: [RequestKind, string][] = [
      ['chat', ''],
      ['chat', 'not json'],
      ['chat', '[1]'],
      ['chat', '{"messages":[]}'],
      ['chat', '{"messages":"x"}'],
      ['chat', '{"messages":[{"content":"x"}]}'],
      ['chat', '{"messages":[{"role":""}]}'],
      ['chat', '{"messages":[{"role":"u","content":[{"type":"text"}]}]}'],
      ['chat', '{"messages":[{"role":"u","content":[{"text":"x"}]}]}'],
      ['chat', '{"messages":[{"role":"u","tool_calls":{}}]}'],
      ['chat', '{"messages":[{"role":"u"}],"tools":[1]}'],
      ['chat', '{"messages":[{"role":"u"}],"stream":"yes"}'],
      ['chat', '{"messages":[{"role":"u"}],"max_tokens":0}'],
      ['chat', '{"messages":[{"role":"u"}],"max_tokens":1.5}'],
      ['chat', '{"messages":[{"role":"u"}],"routed_dp_rank":-1}'],
      ['chat', '{"messages":[{"role":"u"}]} trailing'],
      ['chat', '{"messages":[{"role":"u"}],}'],
      ['completion', '{"prompt":[]}'],
      ['completion', '{"prompt":[1,-2]}'],
      ['completion', '{"prompt":[1,4294967296]}'],
      ['completion', '{"prompt":{}}'],
      ['generate', '{"input_ids":"abc"}'],
      ['generate', '{"text":[1,2]}'],
      ['generate', '{}'],
      ['generate', '{"text":"a","sampling_params":{"max_new_tokens":"x"}}'],
    ];
    for (const [kind, text] of bad) {
      const want = errorOf(() => full(kind, text === '' ? ' ' : text));
      expect(want, text).toBeDefined();
      const got = errorOf(() => scanRequest(kind, Buffer.from(text)));
      if (text === '') expect(got).toMatchObject({ error: { code: 'invalid_json' } });
      else expect(got, text).toEqual(want);
    }
  });

  it('caps JSON nesting with a 400 naming where', () => {
    const deep = `{"messages":[{"role":"u"}],"tools":[{"a":${'['.repeat(80)}${']'.repeat(80)}}]}`;
    const err = errorOf(() => scanRequest('chat', Buffer.from(deep)));
    expect(err).toMatchObject({
      error: { code: 'nesting_too_deep', param: expect.stringMatching(/^tools\[0\]\.a/) },
    });
    expect(
      errorOf(() =>
        scanRequest('chat', Buffer.from(deep), {
          limits: { ...DEFAULT_LIMITS, maxJsonDepth: 100 },
        }),
      ),
    ).toBeUndefined();
  });

  it('decodes no more of a long prompt than the cap needs, and still counts all of it', () => {
    const long = 'word '.repeat(40_000); // 200 KB: past V8's large-object threshold
    const text = JSON.stringify({ messages: [{ role: 'user', content: long }] });
    const s = scanRequest('chat', Buffer.from(text), { maxPromptTokens: 4096 });
    expect(s.inputIds.length).toBe(4096);
    expect(s.promptTokens).toBe(full('chat', text).route.inputIds.length);
    expect(Array.from(s.inputIds)).toEqual(
      Array.from(full('chat', text).route.inputIds.subarray(0, 4096)),
    );
  });
});

describe('whole prompts past the large-string threshold', () => {
  it('decode in pieces to exactly the full path ids, escapes and multi-byte characters across the cuts', () => {
    // Escapes, 2-, 3- and 4-byte characters and surrogate-pair escapes at every offset
    // around the 64 KiB piece boundaries.
    const unit = String.raw`ab\n\"é€😀\u00e9\ud83d\ude00\t`;
    const long = Array.from({ length: 13_000 }, (_, i) => `${i % 7 === 0 ? 'x' : ''}${unit}`).join(
      '',
    );
    const text = `{"messages":[{"role":"system","content":"${long}"},{"role":"user","content":"q"}]}`;
    expect(Buffer.byteLength(text)).toBeGreaterThan(200 * 1024);
    expect(full('chat', text).route.inputIds.length).toBeGreaterThan(50_000);
    agree('chat', text, [undefined, 100_000]);
    // Long runs of 3-byte characters after one escape: some shift puts a cut inside one.
    for (let shift = 0; shift < 3; shift++) {
      const run = `\\n${'a'.repeat(shift)}${'€'.repeat(40_000)}`;
      agree('chat', `{"messages":[{"role":"user","content":"${run}"}]}`, [undefined]);
    }
  });

  it('read a whole large body as the full path does: tools, parts, generate text, bad bytes, bad escapes', () => {
    const big = 'x'.repeat(70_000);
    const tools = JSON.stringify([{ type: 'function', function: { name: 'f', description: big } }]);
    agree(
      'chat',
      `{"tools": ${tools}, "messages":[{"role":"system","content":[{"type":"text","text":"${big}\\n"},{"type":"text","text":"b"}]},{"role":"assistant","content":null,"tool_calls":[{"id":"1","type":"function","function":{"name":"f","arguments":"{}"}}]}]}`,
      [undefined],
    );
    agree('generate', `{"text":"${big}\\t\\u00e9"}`, [undefined]);
    agree('completion', `{"prompt":"${big}"}`, [undefined]);
    // A raw control character in an escaped string: refused as the full parser refuses it.
    agree('chat', `{"messages":[{"role":"user","content":"\\n${big}\u0001"}]}`, [undefined]);
    // Bytes that are not UTF-8 read as U+FFFD, as the full path's string does.
    const head = Buffer.from('{"messages":[{"role":"user","content":"');
    const tail = Buffer.from('"}]}');
    for (const body of [
      Buffer.concat([head, Buffer.from(big), Buffer.from([0xff, 0xc3]), tail]),
      Buffer.concat([head, Buffer.from(`\\n${big}`), Buffer.from([0xe2, 0x82]), tail]),
    ]) {
      const want = buildRouteRequest(
        parseRequest('chat', parseJsonBody(body)),
        approximateTokenizer,
      ).inputIds;
      expect(Array.from(scanRequest('chat', body).inputIds)).toEqual(Array.from(want));
    }
  });
});

describe('topLevelSpansOf', () => {
  it('cuts every top-level member of the given names in one walk, nested ones kept', () => {
    for (const text of [
      '{"a":1,"b":{"a":2},"c":3}',
      '{"c":3,"a":1}',
      '{"a":1,"c":[1,{"c":2}],"b":2}',
      '{"c":1}',
    ]) {
      const raw = Buffer.from(text);
      const spans = topLevelSpansOf(raw, new Set(['a', 'c']));
      const rest = Object.fromEntries(
        Object.entries(JSON.parse(text) as Record<string, unknown>).filter(
          ([k]) => k !== 'a' && k !== 'c',
        ),
      );
      expect(JSON.parse(withRoutedRank(raw, spans, undefined).toString()), text).toEqual(rest);
    }
  });
});

describe('withRoutedRank', () => {
  const cases = [
    '{"prompt":"x","routed_dp_rank":3}',
    '{"routed_dp_rank":3,"prompt":"x"}',
    '{ "a": 1 , "routed_dp_rank" : 3 , "prompt" : "x" }',
    '{"prompt":"x" ,\n "routed_dp_rank":3\n}',
    '{"routed_dp_rank":1,"prompt":"x","routed_dp_rank":2}',
    '{"prompt":"x"}',
  ];
  it('cuts the client routed_dp_rank and splices the rank in, leaving every other byte', () => {
    for (const text of cases) {
      const raw = Buffer.from(text);
      const spans = scanRequest('completion', raw).routedRankSpans;
      const { routed_dp_rank: _drop, ...rest } = JSON.parse(text);
      expect(JSON.parse(withRoutedRank(raw, spans, undefined).toString()), text).toEqual(rest);
      const set = JSON.parse(withRoutedRank(raw, spans, 5).toString());
      expect(set, text).toEqual({ ...rest, routed_dp_rank: 5 });
    }
    const raw = Buffer.from('{"prompt":"x"}');
    expect(withRoutedRank(raw, [], undefined)).toBe(raw);
    expect(withRoutedRank(Buffer.from('{ }'), [], 1).toString()).toBe('{"routed_dp_rank":1 }');
  });
});
