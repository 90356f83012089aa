// Engine presets: the rank-model settings SGLang and vLLM use by default, so a run can say
// "as SGLang would" or "as vLLM would" and override single settings on top.
//
// SGLang (python/sglang/srt): --mem-fraction-static ~0.88 on 80+ GB GPUs, covering weights and
// KV (activations live outside it); --max-running-requests derived from the pool as
// min(max(pool / context_len * 512, 2048), 4096) (context length 131,072 assumed here);
// optimistic admission with retraction; page size 1; chunked prefill 8192.
// vLLM V1 (vllm/engine/arg_utils.py, GPUs with >= 70 GiB, OpenAI server): --max-num-seqs 1024,
// --max-num-batched-tokens 8192, --gpu-memory-utilization 0.9 covering weights, the profiled
// activation peak and KV; preemption by recompute; block size 16.
import type { CostModel } from '../cost/cost-model.ts';
import { kvCapacityFromMemory } from '../cost/memory.ts';
import type { AdmissionMode, HostKvOptions } from './rank.ts';

export type EngineName = 'sglang' | 'vllm';
export const ENGINE_NAMES: readonly EngineName[] = ['sglang', 'vllm'];

/** The engine-level knobs a run may set; unset ones come from the preset and the profile. */
export interface EngineSettings {
  engine?: EngineName;
  maxRunningRequests?: number;
  admission?: AdmissionMode;
  /** KV pool per rank in tokens: wins over the memory model. */
  kvCapacityTokens?: number;
  /** Re-derive the pool from the profile's memory model with this fraction. */
  memFraction?: number;
  /** Activation workspace kept out of the pool, bytes (vLLM's profiled peak). */
  activationReserveBytes?: number;
  chunkedPrefillSize?: number;
  pageSize?: number;
  hostKv?: HostKvOptions;
}

/** What a simulated rank is built with, all resolved. */
export interface ResolvedEngine {
  engine: EngineName;
  admission: AdmissionMode;
  maxRunningRequests: number;
  kvCapacityTokens: number;
  chunkedPrefillSize: number;
  pageSize: number;
  hostKv?: HostKvOptions;
}

const SGLANG_CONTEXT_LEN = 131_072;
/** vLLM profiles its activation peak; an 8B-70B model at 8192 batched tokens peaks at a few GB. */
const VLLM_ACTIVATION_RESERVE_BYTES = 4e9;

export function resolveEngine(profile: CostModel, s: EngineSettings = {}): ResolvedEngine {
  const engine = s.engine ?? 'sglang';
  if (!ENGINE_NAMES.includes(engine)) {
    throw new RangeError(
      `engine must be one of ${ENGINE_NAMES.join(', ')}, got '${String(engine)}'`,
    );
  }
  const vllm = engine === 'vllm';
  let kv = profile.kvCapacityTokens;
  const m = profile.memory;
  const memFraction = s.memFraction ?? (vllm ? 0.9 : undefined);
  const reserve = s.activationReserveBytes ?? (vllm ? VLLM_ACTIVATION_RESERVE_BYTES : undefined);
  if (memFraction !== undefined || reserve !== undefined) {
    if (m === undefined) {
      if (s.memFraction !== undefined || s.activationReserveBytes !== undefined) {
        throw new RangeError(
          `profile '${profile.name}' has no memory model: give the KV pool with --kv-capacity instead`,
        );
      }
    } else {
      kv = kvCapacityFromMemory({
        ...m,
        ...(memFraction !== undefined ? { memFraction } : {}),
        ...(reserve !== undefined ? { activationReserveBytes: reserve } : {}),
      });
    }
  }
  if (s.kvCapacityTokens !== undefined) kv = s.kvCapacityTokens;
  const maxRunning =
    s.maxRunningRequests ??
    (vllm ? 1024 : Math.min(Math.max(Math.floor((kv / SGLANG_CONTEXT_LEN) * 512), 2048), 4096));
  return {
    engine,
    admission: s.admission ?? (vllm ? 'preempt' : 'optimistic'),
    maxRunningRequests: maxRunning,
    kvCapacityTokens: kv,
    chunkedPrefillSize: s.chunkedPrefillSize ?? (vllm ? 8192 : profile.chunkedPrefillSize),
    pageSize: s.pageSize ?? (vllm ? 16 : 1),
    ...(s.hostKv ? { hostKv: s.hostKv } : {}),
  };
}

/** A host tier of `tokens` per rank; the rate defaults to `gbps` over the profile's KV bytes. */
export function hostTier(
  profile: CostModel,
  tokens: number,
  opts: { tokensPerMs?: number; gbps?: number; eviction?: 'lru' | 'fifo' } = {},
): HostKvOptions {
  let rate = opts.tokensPerMs;
  if (rate === undefined) {
    const bytes = profile.memory?.kvBytesPerToken;
    if (bytes === undefined) {
      throw new RangeError(
        `profile '${profile.name}' has no memory model (KV bytes per token): give the host tier's load-back rate in tokens per ms`,
      );
    }
    rate = ((opts.gbps ?? 25) * 1e9) / bytes / 1000;
  }
  return { capacityTokens: tokens, loadTokensPerMs: rate, eviction: opts.eviction ?? 'lru' };
}
