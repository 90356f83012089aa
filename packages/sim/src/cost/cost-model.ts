// The cost model interface and the profile file format. One formula serves the built-in
// profiles and profiles written by the GPU worker's `--calibrate`, so a measured profile
// and a fitted one are interchangeable.
import { readFileSync } from 'node:fs';
import type { MemoryModel } from './memory.ts';

/**
 * The smallest chunked prefill size taken, from `--chunked-prefill-size` or a profile file's
 * `chunkedPrefillSize`. SGLang's defaults are 2048 to 16384 by GPU memory and vLLM's 2048 or
 * more; latency tuning goes down to a few hundred tokens, never to tens: each chunk is a
 * forward pass that reads every weight, so a small one starves the GPU. The simulator runs a
 * step per chunk, so chunk 1 turns a 17k-token prompt into 17k events and a small run into
 * minutes.
 */
export const MIN_CHUNKED_PREFILL_SIZE = 64;

export interface CostModel {
  readonly name: string;
  readonly description: string;
  /** KV pool size of one rank, in tokens. */
  readonly kvCapacityTokens: number;
  /** Token budget of one prefill step (SGLang's --chunked-prefill-size). */
  readonly chunkedPrefillSize: number;
  /**
   * Ranks are DP-attention ranks of one deployment (SGLang --enable-dp-attention): every
   * rank runs each forward pass together, so a prefill anywhere stalls decodes everywhere.
   * The simulator then drives its ranks through a DpAttentionGroup. Default false.
   */
  readonly dpAttention?: boolean;
  /**
   * Per-request time outside the GPU step loop (HTTP, tokenization, scheduling), paid once
   * before the request reaches the rank's queue. It adds to TTFT and end-to-end latency but
   * occupies no step. Default 0.
   */
  readonly overheadMs?: number;
  /** The memory model behind kvCapacityTokens, when the profile has one. */
  readonly memory?: MemoryModel;
  /** One request's prefill chunk of `newTokens` on top of `cachedTokens`, alone on the GPU. */
  prefillMs(newTokens: number, cachedTokens: number): number;
  /**
   * One forward pass that prefills several requests' chunks together. The step's fixed cost
   * (launch floor, additive floor) is paid once; each chunk adds its per-token, attention and
   * cached-read terms. Never below `prefillMs` of any single chunk in it.
   */
  prefillBatchMs(chunks: readonly PrefillChunk[]): number;
  /**
   * A lower bound for prefilling `newTokens` on top of `cachedTokens` however the tokens are
   * split into chunks and batched with others: one fixed step cost plus the linear terms.
   * The simulator's invariants check every step and every TTFT against it.
   */
  prefillFloorMs(newTokens: number, cachedTokens: number): number;
  /** One decode step of `batchSize` sequences holding `totalContextTokens` in all. */
  decodeStepMs(batchSize: number, totalContextTokens: number): number;
}

export interface PrefillChunk {
  newTokens: number;
  cachedTokens: number;
}

/**
 * Prefill: `max(launchFloorMs, floorMs + perTokenMs*new + attnMsPerMTokenPairs*new*(cached+new)/1e6
 *   + perKCachedTokenMs*cached/1000)`.
 * `launchFloorMs` and `perKCachedTokenMs` are optional (default 0), so the spec's three-term
 * form is the special case without them. They exist because the calibration needs them: small
 * prefills are launch-bound (a flat floor, not floor + linear), and reading a long cached
 * prefix costs time even for a few new tokens.
 */
export interface PrefillCoefficients {
  floorMs: number;
  perTokenMs: number;
  attnMsPerMTokenPairs: number;
  launchFloorMs?: number;
  perKCachedTokenMs?: number;
}

/** Decode step: `floorMs + perSeqMs*batch + perKContextTokenMs*context/1000`. */
export interface DecodeCoefficients {
  floorMs: number;
  perSeqMs: number;
  perKContextTokenMs: number;
}

