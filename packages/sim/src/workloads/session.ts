// A multi-turn session stored as one growing token buffer: turn t's input is a prefix of the
// buffer and its reply follows it, so every request is a view and a 40-turn session costs
// one array, not 40 copies of its history.
import { concat, type Rng } from './random.ts';

export interface SessionTurn {
  inputIds: Uint32Array;
  outputIds: Uint32Array;
  outputTokens: number;
}

export interface SessionShape {
  /** Shared prefix (system prompt + tools). */
  prefix: Uint32Array;
  turns: number;
  /** Tokens of the first user message. */
  firstUserTokens: () => number;
  /** Tokens of each reply. */
  replyTokens: () => number;
  /** Tokens appended after a reply before the next request (tool output, a user message). */
  appendTokens: () => number;
}

export function buildSession(rng: Rng, shape: SessionShape): SessionTurn[] {
  const pieces: Uint32Array[] = [shape.prefix, rng.tokens(shape.firstUserTokens())];
  const marks: { inputLen: number; outputLen: number }[] = [];
  let len = pieces[0]!.length + pieces[1]!.length;
  for (let t = 0; t < shape.turns; t++) {
    const out = Math.max(1, shape.replyTokens());
    marks.push({ inputLen: len, outputLen: out });
    pieces.push(rng.tokens(out));
    len += out;
    if (t + 1 < shape.turns) {
      const extra = rng.tokens(shape.appendTokens());
      pieces.push(extra);
      len += extra.length;
    }
  }
  const buf = concat(pieces);
  return marks.map((m) => ({
    inputIds: buf.subarray(0, m.inputLen),
    outputIds: buf.subarray(m.inputLen, m.inputLen + m.outputLen),
    outputTokens: m.outputLen,
  }));
}
