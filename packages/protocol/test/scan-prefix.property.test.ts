// The routing prefix of a long escaped prompt is decoded in pieces cut at raw positions: a
// piece must never end inside an escape, between the two escapes of a surrogate pair or inside
// a UTF-8 character, or the ids differ from the whole prompt's. Property: for prompts built
// from the characters that make those cuts hard, written as JSON.stringify writes them or
// with every non-ASCII character escaped (as Python's json.dumps does by default), under any
// routing cap, the scan gives the full path's ids up to the cap and its exact token count.
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  approximateTokenizer,
  buildRouteRequest,
  parseJsonBody,
  parseRequest,
  scanRequest,
} from '../src/index.ts';
import { jsonStringWasmActive, useJsonStringWasm } from '../src/json-string.ts';
import { pieceEnd } from '../src/scan.ts';
import { asciiJson, HARD_PIECES, jsonString, STYLES, type Style } from './helpers/json-text.ts';

/**
 * `content` as a JSON string in `style`: its bytes `b` (quotes included, content [1, e)), and
 * the UTF-8 bytes a slice [from, to) of its content decodes to.
 */
function quotedString(content: string, style: Style) {
  const b = Buffer.from(jsonString(content, style));
  const decode = (from: number, to: number) =>
    Buffer.from(JSON.parse(`"${b.toString('utf8', from, to)}"`) as string);
  return { b, e: b.length - 1, decode };
}

const prompt = fc
  .array(fc.constantFrom(...HARD_PIECES), { minLength: 1, maxLength: 120 })
  .map((p) => p.join(''));

// Both ways of decoding: the WebAssembly module (json-string.ts) and the JavaScript pieces.
describe.each([
  ['the WebAssembly decoder', true],
  ['the JavaScript pieces', false],
])('the routing prefix of an escaped prompt, decoded by %s', (_name, wasm) => {
  beforeAll(() => {
    useJsonStringWasm(wasm);
    expect(jsonStringWasmActive()).toBe(wasm);
  });
  afterAll(() => useJsonStringWasm(true));

  it('has the full path ids up to any cap, and the exact count', () => {
    fc.assert(
      fc.property(
        fc.array(prompt, { minLength: 1, maxLength: 3 }),
        STYLES,
        fc.integer({ min: 1, max: 400 }),
        (contents, style, cap) => {
          const messages = contents.map((content, i) => ({
            role: i % 2 === 0 ? 'user' : 'assistant',
            content,
          }));
          const body = { model: 'm', messages, max_tokens: 4 };
          const text =
            style === 'plain'
              ? JSON.stringify(body)
              : `{"model":"m","max_tokens":4,"messages":[${messages
                  .map(
                    (m) =>
                      `{"role":"${m.role}","content":${asciiJson(m.content, style === 'ascii-upper')}}`,
                  )
                  .join(',')}]}`;
          const route = buildRouteRequest(
            parseRequest('chat', parseJsonBody(Buffer.from(text))),
            approximateTokenizer,
          );
          const s = scanRequest('chat', Buffer.from(text), { maxPromptTokens: cap });
          expect(Array.from(s.inputIds)).toEqual(Array.from(route.inputIds).slice(0, cap));
          expect(s.promptTokens).toBe(route.inputIds.length);
        },
      ),
      { numRuns: 600 },
    );
  });
});

describe('where a piece of an escaped string can end', () => {
  it('never inside an escape, a surrogate pair or a character, and never far past the cut', () => {
    fc.assert(
      fc.property(
        prompt,
        STYLES,
        fc.array(fc.double({ min: 0, max: 1, noNaN: true }), { minLength: 1, maxLength: 6 }),
        (content, style, cuts) => {
          const { b, e, decode } = quotedString(content, style);
          // Cut after cut, each piece starting where the last one ended.
          const pieces: Buffer[] = [];
          let s = 1;
          for (const f of [...cuts].sort()) {
            const cut = Math.max(s, Math.min(e, s + Math.floor(f * (e - s))));
            const c = pieceEnd(b, s, cut, e);
            expect(c).toBeGreaterThanOrEqual(cut);
            expect(c).toBeLessThanOrEqual(Math.min(e, cut + 12));
            pieces.push(decode(s, c));
            s = c;
          }
          pieces.push(decode(s, e));
          expect(Buffer.concat(pieces).equals(decode(1, e))).toBe(true);
        },
      ),
      { numRuns: 1000 },
    );
  });

  it('at every cut of a short string, from its start and from a later boundary', () => {
    const short = fc
      .array(fc.constantFrom(...HARD_PIECES.filter((p) => p.length < 10)), { maxLength: 24 })
      .map((p) => p.join(''));
    fc.assert(
      fc.property(short, STYLES, (content, style) => {
        const { b, e, decode } = quotedString(content, style);
        const whole = decode(1, e);
        const mid = pieceEnd(b, 1, 1 + ((e - 1) >> 1), e);
        for (const s of [1, mid]) {
          for (let cut = s; cut <= e; cut++) {
            const c = pieceEnd(b, s, cut, e);
            expect(c).toBeGreaterThanOrEqual(cut);
            expect(c).toBeLessThanOrEqual(Math.min(e, cut + 12));
            const joined = Buffer.concat([decode(1, s), decode(s, c), decode(c, e)]);
            expect(joined.equals(whole)).toBe(true);
          }
        }
      }),
      { numRuns: 300 },
    );
  });
});
