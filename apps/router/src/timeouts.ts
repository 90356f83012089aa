// How long one attempt may wait for its first response byte. A fixed value either kills long
// prefills (a 100k-token prompt takes tens of seconds on a busy rank) or leaves requests on a
// hung engine for minutes, so the bound grows with the work the request asks for: a floor
// (queueing, scheduling, a short prefill) plus the time the request's first byte should take.
//
// With a cost profile (--cost-profile: a built-in name, or the kvroute-cost-profile/v1 file
// `kvroute-sim fit` or the GPU worker's --calibrate writes), that time is the simulator's own
// estimate for the request alone on its rank: the profile's per-request overhead, the prompt
// prefilled in chunks of the profile's chunked-prefill size (each chunk on top of the ones
// before it), and for a non-streaming request, whose first byte is its last, every output
// token at the decode step time of its final context. A busy rank is slower than that (other
// prefills share its steps, decodes batch), so the estimate is multiplied by
// --first-byte-slowdown before the floor is added.
//
// Without a profile, a linear model stands in: the prompt at a deliberately slow
// --prefill-tokens-per-sec and the output at --decode-ms-per-token.
//
// With the defaults a typical 1-2k-token streaming request is bounded at about 10-11 s, and a
// hung rank's requests move elsewhere after that; a long prefill gets what its size needs.
// Between chunks, a separate idle timeout applies (proxy/forward.ts).
import type { RequestKind } from '@kvroute/protocol';
import { type CostModel, getProfile, loadProfileFile } from '@kvroute/sim/model';

export interface TimeoutModel {
  /** Floor of the bound, ms; 0 turns the first-byte timeout off. */
  firstByteTimeoutMs: number;
  /** Without a profile: prefill speed assumed, tokens/s (keep it below the engine's). */
  prefillTokensPerSec: number;
  /** Without a profile: per output token for non-streaming requests, ms. */
  decodeMsPerToken: number;
  /** With a profile: how many times slower than the profile's estimate a busy rank may be. */
  firstByteSlowdown: number;
}

/** A cost profile by file path (anything with a / or ending in .json) or built-in name. */
export function loadCostProfile(profile: string, flag = '--cost-profile'): CostModel {
  try {
    if (profile.includes('/') || profile.endsWith('.json')) return loadProfileFile(profile);
    return getProfile(profile);
  } catch (err) {
    throw new Error(`${flag} ${profile}: ${(err as Error).message}`);
  }
}

/** The first-byte bound of one attempt, from the timeout settings and an optional profile. */
export class FirstByteBound {
  constructor(
    private readonly model: TimeoutModel,
    readonly profile?: CostModel,
  ) {}

  /**
   * The request's time to its first byte alone on an idle rank by the profile, ms (prefill,
   * plus decode when not streaming); undefined without a profile.
   */
  expectedMs(promptTokens: number, maxTokens: number, stream: boolean): number | undefined {
    const p = this.profile;
    if (!p) return undefined;
    let t = p.overheadMs ?? 0;
    const chunk = p.chunkedPrefillSize;
    for (let done = 0; done < promptTokens; done += chunk) {
      t += p.prefillMs(Math.min(chunk, promptTokens - done), done);
    }
    if (!stream && maxTokens > 0) t += maxTokens * p.decodeStepMs(1, promptTokens + maxTokens);
    return t;
  }

  /** The bound, ms; 0 when the floor is 0 (timeout off). */
  ms(promptTokens: number, maxTokens: number, stream: boolean): number {
    const m = this.model;
    if (m.firstByteTimeoutMs <= 0) return 0;
    const expected = this.expectedMs(promptTokens, maxTokens, stream);
    if (expected !== undefined) {
      return Math.ceil(m.firstByteTimeoutMs + m.firstByteSlowdown * expected);
    }
    const prefill = (promptTokens / m.prefillTokensPerSec) * 1000;
    const decode = stream ? 0 : maxTokens * m.decodeMsPerToken;
    return Math.ceil(m.firstByteTimeoutMs + prefill + decode);
  }
}

/**
 * The output tokens a first-byte bound allows for. A streamed answer's first byte comes with
 * its first token, so its output does not count (it is returned as is). A non-streamed
 * answer's first byte is its last: the bound covers the client's limit or, when the client
 * set none, what the engine generates on its own. SGLang's /generate stops at 128 tokens, but
 * a chat or Responses request (and a vLLM completion) runs until the context is full, so the
 * model's context length (`contextTokens`: `--max-model-len` or what the workers report)
 * bounds those. The load-accounting default (128) would cut a long answer at about 16 s,
 * retry it on every rank and count a healthy worker's answer as a failure.
 */
export function boundedOutputTokens(
  kind: RequestKind,
  rr: { maxTokens: number; maxTokensDefaulted?: boolean },
  stream: boolean,
  contextTokens: number,
): number {
  if (stream || rr.maxTokensDefaulted !== true || kind === 'generate') return rr.maxTokens;
  return Math.max(rr.maxTokens, contextTokens);
}

const bounds = new WeakMap<object, FirstByteBound>();

/**
 * The bound for a router config, built once per config (its --cost-profile loaded then; a bad
 * one throws, naming the flag).
 */
export function firstByteBoundFor(
  config: TimeoutModel & { costProfile?: string | undefined },
): FirstByteBound {
  let b = bounds.get(config);
  if (!b) {
    b = new FirstByteBound(
      config,
      config.costProfile !== undefined ? loadCostProfile(config.costProfile) : undefined,
    );
    bounds.set(config, b);
  }
  return b;
}

/** The first-byte bound of one attempt under `config`, ms (0: timeout off). */
export function firstByteTimeoutMs(
  config: TimeoutModel & { costProfile?: string | undefined },
  promptTokens: number,
  maxTokens: number,
  stream: boolean,
): number {
  return firstByteBoundFor(config).ms(promptTokens, maxTokens, stream);
}
