// Builds test/fixtures/routing-tokenizer.json from the TS implementation, so the Python GPU
// worker can prove it produces the same routing ids. `write-routing-fixture.ts`
// writes it; test/routing-fixture.test.ts fails when the committed file is stale.
import { fileURLToPath } from 'node:url';
import { parseRequest, type RequestKind } from '../src/parse.ts';
import { approximateTokenizer } from '../src/tokenizer.ts';

export const FIXTURE_PATH = fileURLToPath(
  new URL('../../../test/fixtures/routing-tokenizer.json', import.meta.url),
);

type CaseInput =
  | { kind: 'text'; text: string }
  | { kind: RequestKind; body: Record<string, unknown> }
  /** The body as raw JSON text, for what JSON.parse + JSON.stringify normalize (key order, numbers). */
  | { kind: RequestKind; bodyJson: string };

const weather = {
  type: 'function',
  function: {
    name: 'get_weather',
    description: 'Current weather for a city, in °C',
    parameters: {
      type: 'object',
      properties: { city: { type: 'string' }, days: { type: 'integer', minimum: 1, maximum: 7 } },
      required: ['city'],
    },
  },
};
const search = {
  type: 'function',
  function: {
    name: 'search',
    description: 'Search "the web"\\ for a query\twith tabs',
    parameters: {
      type: 'object',
      properties: { q: { type: 'string' }, k: { type: 'number', default: 0.5 } },
    },
  },
};
const call = (id: string, name: string, args: string) => ({
  id,
  type: 'function',
  function: { name, arguments: args },
});
const longSystem = `You are a coding agent. ${'Follow the repository conventions. '.repeat(12)}`;

