// readSseData (sse-data.ts) against its reference: JSON.parse of the trimmed payload, then
// carriesTokens and usage.ts's counts. Where it decides, it must say what they say; where
// JSON.parse refuses, it must not decide. Payloads are written from a small JSON tree whose
// member names are the ones read (and some others), given twice at times, named with escapes
// at times, with numbers as JSON writes them and as it does not, spaced in every way JSON
// allows and some ways it does not; then cut or changed a character at a time.
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { MAX_DEPTH, readSseData, SseDataFacts, SseTemplate } from '../src/sse-data.ts';
import { carriesTokens, responseFacts, usageFromObject } from '../src/usage.ts';
import { HARD_PIECES } from './helpers/json-text.ts';

interface Verdict {
  json: boolean;
  tokens?: boolean;
  promptTokens?: number | undefined;
  cachedTokens?: number | undefined;
  outputTokens?: number | undefined;
}

function reference(payload: string): Verdict {
  let value: unknown;
  try {
    value = JSON.parse(payload.trim());
  } catch {
    return { json: false };
  }
  const f = responseFacts(value);
  return {
    json: true,
    tokens: carriesTokens(value),
    promptTokens: f.promptTokens,
    cachedTokens: f.cachedTokens,
    outputTokens: f.outputTokens,
  };
}

type Reader = (text: string, start: number, stop: number, out: SseDataFacts) => boolean;

/** A reader's verdict on a payload inside a line, or undefined when it leaves it. */
function verdictOf(read: Reader, payload: string): Verdict | undefined {
  // The payload sits inside a longer text, as in the router (an event line among others).
  const text = `data:${payload}\n\ndata: {"after":"x"}\n\n`;
  const out = new SseDataFacts();
  if (!read(text, 5, 5 + payload.length, out)) return undefined;
  return {
    json: true,
    tokens: out.tokens,
    promptTokens: out.promptTokens,
    cachedTokens: out.cachedTokens,
    outputTokens: out.outputTokens,
  };
}

/** readSseData's verdict. */
const fast = (payload: string): Verdict | undefined => verdictOf(readSseData, payload);

/** Holds readSseData to the reference on one payload; returns whether it decided. */
function agrees(payload: string): boolean {
  const got = fast(payload);
  if (got === undefined) return false;
  expect(got).toStrictEqual(reference(payload));
  return true;
}

// A JSON tree with members as ordered pairs (so a name can be given twice).
type Node =
  | { t: 'raw'; text: string }
  | { t: 'str'; s: string }
  | { t: 'arr'; items: Node[] }
  | { t: 'obj'; members: [string, Node][] };

const NAMES = [
  'text',
  'output_ids',
  'choices',
  'usage',
  'meta_info',
  'delta',
  'message',
  'content',
  'reasoning_content',
  'prompt_tokens',
  'completion_tokens',
  'prompt_tokens_details',
  'cached_tokens',
  // The Responses API's names.
  'response',
  'input_tokens',
  'output_tokens',
  'input_tokens_details',
  'index',
  'finish_reason',
  'role',
  '',
  '__proto__',
];

const NUMBERS = [
  '0',
  '-0',
  '7',
  '-3',
  '1234567',
  '12.5',
  '0.25e-3',
  '1E+2',
  '1e400',
  '-1e400',
  '9007199254740993',
  // Not JSON: JSON.parse refuses these.
  '01',
  '-012',
  '1.',
  '.5',
  '+1',
  '1e',
  '-',
];

const leaf: fc.Arbitrary<Node> = fc.oneof(
  fc.constantFrom(...NUMBERS).map((text): Node => ({ t: 'raw', text })),
  fc.constantFrom('true', 'false', 'null').map((text): Node => ({ t: 'raw', text })),
  fc.constant<Node>({ t: 'str', s: '' }),
  fc
    .array(fc.constantFrom(...HARD_PIECES), { maxLength: 4 })
    .map((p): Node => ({ t: 'str', s: p.join('') })),
);

const tree = fc.letrec<{ node: Node }>((tie) => ({
  node: fc.oneof(
    { depthSize: 'small', withCrossShrink: true },
    leaf,
    fc.array(tie('node'), { maxLength: 3 }).map((items): Node => ({ t: 'arr', items })),
    fc
      .array(fc.tuple(fc.constantFrom(...NAMES), tie('node')), { maxLength: 5 })
      .map((members): Node => ({ t: 'obj', members })),
  ),
})).node;

