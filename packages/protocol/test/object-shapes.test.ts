// The per-response objects keep one hidden class, even in a process that has used up V8's
// shared literal transitions, as the router's bundle has (its libraries create thousands of
// distinct object literals). There, a literal with field names new to V8 gets a hidden class
// outside the transition tree, and each field added to it afterwards makes a new hidden class
// on every call: ~1.4 us per field, and every later read of the object misses its inline
// cache. This file reproduces that state first, then checks.
import { setFlagsFromString } from 'node:v8';
import { describe, expect, it } from 'vitest';
import { responseFacts, usageFromObject } from '../src/usage.ts';

setFlagsFromString('--allow-natives-syntax');
const haveSameMap = new Function('a', 'b', 'return %HaveSameMap(a, b)') as (
  a: unknown,
  b: unknown,
) => boolean;
// Each literal in its own function, as a program's are (one call site each). Global eval:
// `new Function` bodies did not reproduce the state reliably.
// biome-ignore lint/security/noGlobalEval: the test builds thousands of distinct literal sites
const globalEval = globalThis.eval;
const indirectEval = (src: string) => globalEval(src) as (x: unknown) => unknown;

// Distinct one-field literals, more than V8's 1,536 transitions per root class, each run twice
// (V8 builds a literal's hidden class on its second run) and kept alive, as a program keeps its
// code alive (transitions are weak: a full GC would make room again). Filled until a probe
// shows the state, in batches, since a GC during the fill can clear some.
const fillers: unknown[] = [];
function grownLiteralIsUnstable(tag: number): boolean {
  const grown = indirectEval(
    `(x) => { const o = { kvrouteProbe${tag}: x }; o.kvrouteProbeSecond = x; return o; }`,
  );
  return !haveSameMap(grown(1), grown(2));
}
let exhausted = false;
for (let batch = 0; batch < 6 && !exhausted; batch++) {
  for (let i = 0; i < 2000; i++) {
    const make = indirectEval(`(x) => ({ kvrouteFiller${batch}_${i}: x })`);
    fillers.push(make(i), make(i), make);
  }
  exhausted = grownLiteralIsUnstable(batch);
}

describe('per-response objects keep one hidden class', () => {
  it('the transitions are used up: a grown literal gets a new hidden class per call', () => {
    expect(exhausted).toBe(true);
  });

  it('usageFromObject', () => {
    const body = {
      choices: [{ message: { content: 'hi' } }],
      usage: {
        prompt_tokens: 9,
        completion_tokens: 16,
        prompt_tokens_details: { cached_tokens: 0 },
      },
    };
    const a = usageFromObject(body);
    const b = usageFromObject(JSON.parse(JSON.stringify(body)));
    expect(a).toEqual({ promptTokens: 9, cachedTokens: 0, outputTokens: 16 });
    expect(haveSameMap(a, b)).toBe(true);
    // Without cached or output tokens: the same hidden class, those fields undefined.
    const c = usageFromObject({ choices: [], usage: { prompt_tokens: 3 } });
    expect(c?.cachedTokens).toBeUndefined();
    expect(haveSameMap(a, c)).toBe(true);
  });

  it('responseFacts, whichever shape the response had', () => {
    const openai = responseFacts({
      choices: [{ delta: { content: 'x' } }],
      usage: { prompt_tokens: 2 },
    });
    const sglang = responseFacts({ text: 'x', meta_info: { prompt_tokens: 2, dp_rank: 1 } });
    const error = responseFacts({ error: { message: 'boom' } });
    expect(haveSameMap(openai, sglang)).toBe(true);
    expect(haveSameMap(openai, error)).toBe(true);
    expect(error.error).toBe('boom');
    expect(sglang.rank).toBe(1);
  });
});
