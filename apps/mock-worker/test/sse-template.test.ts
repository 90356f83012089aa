// The router checks every event of a streamed answer; an event that is the stream's previous
// one with only its token text changed is checked against it (protocol's SseTemplate) instead
// of through JSON.parse. This worker's streams, written as SGLang's and OpenAI's are, must
// take that path, and say there what JSON.parse says.
import { carriesTokens, SseDataFacts, SseTemplate, usageFromObject } from '@kvroute/protocol';
import { describe, expect, it } from 'vitest';
import {
  type GenerativeKind,
  newOutcome,
  streamDelta,
  streamEnd,
  streamStart,
} from '../src/responses.ts';

/** The data payloads of an SSE text, with where each sits in it. */
function dataLines(text: string): { start: number; end: number }[] {
  const out: { start: number; end: number }[] = [];
  let at = 0;
  for (const line of text.split('\n')) {
    if (line.startsWith('data:')) out.push({ start: at + 5, end: at + line.length });
    at += line.length + 1;
  }
  return out;
}

function stream(kind: GenerativeKind, words: string[], includeUsage: boolean): string {
  const o = newOutcome({ id: 'cmpl-7', kind, model: 'mock', created: 1_733_000_000, includeUsage });
  o.promptTokens = 1_024;
  o.cachedTokens = 768;
  let text = streamStart(o);
  for (const w of words) {
    o.text += w;
    o.completionTokens++;
    o.outputIds.push(o.completionTokens);
    text += streamDelta(o, w);
  }
  o.finished = true;
  return text + streamEnd(o);
}

const WORDS = ['Hello', ',', ' wor', 'ld', ' é', '\n', ' "quoted"', ' \\', '', ' end'];

describe("the mock worker's streams and the router's event template", () => {
  it.each([
    ['chat', true],
    ['chat', false],
    ['completion', true],
  ] as const)(
    '%s (usage chunk: %s): every token event after the first from the template',
    (kind, usage) => {
      const text = stream(kind, WORDS, usage);
      const tpl = new SseTemplate();
      const out = new SseDataFacts();
      let events = 0;
      for (const { start, end } of dataLines(text)) {
        const payload = text.slice(start, end).trim();
        if (payload === '[DONE]') continue;
        const value: unknown = JSON.parse(payload);
        expect(tpl.read(text, start, end, out), payload).toBe(true);
        expect(out.tokens, payload).toBe(carriesTokens(value));
        const u = usageFromObject(value);
        expect(out.promptTokens, payload).toBe(u?.promptTokens);
        expect(out.cachedTokens, payload).toBe(u?.cachedTokens);
        events++;
      }
      expect(events).toBeGreaterThanOrEqual(WORDS.length);
      // The first token chunk teaches the template (chat's role chunk teaches one first, which
      // the token chunks do not match); every token chunk after it matches.
      expect(tpl.hits).toBe(WORDS.length - 1);
    },
  );

  it('/generate streams (cumulative text, counts that change) are read whole, as JSON.parse would', () => {
    const text = stream('generate', WORDS, false);
    const tpl = new SseTemplate();
    const out = new SseDataFacts();
    for (const { start, end } of dataLines(text)) {
      const payload = text.slice(start, end).trim();
      if (payload === '[DONE]') continue;
      const value: unknown = JSON.parse(payload);
      expect(tpl.read(text, start, end, out), payload).toBe(true);
      expect(out.tokens).toBe(carriesTokens(value));
      expect(out.promptTokens).toBe(usageFromObject(value)?.promptTokens);
    }
    expect(tpl.hits).toBe(0);
  });
});