const CASES: Array<{ name: string; input: CaseInput }> = [
  { name: 'text: empty', input: { kind: 'text', text: '' } },
  { name: 'text: one byte (zero padding)', input: { kind: 'text', text: 'a' } },
  { name: 'text: exactly one group', input: { kind: 'text', text: 'abcd' } },
  { name: 'text: five bytes', input: { kind: 'text', text: 'abcde' } },
  {
    name: 'text: ascii sentence',
    input: { kind: 'text', text: 'The quick brown fox jumps over the lazy dog.' },
  },
  {
    name: 'text: latin-1 accents (2-byte UTF-8)',
    input: { kind: 'text', text: 'héllo wörld, ça va? ñ' },
  },
  {
    name: 'text: CJK (3-byte UTF-8)',
    input: { kind: 'text', text: '你好，世界。日本語のテキスト' },
  },
  {
    name: 'text: emoji (4-byte UTF-8, surrogate pairs in JS)',
    input: { kind: 'text', text: '👋🏽 hi 🚀' },
  },
  {
    name: 'text: ZWJ family emoji and combining marks',
    input: { kind: 'text', text: '👨‍👩‍👧 e\u0301 a\u0308' },
  },
  {
    name: 'text: NUL and control characters',
    input: { kind: 'text', text: '\u0000a\u0001b\tc\r\nd' },
  },
  {
    name: 'text: right-to-left and U+2028',
    input: { kind: 'text', text: 'مرحبا بالعالم\u2028שלום' },
  },
  {
    name: 'completion: string prompt',
    input: {
      kind: 'completion',
      body: { model: 'm', prompt: 'def fib(n):\n    ', max_tokens: 32 },
    },
  },
  { name: 'completion: empty string prompt', input: { kind: 'completion', body: { prompt: '' } } },
  {
    name: 'completion: token id array (as given)',
    input: { kind: 'completion', body: { prompt: [1, 2, 3, 4294967295, 0, 128000] } },
  },
  {
    name: 'completion: batch of one string',
    input: { kind: 'completion', body: { prompt: ['only one prompt'] } },
  },
  {
    name: 'completion: batch of one id array',
    input: { kind: 'completion', body: { prompt: [[7, 8, 9]] } },
  },
  {
    name: 'generate: text',
    input: {
      kind: 'generate',
      body: { text: 'Once upon a time', sampling_params: { max_new_tokens: 8 } },
    },
  },
  {
    name: 'generate: input_ids (as given)',
    input: { kind: 'generate', body: { input_ids: [151644, 8948, 198, 42] } },
  },
  {
    name: 'chat: single user message',
    input: { kind: 'chat', body: { messages: [{ role: 'user', content: 'Hello!' }] } },
  },
  {
    name: 'chat: system + user',
    input: {
      kind: 'chat',
      body: {
        model: 'm',
        messages: [
          { role: 'system', content: 'You are terse.' },
          { role: 'user', content: 'Why is the sky blue?' },
        ],
      },
    },
  },
  {
    name: 'chat: null and missing content',
    input: {
      kind: 'chat',
      body: {
        messages: [
          { role: 'user', content: 'ping' },
          { role: 'assistant', content: null },
          { role: 'user' },
        ],
      },
    },
  },
  {
    name: 'chat: content parts (text joined with \\n, image ignored)',
    input: {
      kind: 'chat',
      body: {
        messages: [
          {
            role: 'user',
            content: [
              { type: 'text', text: 'Describe this image.' },
              { type: 'image_url', image_url: { url: 'https://example.com/a.png' } },
              { type: 'text', text: 'Be brief.' },
            ],
          },
        ],
      },
    },
  },
  {
    name: 'chat: empty content parts array',
    input: { kind: 'chat', body: { messages: [{ role: 'user', content: [] }] } },
  },
  {
    name: 'chat: empty string content',
    input: { kind: 'chat', body: { messages: [{ role: 'user', content: '' }] } },
  },
  {
    name: 'chat: tools',
    input: {
      kind: 'chat',
      body: {
        tools: [weather, search],
        messages: [{ role: 'user', content: 'Weather in Paris?' }],
      },
    },
  },
  {
    name: 'chat: empty tools array gives no tools line',
    input: { kind: 'chat', body: { tools: [], messages: [{ role: 'user', content: 'hi' }] } },
  },
  {
    name: 'chat: assistant tool_calls and tool results',
    input: {
      kind: 'chat',
      body: {
        tools: [weather],
        messages: [
          { role: 'system', content: 'Use tools when useful.' },
          { role: 'user', content: 'Weather in Paris and Zürich for 2 days?' },
          {
            role: 'assistant',
            content: null,
            tool_calls: [
              call('call_1', 'get_weather', '{"city":"Paris","days":2}'),
              call('call_2', 'get_weather', '{"city":"Zürich","days":2}'),
            ],
          },
          { role: 'tool', tool_call_id: 'call_1', content: '{"temp_c":18}' },
          { role: 'tool', tool_call_id: 'call_2', content: '{"temp_c":-3}' },
        ],
      },
    },
  },
  {
    name: 'chat: tool_calls with text content',
    input: {
      kind: 'chat',
      body: {
        messages: [
          { role: 'user', content: 'search it' },
          {
            role: 'assistant',
            content: 'Searching now.',
            tool_calls: [call('c', 'search', '{"q":"kv cache"}')],
          },
        ],
      },
    },
  },
  {
    name: 'chat: empty tool_calls array is still serialized',
    input: {
      kind: 'chat',
      body: {
        messages: [
          { role: 'assistant', content: 'x', tool_calls: [] },
          { role: 'user', content: 'y' },
        ],
      },
    },
  },
  {
    name: 'chat: unicode in content and tools (JSON not ASCII-escaped)',
    input: {
      kind: 'chat',
      body: {
        tools: [
          {
            type: 'function',
            function: { name: 'traduire', description: 'Übersetzt 日本語 → français 🇫🇷' },
          },
        ],
        messages: [{ role: 'user', content: 'Traduis «bonjour» en 日本語 😀' }],
      },
    },
  },
  {
    name: 'chat: JSON escapes in tool_calls (quotes, backslash, control chars)',
    input: {
      kind: 'chat',
      body: {
        messages: [
          { role: 'user', content: 'path?' },
          {
            role: 'assistant',
            content: '',
            tool_calls: [call('c', 'ls', '{"path":"C:\\\\dir \\"x\\"","sep":"\\u0001"}')],
          },
          { role: 'tool', content: 'a\u0001b\u001fc\u007fd "q" \\ /' },
        ],
      },
    },
  },
  {
    name: 'chat: developer role',
    input: {
      kind: 'chat',
      body: {
        messages: [
          { role: 'developer', content: 'Answer in JSON.' },
          { role: 'user', content: '{}' },
        ],
      },
    },
  },
  {
    name: 'chat: multi-turn agent with long system prompt',
    input: {
      kind: 'chat',
      body: {
        tools: [search],
        messages: [
          { role: 'system', content: longSystem },
          { role: 'user', content: 'Fix the failing test in src/parse.ts.' },
          {
            role: 'assistant',
            content: 'Looking at the file first.',
            tool_calls: [call('t1', 'search', '{"q":"parse.ts"}')],
          },
          { role: 'tool', tool_call_id: 't1', content: 'src/parse.ts:42: expected number' },
          { role: 'assistant', content: 'Found it: the type check is inverted.' },
          { role: 'user', content: 'Great, apply the fix.' },
        ],
      },
    },
  },
  { name: 'text: lone surrogate becomes U+FFFD', input: { kind: 'text', text: 'a\ud800b' } },
  {
    name: 'chat (raw JSON): integer-like keys go first in JSON.stringify',
    input: {
      kind: 'chat',
      bodyJson:
        '{"tools":[{"type":"function","function":{"name":"pick","parameters":{"type":"object","properties":{"b":{"type":"string"},"10":{"type":"integer"},"a":{},"2":{},"01":{}}}}}],"messages":[{"role":"user","content":"pick one"}]}',
    },
  },
  {
    name: 'chat (raw JSON): numbers as JSON.stringify prints them (1.0 -> 1, 1E2 -> 100)',
    input: {
      kind: 'chat',
      bodyJson:
        '{"tools":[{"type":"function","function":{"name":"f","parameters":{"type":"number","default":1.0,"minimum":-0.0,"maximum":1E2,"multipleOf":2.50,"tiny":1e-7,"big":1.5e300,"huge":123456789012345678901234}}}],"messages":[{"role":"assistant","content":null,"tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":{"x":3.0,"y":0.000001}}}]},{"role":"user","content":"\\u00e9\\ud83d\\ude00 escaped"}]}',
    },
  },
];

