// KV pool size from a memory model: what the engine leaves for KV after the weights and the
// activation workspace, divided by the bytes one token's K and V take in every layer.
//
//   kvCapacityTokens = floor((gpuMemoryBytes x memFraction - weightBytes - activationReserveBytes)
//                            / kvBytesPerToken)
//
// SGLang's --mem-fraction-static covers weights + KV only (activations and CUDA graphs live in
// the remaining 1 - fraction), so its activation reserve is 0. vLLM's --gpu-memory-utilization
// covers weights, the profiled activation peak and KV, so its reserve is that peak.

export interface ModelShape {
  layers: number;
  kvHeads: number;
  headDim: number;
  /** Bytes per KV element (2 for bf16/fp16, 1 for fp8 KV cache). Default 2. */
  kvBytesPerElement?: number;
}

export interface MemoryModel {
  gpuMemoryBytes: number;
  /** SGLang --mem-fraction-static, vLLM --gpu-memory-utilization. */
  memFraction: number;
  /** Weight bytes resident on one GPU (after tensor/expert parallel sharding). */
  weightBytes: number;
  activationReserveBytes: number;
  kvBytesPerToken: number;
}

/** K and V for every layer of one token. */
export function kvBytesPerToken(s: ModelShape): number {
  return 2 * s.layers * s.kvHeads * s.headDim * (s.kvBytesPerElement ?? 2);
}

export function kvCapacityFromMemory(m: MemoryModel): number {
  for (const [k, v] of Object.entries(m)) {
    if (typeof v !== 'number' || !Number.isFinite(v) || v < 0) {
      throw new RangeError(`memory model: ${k} must be a finite number >= 0, got ${String(v)}`);
    }
  }
  if (!(m.memFraction > 0 && m.memFraction <= 1)) {
    throw new RangeError(`memory model: memFraction must be in (0, 1], got ${m.memFraction}`);
  }
  if (!(m.kvBytesPerToken > 0)) {
    throw new RangeError('memory model: kvBytesPerToken must be > 0');
  }
  const pool = m.gpuMemoryBytes * m.memFraction - m.weightBytes - m.activationReserveBytes;
  const tokens = Math.floor(pool / m.kvBytesPerToken);
  if (tokens < 1) {
    throw new RangeError(
      `memory model: nothing left for KV (${(m.gpuMemoryBytes / 1e9).toFixed(1)} GB x ${m.memFraction} - ${(m.weightBytes / 1e9).toFixed(1)} GB weights - ${(m.activationReserveBytes / 1e9).toFixed(1)} GB activations)`,
    );
  }
  return tokens;
}
