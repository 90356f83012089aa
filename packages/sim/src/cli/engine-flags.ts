// Flags that shape the simulated engine (rank model) and the client load, shared by run,
// sweep and replay. Resolved against the profile and the engine preset in the model
// (entities/presets.ts); here only parsed and checked.

import { type CostModel, MIN_CHUNKED_PREFILL_SIZE } from '../cost/cost-model.ts';
import { type EngineName, type EngineSettings, resolveEngine } from '../entities/presets.ts';
import { ADMISSION_MODES, type AdmissionMode } from '../entities/rank.ts';
import {
  checkName,
  type OptionSpec,
  type Parsed,
  positiveInt,
  positiveNumber,
  str,
} from './args.ts';
import { UsageError } from './errors.ts';

export const ENGINE_OPTIONS: OptionSpec = {
  engine: { type: 'string' },
  'max-running-requests': { type: 'string' },
  admission: { type: 'string' },
  'kv-capacity': { type: 'string' },
  'mem-fraction': { type: 'string' },
  'page-size': { type: 'string' },
  'chunked-prefill-size': { type: 'string' },
  'host-kv-tokens': { type: 'string' },
  'host-kv-tokens-per-ms': { type: 'string' },
  'host-kv-eviction': { type: 'string' },
  'max-concurrency': { type: 'string' },
  'request-rate': { type: 'string' },
};

export const ENGINE_FLAGS_HELP = `  --engine sglang|vllm  rank-model preset (default sglang): admission, running cap, memory
                        fraction, page size as that engine does by default
  --max-running-requests N  requests admitted at once per rank (SGLang --max-running-requests,
                        vLLM --max-num-seqs; default from the preset)
  --admission MODE      reserve | optimistic (SGLang: retract on KV exhaustion) |
                        preempt (vLLM: preempt and recompute); default from the preset
  --kv-capacity N       KV pool per rank in tokens (default: the profile's memory model)
  --mem-fraction F      re-derive the pool from the profile's memory model with this fraction
                        (default: the profile's pool)
  --page-size N         radix cache page size (default: sglang 1, vllm 16)
  --chunked-prefill-size N  prefill token budget per step, at least ${MIN_CHUNKED_PREFILL_SIZE} and at least
                        --page-size (default: the profile's)
  --host-kv-tokens N    a host-memory KV tier of N tokens per rank (write-back of evicted cache)
                        (default 0: no host tier)
  --host-kv-tokens-per-ms R  its load-back rate (default: 25 GB/s over the profile's KV bytes/token)
  --host-kv-eviction lru|fifo  the host tier's eviction order (default lru)
  --max-concurrency C   closed loop at most C requests in flight (benchmark --max-concurrency)
                        (default: the scenario's own loop)
  --request-rate R      open loop: the scenario's requests as Poisson arrivals at R requests/s
                        (default: the scenario's own arrivals)`;

/** Host-to-device copy rate assumed when only the tier's size is given (PCIe 5 x16, ~25 GB/s). */
export const DEFAULT_HOST_GBPS = 25;

export interface EngineFlags {
  settings: EngineSettings;
  /** Host tier size without a rate: resolved against the profile's KV bytes per token. */
  hostTokens?: number;
  hostTokensPerMs?: number;
  hostEviction?: 'lru' | 'fifo';
  maxConcurrency?: number;
  requestRate?: number;
}

function fraction(flag: string, raw: string): number {
  const v = positiveNumber(flag, raw);
  if (v > 1) throw new UsageError(`--${flag} must be in (0, 1], got ${raw}`);
  return v;
}