export interface FixtureCase {
  name: string;
  kind: 'text' | RequestKind;
  text?: string;
  body?: Record<string, unknown>;
  /** Raw JSON text of the body, when the case is about what JSON.parse/JSON.stringify normalize. */
  body_json?: string;
  /** The text that was tokenized (canonical chat text for chat); null when ids were given. */
  routing_text: string | null;
  ids: number[];
}

export function buildRoutingFixture() {
  const cases: FixtureCase[] = CASES.map(({ name, input }) => {
    if (input.kind === 'text') {
      return {
        name,
        kind: 'text',
        text: input.text,
        routing_text: input.text,
        ids: Array.from(approximateTokenizer.encodeText(input.text)),
      };
    }
    const body =
      'bodyJson' in input ? (JSON.parse(input.bodyJson) as Record<string, unknown>) : input.body;
    const { prompt } = parseRequest(input.kind, body);
    const routingText =
      prompt.type === 'chat'
        ? approximateTokenizer.chatText(prompt.messages, prompt.tools)
        : prompt.type === 'text'
          ? prompt.text
          : null;
    return {
      name,
      kind: input.kind,
      body,
      ...('bodyJson' in input ? { body_json: input.bodyJson } : {}),
      routing_text: routingText,
      ids: Array.from(approximateTokenizer.encodePrompt(prompt)),
    };
  });
  return {
    format: 'kvroute-routing-tokenizer-fixture/v1',
    tokenizer: 'approximate',
    description:
      'Expected routing token ids of the approximate tokenizer. kind "text": tokenize `text`; ' +
      'kind chat|completion|generate: parse `body` as that endpoint would and tokenize its prompt; ' +
      'where `body_json` is present it is the raw request text (`body` is its JSON.parse), for cases about ' +
      'JSON.stringify normalization: integer-like keys first, number formatting. ' +
      'Generated by packages/protocol/scripts/write-routing-fixture.ts; do not edit by hand.',
    cases,
  };
}

export function serializeRoutingFixture(): string {
  return `${JSON.stringify(buildRoutingFixture(), null, 2)}\n`;
}
