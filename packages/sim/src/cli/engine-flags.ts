// Flags that shape the simulated engine (rank model) and the client load, shared by run,
// sweep and replay. Resolved against the profile and the engine preset in the model
// (entities/presets.ts); here only parsed and checked.

import type { EngineName, EngineSettings } from '../entities/presets.ts';
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
  --chunked-prefill-size N  prefill token budget per step (default: the profile's)
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
  if (v('chunked-prefill-size') !== undefined)
    settings.chunkedPrefillSize = positiveInt('chunked-prefill-size', v('chunked-prefill-size')!);
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