export function readEngineFlags(p: Parsed): EngineFlags {
  const settings: EngineSettings = {};
  const engine = str(p, 'engine');
  if (engine !== undefined) {
    settings.engine = checkName('engine', engine, ['sglang', 'vllm']) as EngineName;
  }
  const v = (flag: string) => str(p, flag);
  if (v('max-running-requests') !== undefined)
    settings.maxRunningRequests = positiveInt('max-running-requests', v('max-running-requests')!);
  if (v('admission') !== undefined)
    settings.admission = checkName('admission', v('admission')!, ADMISSION_MODES) as AdmissionMode;
  if (v('kv-capacity') !== undefined)
    settings.kvCapacityTokens = positiveInt('kv-capacity', v('kv-capacity')!);
  if (v('mem-fraction') !== undefined)
    settings.memFraction = fraction('mem-fraction', v('mem-fraction')!);
  if (v('page-size') !== undefined) settings.pageSize = positiveInt('page-size', v('page-size')!);
  if (v('chunked-prefill-size') !== undefined) {
    const raw = v('chunked-prefill-size')!;
    const chunk = positiveInt('chunked-prefill-size', raw);
    if (chunk < MIN_CHUNKED_PREFILL_SIZE) {
      throw new UsageError(
        `--chunked-prefill-size must be at least ${MIN_CHUNKED_PREFILL_SIZE} tokens, got ${raw}: SGLang's and vLLM's defaults are 2048 or more, and below that minimum the simulation runs a step per few tokens (minutes for a small run)`,
      );
    }
    if (settings.pageSize !== undefined && chunk < settings.pageSize) {
      throw new UsageError(
        `--chunked-prefill-size ${chunk} is below --page-size ${settings.pageSize}: a step prefills whole pages (SGLang requires the chunk to be a multiple of the page size)`,
      );
    }
    settings.chunkedPrefillSize = chunk;
  }
  const out: EngineFlags = { settings };
  if (v('host-kv-tokens') !== undefined)
    out.hostTokens = positiveInt('host-kv-tokens', v('host-kv-tokens')!);
  if (v('host-kv-tokens-per-ms') !== undefined)
    out.hostTokensPerMs = positiveNumber('host-kv-tokens-per-ms', v('host-kv-tokens-per-ms')!);
  if (v('host-kv-eviction') !== undefined)
    out.hostEviction = checkName('host-kv-eviction', v('host-kv-eviction')!, ['lru', 'fifo']) as
      | 'lru'
      | 'fifo';
  if (out.hostTokens === undefined && (out.hostTokensPerMs ?? out.hostEviction) !== undefined) {
    throw new UsageError('--host-kv-tokens-per-ms and --host-kv-eviction need --host-kv-tokens');
  }
  if (v('max-concurrency') !== undefined)
    out.maxConcurrency = positiveInt('max-concurrency', v('max-concurrency')!);
  if (v('request-rate') !== undefined)
    out.requestRate = positiveNumber('request-rate', v('request-rate')!);
  return out;
}

/**
 * The engine flags against the profile they resolve with: a memory fraction or a host tier
 * the profile's memory model cannot serve is the user's to change, so it fails here as bad
 * input naming the flag, not later in the model as a crash.
 */
export function checkEngineFlags(profile: CostModel, e: EngineFlags): void {
  const s = e.settings;
  const m = profile.memory;
  if (s.memFraction !== undefined && m === undefined) {
    throw new UsageError(
      `--mem-fraction re-derives the KV pool from the profile's memory model, and profile '${profile.name}' has none: give the pool with --kv-capacity instead`,
    );
  }
  if (e.hostTokens !== undefined && e.hostTokensPerMs === undefined && m === undefined) {
    throw new UsageError(
      `--host-kv-tokens: profile '${profile.name}' has no memory model (KV bytes per token) to derive the host tier's load-back rate from: give it with --host-kv-tokens-per-ms`,
    );
  }
  try {
    resolveEngine(profile, s);
  } catch (err) {
    if (!(err instanceof RangeError) || m === undefined) throw err;
    const flag =
      s.memFraction !== undefined
        ? `--mem-fraction ${s.memFraction}`
        : `--engine ${s.engine ?? 'sglang'}`;
    throw new UsageError(
      `${flag} leaves no KV pool with profile '${profile.name}': ${err.message.replace(/^memory model: /, '')}; the weights alone take ${(m.weightBytes / m.gpuMemoryBytes).toFixed(3)} of the GPU's memory`,
    );
  }
}
