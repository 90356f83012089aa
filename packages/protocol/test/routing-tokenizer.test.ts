import { readFileSync } from 'node:fs';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import {
  buildRoutingFixture,
  FIXTURE_PATH,
  serializeRoutingFixture,
} from '../scripts/routing-fixture.ts';
import {
  approximateText,
  approximateTokenIds,
  approximateTokenizer,
  canonicalChatText,
  createRoutingTokenizer,
  messageText,
} from '../src/index.ts';

describe('approximate tokenizer', () => {
  it('groups UTF-8 bytes by 4, little-endian, last group zero-padded', () => {
    expect(Array.from(approximateTokenIds(''))).toEqual([]);
    expect(Array.from(approximateTokenIds('a'))).toEqual([0x61]);
    expect(Array.from(approximateTokenIds('abcd'))).toEqual([0x64636261]);
    expect(Array.from(approximateTokenIds('abcde'))).toEqual([0x64636261, 0x65]);
    // é = C3 A9; € = E2 82 AC; 😀 = F0 9F 98 80 (high bytes must not go negative)
    expect(Array.from(approximateTokenIds('é€'))).toEqual([0x82e2a9c3, 0xac]);
    expect(Array.from(approximateTokenIds('😀'))).toEqual([0x80989ff0]);
  });
  it('decodes its ids back to the text (a text ending in NUL loses those: they read as padding)', () => {
    fc.assert(
      fc.property(fc.string({ unit: 'grapheme' }), (text) => {
        fc.pre(!text.endsWith('\u0000'));
        expect(approximateTokenizer.decode([...approximateTokenIds(text)])).toBe(text);
      }),
    );
    // Bytes that are not UTF-8 (ids no text produced) decode to U+FFFD, not an exception.
    expect(approximateText([0xff])).toBe('\ufffd');
    expect(approximateText([])).toBe('');
  });
  it('a text extending another keeps all but the shorter one’s padded last group', () => {
    const a = approximateTokenIds('system prompt + turn 1');
    const b = approximateTokenIds('system prompt + turn 1 + turn 2');
    const full = Math.floor(new TextEncoder().encode('system prompt + turn 1').length / 4);
    expect(Array.from(b.subarray(0, full))).toEqual(Array.from(a.subarray(0, full)));
  });
  it('canonical chat text: tools, messages, tool_calls, generation prompt', () => {
    const tools = [{ type: 'function', function: { name: 'f' } }];
    const text = canonicalChatText(
      [
        { role: 'system', content: 'S' },
        {
          role: 'user',
          content: [
            { type: 'text', text: 'a' },
            { type: 'image_url' },
            { type: 'text', text: 'b' },
          ],
        },
        { role: 'assistant', content: null, tool_calls: [{ id: '1' }] },
        { role: 'tool' },
      ],
      tools,
    );
    expect(text).toBe(
      '<|tools|>\n[{"type":"function","function":{"name":"f"}}]\n' +
        '<|system|>\nS\n<|user|>\na\nb\n<|assistant|>\n\n<|tool_calls|>[{"id":"1"}]\n<|tool|>\n\n<|assistant|>\n',
    );
    expect(canonicalChatText([{ role: 'user', content: 'x' }], [])).toBe(
      '<|user|>\nx\n<|assistant|>\n',
    );
    expect(messageText(undefined)).toBe('');
  });
  it('a later chat turn extends the earlier turn’s routing ids up to the generation prompt', () => {
    const turn1 = [
      { role: 'system', content: 'long shared system prompt' },
      { role: 'user', content: 'q1' },
    ];
    const turn2 = [...turn1, { role: 'assistant', content: 'a1' }, { role: 'user', content: 'q2' }];
    const t1 = canonicalChatText(turn1);
    const t2 = canonicalChatText(turn2);
    const shared = t1.slice(0, -'<|assistant|>\n'.length);
    expect(t2.startsWith(shared)).toBe(true);
  });
  it('encodePrompt: ids as given, text and chat tokenized', () => {
    expect(Array.from(approximateTokenizer.encodePrompt({ type: 'ids', ids: [5, 6] }))).toEqual([
      5, 6,
    ]);
    expect(approximateTokenizer.encodePrompt({ type: 'text', text: 'abcdefg' }).length).toBe(2);
    const chat = approximateTokenizer.encodePrompt({
      type: 'chat',
      messages: [{ role: 'user', content: 'x' }],
    });
    expect(Array.from(chat)).toEqual(
      Array.from(approximateTokenIds('<|user|>\nx\n<|assistant|>\n')),
    );
    expect(createRoutingTokenizer()).toBe(approximateTokenizer);
  });
});

describe('routing fixture (test/fixtures/routing-tokenizer.json)', () => {
  it('is current: regenerate with `pnpm --filter @kvroute/protocol fixture`', () => {
    expect(readFileSync(FIXTURE_PATH, 'utf8')).toBe(serializeRoutingFixture());
  });
  it('covers ~30 cases of every kind, each id an uint32', () => {
    const { cases } = buildRoutingFixture();
    expect(cases.length).toBeGreaterThanOrEqual(30);
    for (const kind of ['text', 'chat', 'completion', 'generate']) {
      expect(cases.some((c) => c.kind === kind)).toBe(true);
    }
    for (const c of cases) {
      for (const id of c.ids) expect(id >>> 0).toBe(id);
      if (c.routing_text !== null) {
        expect(c.ids).toEqual(Array.from(approximateTokenIds(c.routing_text)));
      }
    }
    expect(new Set(cases.map((c) => c.name)).size).toBe(cases.length);
  });
});