/** The `kvroute-cost-profile/v1` JSON file. */
export interface CostProfileSpec {
  format: 'kvroute-cost-profile/v1';
  name: string;
  description: string;
  source?: string;
  prefill: PrefillCoefficients;
  decode: DecodeCoefficients;
  kvCapacityTokens: number;
  chunkedPrefillSize: number;
  /** Optional, default false: see CostModel.dpAttention. */
  dpAttention?: boolean;
  /** Optional, default 0: see CostModel.overheadMs. */
  overheadMs?: number;
  /**
   * Optional: the memory model kvCapacityTokens was derived from, so a run can re-derive
   * it for another memory fraction or GPU (see memory.ts).
   */
  memory?: MemoryModel;
}

export const PROFILE_FORMAT = 'kvroute-cost-profile/v1';

export function costModelFromSpec(spec: CostProfileSpec): CostModel {
  const p = spec.prefill;
  const d = spec.decode;
  const launch = p.launchFloorMs ?? 0;
  const perCached = p.perKCachedTokenMs ?? 0;
  // What one chunk adds to a step beyond the step's fixed cost.
  const variable = (n: number, c: number) =>
    p.perTokenMs * n + (p.attnMsPerMTokenPairs * n * (c + n)) / 1e6 + (perCached * c) / 1000;
  return {
    name: spec.name,
    description: spec.description,
    kvCapacityTokens: spec.kvCapacityTokens,
    chunkedPrefillSize: spec.chunkedPrefillSize,
    dpAttention: spec.dpAttention === true,
    overheadMs: spec.overheadMs ?? 0,
    ...(spec.memory ? { memory: { ...spec.memory } } : {}),
    prefillMs(newTokens: number, cachedTokens: number): number {
      return Math.max(p.floorMs + variable(newTokens, cachedTokens), launch);
    },
    prefillBatchMs(chunks: readonly PrefillChunk[]): number {
      let t = p.floorMs;
      for (const c of chunks) t += variable(c.newTokens, c.cachedTokens);
      return Math.max(t, launch);
    },
    prefillFloorMs(newTokens: number, cachedTokens: number): number {
      // Attention over at least new x cached pairs; the new x new triangle depends on the split.
      const t =
        p.floorMs +
        p.perTokenMs * newTokens +
        (p.attnMsPerMTokenPairs * newTokens * cachedTokens) / 1e6 +
        (perCached * cachedTokens) / 1000;
      return Math.max(t, launch);
    },
    decodeStepMs(batchSize: number, totalContextTokens: number): number {
      return (
        d.floorMs + d.perSeqMs * batchSize + (d.perKContextTokenMs * totalContextTokens) / 1000
      );
    },
  };
}

function fail(where: string, message: string): never {
  throw new Error(`cost profile ${where}: ${message}`);
}

function num(where: string, obj: Record<string, unknown>, field: string, optional = false) {
  const v = obj[field];
  if (v === undefined && optional) return undefined;
  if (typeof v !== 'number' || !Number.isFinite(v)) {
    // 1e400 parses as Infinity, which JSON.stringify would show as null.
    const got = typeof v === 'number' ? `${v} (out of range)` : JSON.stringify(v);
    fail(where, `${field} must be a finite number, got ${got}`);
  }
  return v;
}

/**
 * A time coefficient: every term of the formulas is a time the GPU spends, so none is negative
 * (a negative one cancels the others and the run predicts TTFTs of 0). Fits and --calibrate
 * constrain their coefficients to >= 0 for the same reason.
 */
function coef(where: string, obj: Record<string, unknown>, field: string, optional = false) {
  const v = num(where, obj, field, optional);
  if (v !== undefined && v < 0) fail(where, `${field} must be a finite number >= 0, got ${v}`);
  return v;
}

