// How long one attempt may wait for its first response byte. A fixed value either kills long
// prefills (a 100k-token prompt takes tens of seconds on a busy rank) or leaves requests on a
// hung engine for minutes, so the bound grows with the work the request asks for: a floor
// (queueing, scheduling, a short prefill) plus its prompt at a deliberately slow prefill speed
// and, for a non-streaming request whose first byte is its last, its output tokens at a slow
// decode speed. With the defaults a typical 1-2k-token streaming request is bounded at about
// 11 s, and a hung rank's requests move elsewhere after that; a long prefill gets what its
// size needs. Between chunks, a separate idle timeout applies (forward.ts).

export interface TimeoutModel {
  /** Floor of the bound, ms. */
  firstByteTimeoutMs: number;
  /** Prefill speed assumed, tokens/s: keep it below what the engine really does. */
  prefillTokensPerSec: number;
  /** Per output token for non-streaming requests, ms. */
  decodeMsPerToken: number;
}

/** The first-byte bound of one attempt, ms; 0 when the floor is 0 (timeout off). */
export function firstByteTimeoutMs(
  model: TimeoutModel,
  promptTokens: number,
  maxTokens: number,
  stream: boolean,
): number {
  if (model.firstByteTimeoutMs <= 0) return 0;
  const prefill = (promptTokens / model.prefillTokensPerSec) * 1000;
  const decode = stream ? 0 : maxTokens * model.decodeMsPerToken;
  return Math.ceil(model.firstByteTimeoutMs + prefill + decode);
}
