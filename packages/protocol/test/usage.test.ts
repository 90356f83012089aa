import { describe, expect, it } from 'vitest';
import { responseFacts, UsageScanner, usageFromObject } from '../src/usage.ts';

function feed(sse: boolean, text: string, cut: number[]): ReturnType<UsageScanner['result']> {
  const scanner = new UsageScanner(sse);
  const buf = Buffer.from(text);
  let prev = 0;
  for (const c of [...cut, buf.length]) {
    scanner.push(buf.subarray(prev, c));
    prev = c;
  }
  return scanner.result();
}

describe('UsageScanner', () => {
  const sse = [
    'data: {"choices":[{"delta":{"content":"é"}}]}',
    '',
    'data: {"choices":[],"usage":{"prompt_tokens":120,"completion_tokens":4,"prompt_tokens_details":{"cached_tokens":96}}}',
    '',
    'data: [DONE]',
    '',
    '',
  ].join('\n');

  it('reads usage from the final OpenAI SSE chunk, whatever the chunk boundaries', () => {
    for (const cut of [
      [],
      [1],
      [35],
      [36, 37],
      [60, 120, 121],
      Array.from({ length: 50 }, (_, i) => i * 4 + 1),
    ]) {
      expect(feed(true, sse, cut)).toEqual({
        promptTokens: 120,
        cachedTokens: 96,
        outputTokens: 4,
      });
    }
  });

  it('takes the last meta_info of an SGLang /generate stream', () => {
    const gen = [
      'data: {"text":"a","meta_info":{"prompt_tokens":50,"cached_tokens":0}}',
      '',
      'data: {"text":"ab","meta_info":{"prompt_tokens":50,"cached_tokens":40}}',
      '',
      'data: [DONE]',
      '',
    ].join('\n');
    expect(feed(true, gen, [10, 80])).toEqual({ promptTokens: 50, cachedTokens: 40 });
  });

  it('parses a plain JSON body at the end', () => {
    const body = JSON.stringify({ text: 'x', meta_info: { prompt_tokens: 7, cached_tokens: 3 } });
    expect(feed(false, body, [5, 9])).toEqual({ promptTokens: 7, cachedTokens: 3 });
    expect(feed(false, '{"error":{"message":"x"}}', [])).toBeUndefined();
    expect(feed(false, 'not json', [])).toBeUndefined();
  });

  it('usage without cached details leaves cached tokens undefined, never 0', () => {
    const u = usageFromObject({ usage: { prompt_tokens: 5 } });
    expect(u).toEqual({ promptTokens: 5 });
    expect(u?.cachedTokens).toBeUndefined();
    expect(usageFromObject({ meta_info: { prompt_tokens: 5, completion_tokens: 2 } })).toEqual({
      promptTokens: 5,
      outputTokens: 2,
    });
    // A reported 0 stays a 0: the worker did look and found nothing cached.
    expect(
      usageFromObject({ usage: { prompt_tokens: 5, prompt_tokens_details: { cached_tokens: 0 } } }),
    ).toEqual({ promptTokens: 5, cachedTokens: 0 });
    expect(usageFromObject({ usage: null })).toBeUndefined();
  });
});

describe('responseFacts', () => {
  it('reads SGLang meta_info', () => {
    expect(
      responseFacts({
        text: 'a',
        meta_info: { prompt_tokens: 10, cached_tokens: 4, completion_tokens: 1 },
      }),
    ).toEqual({
      content: true,
      promptTokens: 10,
      cachedTokens: 4,
      outputTokens: 1,
      rank: undefined,
    });
  });
  it('reads OpenAI usage with prompt_tokens_details', () => {
    const f = responseFacts({
      choices: [],
      usage: {
        prompt_tokens: 9,
        completion_tokens: 2,
        prompt_tokens_details: { cached_tokens: 8 },
      },
    });
    expect(f).toMatchObject({ content: false, promptTokens: 9, cachedTokens: 8, outputTokens: 2 });
  });
  it('does not count a role-only or empty chunk as content', () => {
    expect(responseFacts({ choices: [{ delta: { role: 'assistant' } }] }).content).toBe(false);
    expect(responseFacts({ choices: [{ text: '' }] }).content).toBe(false);
    expect(responseFacts({ choices: [{ delta: { content: 'x' } }] }).content).toBe(true);
  });
  it('surfaces an error object', () => {
    expect(responseFacts({ error: { message: 'boom' } }).error).toBe('boom');
  });
});