/** Validates a parsed profile object; `where` names the file in errors. */
export function parseProfileSpec(raw: unknown, where: string): CostProfileSpec {
  if (typeof raw !== 'object' || raw === null) fail(where, 'expected a JSON object');
  const o = raw as Record<string, unknown>;
  if (o.format !== PROFILE_FORMAT) {
    fail(where, `format must be '${PROFILE_FORMAT}', got ${JSON.stringify(o.format)}`);
  }
  if (typeof o.name !== 'string' || o.name === '') fail(where, 'name must be a non-empty string');
  const prefill = o.prefill as Record<string, unknown> | undefined;
  const decode = o.decode as Record<string, unknown> | undefined;
  if (typeof prefill !== 'object' || prefill === null) fail(where, 'prefill must be an object');
  if (typeof decode !== 'object' || decode === null) fail(where, 'decode must be an object');
  const kv = num(where, o, 'kvCapacityTokens') as number;
  const chunk = num(where, o, 'chunkedPrefillSize') as number;
  if (!Number.isInteger(kv) || kv <= 0) fail(where, 'kvCapacityTokens must be a positive integer');
  if (!Number.isInteger(chunk) || chunk < MIN_CHUNKED_PREFILL_SIZE) {
    fail(
      where,
      `chunkedPrefillSize must be an integer >= ${MIN_CHUNKED_PREFILL_SIZE} (a step prefills at most that many tokens; engines' defaults are 2048 or more), got ${chunk}`,
    );
  }
  const spec: CostProfileSpec = {
    format: PROFILE_FORMAT,
    name: o.name,
    description: typeof o.description === 'string' ? o.description : '',
    prefill: {
      floorMs: coef(`${where} prefill`, prefill, 'floorMs') as number,
      perTokenMs: coef(`${where} prefill`, prefill, 'perTokenMs') as number,
      attnMsPerMTokenPairs: coef(`${where} prefill`, prefill, 'attnMsPerMTokenPairs') as number,
    },
    decode: {
      floorMs: coef(`${where} decode`, decode, 'floorMs') as number,
      perSeqMs: coef(`${where} decode`, decode, 'perSeqMs') as number,
      perKContextTokenMs: coef(`${where} decode`, decode, 'perKContextTokenMs') as number,
    },
    kvCapacityTokens: kv,
    chunkedPrefillSize: chunk,
  };
  if (typeof o.source === 'string') spec.source = o.source;
  if (o.dpAttention !== undefined) {
    if (typeof o.dpAttention !== 'boolean') fail(where, 'dpAttention must be true or false');
    spec.dpAttention = o.dpAttention;
  }
  if (o.memory !== undefined) {
    const m = o.memory as Record<string, unknown>;
    if (typeof m !== 'object' || m === null) fail(where, 'memory must be an object');
    const fields = [
      'gpuMemoryBytes',
      'memFraction',
      'weightBytes',
      'activationReserveBytes',
      'kvBytesPerToken',
    ] as const;
    const memory = {} as MemoryModel;
    for (const f of fields) memory[f] = coef(`${where} memory`, m, f) as number;
    spec.memory = memory;
  }
  const overhead = coef(where, o, 'overheadMs', true);
  if (overhead !== undefined) spec.overheadMs = overhead;
  const launch = coef(`${where} prefill`, prefill, 'launchFloorMs', true);
  const perCached = coef(`${where} prefill`, prefill, 'perKCachedTokenMs', true);
  if (launch !== undefined) spec.prefill.launchFloorMs = launch;
  if (perCached !== undefined) spec.prefill.perKCachedTokenMs = perCached;
  const model = costModelFromSpec(spec);
  if (!(model.prefillMs(1, 0) > 0) || !(model.decodeStepMs(1, 1) > 0)) {
    fail(where, 'coefficients give a non-positive time for one token');
  }
  return spec;
}

/** Loads a `kvroute-cost-profile/v1` JSON file (e.g. written by the GPU worker's --calibrate). */
export function loadProfileFile(path: string): CostModel {
  let text: string;
  try {
    text = readFileSync(path, 'utf8');
  } catch (err) {
    throw new Error(`cost profile ${path}: cannot read (${(err as Error).message})`);
  }
  let raw: unknown;
  try {
    raw = JSON.parse(text);
  } catch (err) {
    throw new Error(`cost profile ${path}: invalid JSON (${(err as Error).message})`);
  }
  return costModelFromSpec(parseProfileSpec(raw, path));
}