/** A chunk-shaped root: an object whose members are mostly the ones read. */
const root: fc.Arbitrary<Node> = fc
  .array(fc.tuple(fc.constantFrom(...NAMES), tree), { maxLength: 6 })
  .map((members): Node => ({ t: 'obj', members }));

interface Style {
  /** Whitespace put between tokens (JSON's four, or others JSON refuses). */
  space: string[];
  /** Name members with a \u escape now and then. */
  escapeNames: boolean;
  /** Write non-ASCII string content as \u escapes (Python's json.dumps). */
  asciiOnly: boolean;
}

const style: fc.Arbitrary<Style> = fc.record({
  space: fc.array(fc.constantFrom('', '', ' ', '\t', '\r', '\n', '\u00a0', '\v', '\f'), {
    minLength: 1,
    maxLength: 4,
  }),
  escapeNames: fc.boolean(),
  asciiOnly: fc.boolean(),
});

function write(n: Node, st: Style, pick: () => number): string {
  const sp = (): string => st.space[pick() % st.space.length]!;
  switch (n.t) {
    case 'raw':
      return n.text;
    case 'str': {
      const j = JSON.stringify(n.s);
      return st.asciiOnly
        ? j.replace(
            /[\u0080-\uffff]/g,
            (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`,
          )
        : j;
    }
    case 'arr':
      return `[${sp()}${n.items.map((x) => write(x, st, pick)).join(`${sp()},${sp()}`)}${sp()}]`;
    case 'obj': {
      const parts = n.members.map(([k, v]) => {
        const name =
          st.escapeNames && k.length > 0 && pick() % 4 === 0
            ? `"\\u${k.charCodeAt(0).toString(16).padStart(4, '0')}${k.slice(1)}"`
            : JSON.stringify(k);
        return `${name}${sp()}:${sp()}${write(v, st, pick)}`;
      });
      return `{${sp()}${parts.join(`${sp()},${sp()}`)}${sp()}}`;
    }
  }
}

const payload: fc.Arbitrary<string> = fc
  .tuple(root, style, fc.integer({ min: 0, max: 1 << 30 }), fc.constantFrom('', ' ', '  ', '\t'))
  .map(([n, st, seed, lead]) => {
    let x = seed;
    const pick = (): number => {
      x = (Math.imul(x, 1103515245) + 12345) >>> 0;
      return x >>> 8;
    };
    return `${lead}${write(n, st, pick)}`;
  });

/** The engines' own chunks: these must take the fast path. */
const ENGINE_EVENTS = [
  // OpenAI / SGLang chat, a content delta, the role chunk, the finish chunk, the usage chunk.
  '{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1733000000,"model":"m","choices":[{"index":0,"delta":{"content":" word"},"logprobs":null,"finish_reason":null}]}',
  '{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}],"usage":null}',
  '{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}',
  '{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m","choices":[],"usage":{"prompt_tokens":1024,"completion_tokens":16,"total_tokens":1040,"prompt_tokens_details":{"cached_tokens":768}}}',
  // vLLM: reasoning deltas, and a chunk with content null.
  '{"id":"cmpl-2","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"reasoning_content":"hmm","content":null},"logprobs":null,"finish_reason":null}]}',
  // Completions.
  '{"id":"cmpl-3","object":"text_completion","created":1,"model":"m","choices":[{"index":0,"text":" the","logprobs":null,"finish_reason":null}]}',
  // SGLang /generate: cumulative text and meta_info in every chunk.
  '{"text":"Hello wor","output_ids":[9906,1917],"meta_info":{"id":"abc","finish_reason":null,"prompt_tokens":12,"completion_tokens":2,"cached_tokens":8,"dp_rank":1}}',
  // The mock worker's writer.
  ' {"choices":[{"index":0,"delta":{"content":"\\u00e9\\n"}}]} ',
  // OpenAI's Responses API: an output delta, an empty one, and the closing event's usage.
  '{"type":"response.output_text.delta","item_id":"msg_1","output_index":0,"content_index":0,"delta":" word","sequence_number":7}',
  '{"type":"response.output_text.delta","item_id":"msg_1","output_index":0,"content_index":0,"delta":"","sequence_number":8}',
  '{"type":"response.completed","sequence_number":9,"response":{"id":"resp_1","status":"completed","usage":{"input_tokens":1205,"input_tokens_details":{"cached_tokens":1024},"output_tokens":40,"total_tokens":1245}}}',
  '{"object":"response","status":"completed","usage":{"input_tokens":12,"input_tokens_details":{"cached_tokens":8},"output_tokens":6,"total_tokens":18}}',
];

describe('readSseData', () => {
  it('reads the engines’ chunks without JSON.parse, as JSON.parse would', () => {
    // All but a Responses stream's closing event (its `response` is left to JSON.parse).
    for (const e of ENGINE_EVENTS) if (!e.includes('"response":')) expect(agrees(e), e).toBe(true);
    expect(fast(ENGINE_EVENTS[0]!)?.tokens).toBe(true);
    expect(fast(ENGINE_EVENTS[1]!)?.tokens).toBe(false);
    expect(fast(ENGINE_EVENTS[3]!)).toMatchObject({
      tokens: false,
      promptTokens: 1024,
      cachedTokens: 768,
      outputTokens: 16,
    });
    expect(fast(ENGINE_EVENTS[4]!)?.tokens).toBe(true);
    expect(fast(ENGINE_EVENTS[6]!)).toMatchObject({
      tokens: true,
      promptTokens: 12,
      cachedTokens: 8,
    });
    // The Responses API: a delta carries output, an empty one does not; the closing event's
    // usage (under `response`) is JSON.parse's to read; a whole body's usage is read here.
    expect(fast(ENGINE_EVENTS[8]!)?.tokens).toBe(true);
    expect(fast(ENGINE_EVENTS[9]!)?.tokens).toBe(false);
    expect(fast(ENGINE_EVENTS[10]!)).toBeUndefined();
    expect(usageFromObject(JSON.parse(ENGINE_EVENTS[10]!))).toEqual({
      promptTokens: 1205,
      cachedTokens: 1024,
      outputTokens: 40,
    });
    expect(fast(ENGINE_EVENTS[11]!)).toMatchObject({
      tokens: false,
      promptTokens: 12,
      cachedTokens: 8,
      outputTokens: 6,
    });
  });

  it('says what JSON.parse and the usage readers say, wherever it decides', () => {
    let decided = 0;
    let valid = 0;
    fc.assert(
      fc.property(payload, (p) => {
        if (reference(p).json) valid++;
        if (agrees(p)) decided++;
        else if (reference(p).json) {
          // Undecided on valid JSON: only for the reasons it names.
          expect(
            /\\u|\u00a0|\v|\f/.test(p) ||
              hasRepeatedName(p) ||
              hasAliasedUsage(p) ||
              hasTopLevel(p, 'response'),
          ).toBe(true);
        }
      }),
      { numRuns: 3000 },
    );
    // Most valid payloads are decided: the fast path is the path.
    expect(decided / valid).toBeGreaterThan(0.5);
  });

  it('never decides a payload JSON.parse refuses, however it is cut or changed', () => {
    const edits = fc.tuple(
      payload,
      fc.nat(),
      fc.constantFrom('delete', 'insert', 'replace', 'cut'),
      fc.constantFrom(...'{}[]":,\\ 0-e.tnfu"x\u0000\n'.split('')),
    );
    fc.assert(
      fc.property(edits, ([p, at, op, ch]) => {
        if (p.length === 0) return;
        const k = at % p.length;
        const q =
          op === 'delete'
            ? p.slice(0, k) + p.slice(k + 1)
            : op === 'insert'
              ? p.slice(0, k) + ch + p.slice(k)
              : op === 'replace'
                ? p.slice(0, k) + ch + p.slice(k + 1)
                : p.slice(0, k);
        const got = fast(q);
        if (got !== undefined) expect(got).toStrictEqual(reference(q));
      }),
      { numRuns: 5000 },
    );
  });

  it('never decides arbitrary text JSON.parse refuses', () => {
    fc.assert(
      fc.property(
        fc.string({ unit: fc.constantFrom(...'{}[]":,\\ 019-+.eEtrufalsn'.split('')) }),
        (p) => {
          const got = fast(p);
          if (got !== undefined) expect(got).toStrictEqual(reference(p));
        },
      ),
      { numRuns: 5000 },
    );
  });

  it('reads nothing past the end it is given', () => {
    // The text goes on after the payload (the next events); a payload cut anywhere is not JSON.
    const out = new SseDataFacts();
    for (const e of [
      ...ENGINE_EVENTS,
      '{"a":true}',
      '{"a":false}',
      '{"a":null}',
      '{"a":"\\u0041"}',
    ]) {
      if (e.includes('"response":')) continue; // left to JSON.parse whole (above)
      const text = e + e;
      for (let k = 0; k < e.length; k++) {
        if (e.slice(0, k).trim() === e.trim()) continue;
        expect(readSseData(text, 0, k, out), `${e} cut at ${k}`).toBe(false);
      }
      expect(readSseData(text, 0, e.length, out)).toBe(true);
    }
  });

  it('leaves to JSON.parse what it does not read: repeats, escaped names, depth, other values', () => {
    // JSON.parse keeps the last of a repeated member: the first says tokens, the last does not.
    expect(fast('{"text":"a","text":""}')).toBeUndefined();
    expect(reference('{"text":"a","text":""}').tokens).toBe(false);
    expect(fast('{"\\u0074ext":"a"}')).toBeUndefined();
    expect(fast('[1,2]')).toBeUndefined();
    expect(fast('[DONE]')).toBeUndefined();
    expect(fast('\u00a0{}')).toBeUndefined();
    const deep = `{"x":${'['.repeat(MAX_DEPTH)}${']'.repeat(MAX_DEPTH)}}`;
    expect(fast(deep)).toBeUndefined();
    expect(reference(deep).json).toBe(true);
    const shallow = `{"x":${'['.repeat(MAX_DEPTH - 2)}${']'.repeat(MAX_DEPTH - 2)}}`;
    expect(agrees(shallow)).toBe(true);
    // A repeated member it does not read is fine.
    expect(agrees('{"id":1,"id":2,"choices":[{"text":"a"}]}')).toBe(true);
  });

  it('reads delta ?? message and content ?? reasoning_content as the router always has', () => {
    const cases: [string, boolean][] = [
      ['{"choices":[{"delta":null,"message":{"content":"x"}}]}', true],
      ['{"choices":[{"delta":{},"message":{"content":"x"}}]}', false],
      ['{"choices":[{"delta":"x","message":{"content":"x"}}]}', false],
      ['{"choices":[{"delta":[{"content":"x"}]}]}', false],
      ['{"choices":[{"delta":{"content":null,"reasoning_content":"r"}}]}', true],
      ['{"choices":[{"delta":{"content":"","reasoning_content":"r"}}]}', false],
      ['{"choices":[{"delta":{"content":["x"]}}]}', false],
      ['{"choices":[1,null,{"text":""},{"text":"y"}]}', true],
      ['{"choices":{"0":{"text":"y"}}}', false],
      ['{"output_ids":[]}', false],
      ['{"output_ids":[0]}', true],
      ['{"text":7}', false],
      ['{"usage":{"prompt_tokens":1e400},"meta_info":{"prompt_tokens":5}}', false],
    ];
    for (const [p, tokens] of cases) {
      expect(agrees(p), p).toBe(true);
      expect(fast(p)!.tokens, p).toBe(tokens);
    }
    // usage wins over meta_info, an unusable count gives way to it.
    expect(
      fast('{"meta_info":{"prompt_tokens":5},"usage":{"prompt_tokens":9}}')!.promptTokens,
    ).toBe(9);
    expect(
      fast('{"usage":{"prompt_tokens":1e400},"meta_info":{"prompt_tokens":5}}')!.promptTokens,
    ).toBe(5);
    expect(
      fast(
        '{"meta_info":{"cached_tokens":3},"usage":{"prompt_tokens":9,"prompt_tokens_details":{"cached_tokens":4}}}',
      ),
    ).toMatchObject({ promptTokens: 9, cachedTokens: 4 });
  });
});

/** Whether some object in p names a member twice (a rough check over the text). */
/** Whether the payload is an object with member `name` at its top level. */
function hasTopLevel(p: string, name: string): boolean {
  const v: unknown = JSON.parse(p.trim());
  return typeof v === 'object' && v !== null && !Array.isArray(v) && Object.hasOwn(v, name);
}

/**
 * Whether some object gives a count under both its chat and its Responses API name
 * (`prompt_tokens` and `input_tokens`, ...): one member of interest given twice.
 */
function hasAliasedUsage(p: string): boolean {
  const pairs = [
    ['prompt_tokens', 'input_tokens'],
    ['completion_tokens', 'output_tokens'],
    ['prompt_tokens_details', 'input_tokens_details'],
  ];
  let found = false;
  const walk = (x: unknown): void => {
    if (Array.isArray(x)) x.forEach(walk);
    else if (x !== null && typeof x === 'object') {
      const o = x as Record<string, unknown>;
      if (pairs.some(([a, b]) => Object.hasOwn(o, a!) && Object.hasOwn(o, b!))) found = true;
      for (const k of Object.keys(o)) walk(o[k]);
    }
  };
  walk(JSON.parse(p.trim()));
  return found;
}

function hasRepeatedName(p: string): boolean {
  let v: unknown;
  try {
    v = JSON.parse(p.trim());
  } catch {
    return false;
  }
  // JSON.parse drops repeats; count names in the text against the parsed members.
  const names = (p.match(/"(?:[^"\\]|\\.)*"\s*:/g) ?? []).length;
  let members = 0;
  const walk = (x: unknown): void => {
    if (Array.isArray(x)) x.forEach(walk);
    else if (x !== null && typeof x === 'object') {
      for (const k of Object.keys(x)) {
        members++;
        walk((x as Record<string, unknown>)[k]);
      }
    }
  };
  walk(v);
  return names > members;
}

/** What SseTemplate says of a payload, the next event of its stream. */
const viaTemplate = (tpl: SseTemplate, payload: string): Verdict | undefined =>
  verdictOf((text, start, stop, out) => tpl.read(text, start, stop, out), payload);

/** The token text of one event, written as clients' JSON writers write it. */
const tokenText = fc
  .tuple(fc.array(fc.constantFrom(...HARD_PIECES, ' word', ''), { maxLength: 4 }), fc.boolean())
  .map(([pieces, ascii]) => {
    const j = JSON.stringify(pieces.join(''));
    return ascii
      ? j.replace(/[\u0080-\uffff]/g, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`)
      : j;
  });

/** Where the varying string sits: a delta's content or reasoning, a completion choice's text. */
const SLOTS = [
  (s: string, extra: string) =>
    `{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":${s}},"logprobs":null,"finish_reason":null}],"extra":${extra}}`,
  (s: string, extra: string) =>
    `{"choices":[{"index":0,"delta":{"reasoning_content":${s},"content":null}}],"usage":{"prompt_tokens":7,"completion_tokens":2},"extra":${extra}}`,
  (s: string, extra: string) =>
    ` {"extra":${extra},"choices":[{"index":0,"text":${s},"finish_reason":null}]}`,
  (s: string, extra: string) =>
    `{"meta_info":{"prompt_tokens":3,"cached_tokens":1},"choices":[{"delta":{"content":${s}},"message":{"content":"m"}}],"x":${extra}}`,
];

describe('SseTemplate', () => {
  it('reads a stream whose events differ in their token text from the template, as JSON.parse would', () => {
    let hits = 0;
    let events = 0;
    fc.assert(
      fc.property(
        fc.integer({ min: 0, max: SLOTS.length - 1 }),
        payload,
        fc.array(tokenText, { minLength: 2, maxLength: 8 }),
        (k, extra, words) => {
          const make = SLOTS[k]!;
          const tpl = new SseTemplate();
          let readable = 0;
          for (const w of words) {
            const p = make(w, extra.trim() === '' ? '0' : extra);
            const got = viaTemplate(tpl, p);
            const want = reference(p);
            if (got === undefined) expect(want.json && fast(p) !== undefined).toBe(false);
            else expect(got).toStrictEqual(want);
            if (fast(p) !== undefined) readable++;
          }
          // Every readable event after the first came from the template (the last shape has
          // two token texts, a delta's and a message's: no template).
          if (k !== 3) {
            events += Math.max(0, readable - 1);
            hits += tpl.hits;
          } else expect(tpl.hits).toBe(0);
        },
      ),
      { numRuns: 2000 },
    );
    expect(events).toBeGreaterThan(500);
    expect(hits).toBe(events);
  });

  it('takes the template for every event after the first of an engine stream', () => {
    const tpl = new SseTemplate();
    const words = ['', ' Hello', ',', ' world', ' é\n', '"quoted"', '\\'];
    for (const w of words) {
      const p = SLOTS[0]!(JSON.stringify(w), 'null');
      expect(viaTemplate(tpl, p)).toStrictEqual(reference(p));
    }
    expect(tpl.hits).toBe(words.length - 1);
    // The role chunk, a content chunk, the finish chunk (no token text), the usage chunk.
    const stream = [
      '{"id":"c","choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}',
      '{"id":"c","choices":[{"index":0,"delta":{"content":"a"}}]}',
      '{"id":"c","choices":[{"index":0,"delta":{"content":"b"}}]}',
      '{"id":"c","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}',
      '{"id":"c","choices":[],"usage":{"prompt_tokens":9,"completion_tokens":2,"prompt_tokens_details":{"cached_tokens":8}}}',
    ];
    const t2 = new SseTemplate();
    for (const p of stream) expect(viaTemplate(t2, p)).toStrictEqual(reference(p));
    expect(t2.hits).toBe(1);
  });

  it('never answers for an event whose token text is not a JSON string, however it is changed', () => {
    const edits = fc.tuple(
      fc.integer({ min: 0, max: SLOTS.length - 1 }),
      tokenText,
      fc.string({ unit: fc.constantFrom(...'"\\\u0000\n\tu0aZ{}[],: '.split('')), maxLength: 12 }),
    );
    fc.assert(
      fc.property(edits, ([k, first, raw]) => {
        const make = SLOTS[k]!;
        const tpl = new SseTemplate();
        const p0 = make(first, '1');
        expect(viaTemplate(tpl, p0)).toStrictEqual(reference(p0));
        // The same text around anything at all where the string was.
        const p = make(`"${raw}"`, '1');
        const got = viaTemplate(tpl, p);
        if (got !== undefined) expect(got).toStrictEqual(reference(p));
        else expect(reference(p).json && fast(p) !== undefined).toBe(false);
      }),
      { numRuns: 5000 },
    );
    // A quote inside the text would end the string early and make a second member: refused.
    const tpl = new SseTemplate();
    viaTemplate(tpl, SLOTS[0]!('"a"', '1'));
    const sneaky = SLOTS[0]!('"a","content":""', '1');
    expect(reference(sneaky).tokens).toBe(false);
    expect(viaTemplate(tpl, sneaky)).toBeUndefined();
  });

  it('answers from the template only when the text around the token text is the same', () => {
    // Same lengths around the string, different counts: the template must not answer.
    const pairs = [
      [
        '{"choices":[{"delta":{"content":"a"}}],"usage":{"prompt_tokens":1}}',
        '{"choices":[{"delta":{"content":"b"}}],"usage":{"prompt_tokens":2}}',
      ],
      [
        '{"meta_info":{"prompt_tokens":1},"choices":[{"delta":{"content":"a"}}]}',
        '{"meta_info":{"prompt_tokens":2},"choices":[{"delta":{"content":"b"}}]}',
      ],
    ];
    for (const [first, second] of pairs) {
      const tpl = new SseTemplate();
      expect(viaTemplate(tpl, first!)).toStrictEqual(reference(first!));
      expect(viaTemplate(tpl, second!)).toStrictEqual(reference(second!));
      expect(viaTemplate(tpl, second!)?.promptTokens).toBe(2);
    }
  });

  it('stops learning after MAX_LEARN templates and still answers right', () => {
    const tpl = new SseTemplate();
    for (let i = 0; i < 20; i++) {
      // Every event differs outside its token text too (a running count), so none matches.
      const p = `{"n":${i},"choices":[{"delta":{"content":"t${i}"}}]}`;
      expect(viaTemplate(tpl, p)).toStrictEqual(reference(p));
    }
    expect(tpl.hits).toBe(0);
    expect((tpl as unknown as { learned: number }).learned).toBe(SseTemplate.MAX_LEARN);
  });
});
