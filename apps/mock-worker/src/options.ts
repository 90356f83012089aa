// Mock worker options: one object for the programmatic API, filled from CLI flags by
// parseMockWorkerArgs. Defaults live here and nowhere else.
import { parseArgs } from 'node:util';
import { methodNames, parseAssignments, parseNumber } from '@kvroute/policy';
import { MIN_CHUNKED_PREFILL_SIZE, profileNames } from '@kvroute/sim/model';
import { DEFAULT_KV_LINK_GBPS, DEFAULT_KV_SETUP_MS } from './pd/kv-transfer.ts';

export type FailMode = 'http500' | 'reset';

export interface MockWorkerOptions {
  /** Internal data-parallel ranks (SGLang --dp-size). Default 1. */
  dpSize?: number;
  /** Built-in cost profile name (@kvroute/sim profileNames()). Default 'h200-llama-3.1-8b'. */
  profile?: string;
  /** A kvroute-cost-profile/v1 JSON file; wins over `profile`. */
  profileFile?: string;
  /** Model ms to wall ms: 1 real time, 0.1 ten times faster, 0 instant. Default 1. */
  timeScale?: number;
  /** Internal dispatcher method (any @kvroute/policy method). Default 'round_robin'. */
  loadBalanceMethod?: string;
  /** Extra dispatcher options (e.g. { window: 64 } for prefix_match). */
  policyOptions?: Record<string, unknown>;
  /** KV pool per rank in tokens. Default: the profile's kvCapacityTokens. */
  kvCapacity?: number;
  /** Radix cache page size in tokens. Default 1. */
  pageSize?: number;
  /** Chunked prefill budget. Default: the profile's. */
  chunkedPrefillSize?: number;
  /** Context limit in tokens: prompts this long or longer get 400 context_length_exceeded. Default 131072. */
  maxContext?: number;
  /** Model name reported by /v1/models and in responses. Default 'kvroute-mock'. */
  modelName?: string;
  /** Hugging Face tokenizer.json for text prompts; default the approximate routing tokenizer. */
  tokenizer?: string;
  /** Probability in [0, 1] that a request fails (seeded by `seed`). Default 0. */
  failRate?: number;
  /** After this many requests, every request fails. Default: never. */
  failAfter?: number;
  /** How injected failures look: an HTTP 500 in OpenAI's shape, or a reset connection. Default 'http500'. */
  failMode?: FailMode;
  /** Extra wall-clock delay before a request starts (before the first byte). Default 0. */
  slowMs?: number;
  /** Seed for --fail-rate draws. Default 'kvroute'. */
  seed?: string;
  /** fastify logger. Default false. */
  logger?: boolean;
  /**
   * Publish KV events as vLLM/SGLang do: their `--kv-events-config` JSON object
   * ({ publisher: 'zmq', endpoint, replay_endpoint?, buffer_steps?, topic? }). Default: none.
   */
  kvEventsConfig?: KvEventsConfig;
  /** Block size of the published events in tokens (vLLM's --block-size). Default 16. */
  kvEventsBlockSize?: number;
  /**
   * Prefill/decode disaggregation role (SGLang's --disaggregation-mode): 'prefill' serves a
   * bootstrap server and prefills, 'decode' waits for the KV then decodes. Default 'colocated'.
   */
  role?: WorkerRole;
  /** The prefill role's bootstrap server port (SGLang's default 8998; 0 = any free port). */
  bootstrapPort?: number;
  /** Usable prefill-to-decode link bandwidth in Gb/s, for the decode side's transfer wait. Default 400. */
  kvTransferGbps?: number;
  /** Fixed cost per KV transfer in model ms. Default 1. */
  kvTransferSetupMs?: number;
  /** How long the decode side waits for a room's prefill (rank registration and KV), wall ms. Default 30000. */
  bootstrapTimeoutMs?: number;
  /**
   * URL of a KV store the PD workers share (`kvroute-mock-worker kv-store`; SGLang's HiCache storage
   * backend): a prefill worker loads from it what its GPU cache lacks and writes each prompt
   * it computed to it. Default: none.
   */
  kvStore?: string;
  /** Store-to-GPU load bandwidth of a prefill worker, Gb/s. Default 100. */
  kvStoreGbps?: number;
  /**
   * Decode role: write each finished request's prompt + generated tokens to the KV store
   * (SGLang's --disaggregation-decode-enable-offload-kvcache). Needs kvStore. Default false.
   */
  decodeOffload?: boolean;
}

export type WorkerRole = 'colocated' | 'prefill' | 'decode';

/** vLLM's / SGLang's KVEventsConfig fields the mock worker honours. */
export interface KvEventsConfig {
  publisher?: string;
  endpoint?: string;
  replay_endpoint?: string | null;
  buffer_steps?: number;
  topic?: string;
}

export interface ResolvedOptions {
  dpSize: number;
  profile: string;
  profileFile: string | undefined;
  timeScale: number;
  loadBalanceMethod: string;
  policyOptions: Record<string, unknown>;
  kvCapacity: number | undefined;
  pageSize: number;
  chunkedPrefillSize: number | undefined;
  maxContext: number;
  modelName: string;
  tokenizer: string | undefined;
  failRate: number;
  failAfter: number | undefined;
  failMode: FailMode;
  slowMs: number;
  seed: string;
  logger: boolean;
  kvEvents:
    | {
        endpoint: string;
        replayEndpoint?: string;
        blockSize: number;
        bufferSteps: number;
        topic: string;
      }
    | undefined;
  role: WorkerRole;
  bootstrapPort: number;
  kvTransferGbps: number;
  kvTransferSetupMs: number;
  bootstrapTimeoutMs: number;
  kvStore: string | undefined;
  kvStoreGbps: number;
  decodeOffload: boolean;
}

export const DEFAULTS = {
  dpSize: 1,
  profile: 'h200-llama-3.1-8b',
  timeScale: 1,
  loadBalanceMethod: 'round_robin',
  pageSize: 1,
  maxContext: 131072,
  modelName: 'kvroute-mock',
  failRate: 0,
  failMode: 'http500' as FailMode,
  slowMs: 0,
  seed: 'kvroute',
  role: 'colocated' as WorkerRole,
  bootstrapPort: 8998,
  kvTransferGbps: DEFAULT_KV_LINK_GBPS,
  kvTransferSetupMs: DEFAULT_KV_SETUP_MS,
  bootstrapTimeoutMs: 30_000,
  kvStoreGbps: 100,
} as const;

export class MockWorkerConfigError extends Error {
  readonly code = 'MOCK_WORKER_CONFIG';
  constructor(message: string) {
    super(`kvroute-mock-worker: ${message}`);
    this.name = 'MockWorkerConfigError';
  }
}

function int(name: string, v: number | undefined, min: number): number | undefined {
  if (v === undefined) return undefined;
  if (!Number.isInteger(v) || v < min) {
    throw new MockWorkerConfigError(`${name} must be an integer >= ${min}, got ${v}`);
  }
  return v;
}

function num(name: string, v: number | undefined, min: number, max = Infinity): number | undefined {
  if (v === undefined) return undefined;
  if (typeof v !== 'number' || Number.isNaN(v) || v < min || v > max) {
    throw new MockWorkerConfigError(`${name} must be a number in [${min}, ${max}], got ${v}`);
  }
  return v;
}

function positive(name: string, v: number | undefined): number | undefined {
  if (v === undefined) return undefined;
  if (typeof v !== 'number' || !Number.isFinite(v) || v <= 0) {
    throw new MockWorkerConfigError(`${name} must be a number > 0, got ${v}`);
  }
  return v;
}

export function resolveOptions(o: MockWorkerOptions = {}): ResolvedOptions {
  if (o.role !== undefined && !['colocated', 'prefill', 'decode', 'null'].includes(o.role)) {
    throw new MockWorkerConfigError(
      `role must be prefill, decode or colocated (SGLang's --disaggregation-mode null), got ${o.role}`,
    );
  }
  const role = o.role === undefined || (o.role as string) === 'null' ? DEFAULTS.role : o.role;
  if (o.kvStore !== undefined) {
    if (role === 'colocated') {
      throw new MockWorkerConfigError(
        'kvStore (--kv-store) is for the PD roles: give --role prefill or --role decode',
      );
    }
    let url: URL | undefined;
    try {
      url = new URL(o.kvStore);
    } catch {
      url = undefined;
    }
    if (url === undefined || (url.protocol !== 'http:' && url.protocol !== 'https:')) {
      throw new MockWorkerConfigError(
        `kvStore (--kv-store) must be the store's http:// URL, got ${JSON.stringify(o.kvStore)}`,
      );
    }
  }
  if (o.decodeOffload === true && (role !== 'decode' || o.kvStore === undefined)) {
    throw new MockWorkerConfigError(
      'decodeOffload (--decode-offload) needs --role decode and --kv-store URL (the store it writes to)',
    );
  }
  if (
    o.profile !== undefined &&
    o.profileFile === undefined &&
    !profileNames().includes(o.profile)
  ) {
    throw new MockWorkerConfigError(
      `unknown profile "${o.profile}"; valid profiles: ${profileNames().join(', ')}`,
    );
  }
  if (o.loadBalanceMethod !== undefined && !methodNames().includes(o.loadBalanceMethod)) {
    throw new MockWorkerConfigError(
      `unknown load-balance method "${o.loadBalanceMethod}"; valid methods: ${methodNames().join(', ')}`,
    );
  }
  if (o.failMode !== undefined && o.failMode !== 'http500' && o.failMode !== 'reset') {
    throw new MockWorkerConfigError(`failMode must be 'http500' or 'reset', got ${o.failMode}`);
  }
  return {
    dpSize: int('dpSize', o.dpSize, 1) ?? DEFAULTS.dpSize,
    profile: o.profile ?? DEFAULTS.profile,
    profileFile: o.profileFile,
    timeScale: num('timeScale', o.timeScale, 0) ?? DEFAULTS.timeScale,
    loadBalanceMethod: o.loadBalanceMethod ?? DEFAULTS.loadBalanceMethod,
    policyOptions: o.policyOptions ?? {},
    kvCapacity: int('kvCapacity', o.kvCapacity, 1),
    pageSize: int('pageSize', o.pageSize, 1) ?? DEFAULTS.pageSize,
    chunkedPrefillSize: int('chunkedPrefillSize', o.chunkedPrefillSize, MIN_CHUNKED_PREFILL_SIZE),
    maxContext: int('maxContext', o.maxContext, 1) ?? DEFAULTS.maxContext,
    modelName: o.modelName ?? DEFAULTS.modelName,
    tokenizer: o.tokenizer,
    failRate: num('failRate', o.failRate, 0, 1) ?? DEFAULTS.failRate,
    failAfter: int('failAfter', o.failAfter, 0),
    failMode: o.failMode ?? DEFAULTS.failMode,
    slowMs: num('slowMs', o.slowMs, 0) ?? DEFAULTS.slowMs,
    seed: o.seed ?? DEFAULTS.seed,
    logger: o.logger ?? false,
    kvEvents: resolveKvEvents(o),
    role,
    bootstrapPort: int('bootstrapPort', o.bootstrapPort, 0) ?? DEFAULTS.bootstrapPort,
    kvTransferGbps: positive('kvTransferGbps', o.kvTransferGbps) ?? DEFAULTS.kvTransferGbps,
    kvTransferSetupMs:
      num('kvTransferSetupMs', o.kvTransferSetupMs, 0) ?? DEFAULTS.kvTransferSetupMs,
    bootstrapTimeoutMs:
      int('bootstrapTimeoutMs', o.bootstrapTimeoutMs, 1) ?? DEFAULTS.bootstrapTimeoutMs,
    kvStore: o.kvStore?.replace(/\/+$/, ''),
    kvStoreGbps: positive('kvStoreGbps', o.kvStoreGbps) ?? DEFAULTS.kvStoreGbps,
    decodeOffload: o.decodeOffload ?? false,
  };
}

function resolveKvEvents(o: MockWorkerOptions): ResolvedOptions['kvEvents'] {
  const blockSize = int('kvEventsBlockSize', o.kvEventsBlockSize, 1) ?? 16;
  const c = o.kvEventsConfig;
  if (c === undefined) return undefined;
  if (c === null || typeof c !== 'object' || Array.isArray(c)) {
    throw new MockWorkerConfigError(
      'kvEventsConfig must be an object like {"publisher":"zmq","endpoint":"tcp://*:5557"}',
    );
  }
  const publisher = c.publisher ?? 'zmq';
  if (publisher === 'null') return undefined;
  if (publisher !== 'zmq') {
    throw new MockWorkerConfigError(
      `kvEventsConfig.publisher must be "zmq" or "null", got ${JSON.stringify(publisher)}`,
    );
  }
  const endpoint = c.endpoint ?? 'tcp://*:5557';
  for (const [name, ep] of [
    ['endpoint', endpoint],
    ['replay_endpoint', c.replay_endpoint],
  ] as const) {
    if (
      ep !== undefined &&
      ep !== null &&
      (typeof ep !== 'string' || !/^(tcp|ipc|inproc):\/\//.test(ep))
    ) {
      throw new MockWorkerConfigError(
        `kvEventsConfig.${name} must be a tcp://, ipc:// or inproc:// endpoint, got ${JSON.stringify(ep)}`,
      );
    }
  }
  const bufferSteps = int('kvEventsConfig.buffer_steps', c.buffer_steps, 1) ?? 10_000;
  return {
    endpoint,
    ...(c.replay_endpoint ? { replayEndpoint: c.replay_endpoint } : {}),
    blockSize,
    bufferSteps,
    topic: typeof c.topic === 'string' ? c.topic : '',
  };
}

export const USAGE = `Usage: kvroute-mock-worker [flags]

An SGLang/OpenAI-compatible worker driven by @kvroute/sim's radix cache and cost model.

  --host HOST                  listen address (default 127.0.0.1)
  --port N                     listen port (default 0: any free port; the URL is printed)
  --dp-size N                  internal data-parallel ranks (default 1)
  --load-balance-method NAME   internal dispatcher, any @kvroute/policy method (default round_robin)
  --policy-option KEY=VALUE    extra dispatcher option, repeatable (e.g. window=64)
  --profile NAME               built-in cost profile (default h200-llama-3.1-8b)
  --profile-file PATH          kvroute-cost-profile/v1 JSON (wins over --profile)
  --time-scale X               model time to wall time: 1 real time, 0.1 = 10x faster, 0 instant (default 1)
  --kv-capacity N              KV pool tokens per rank (default: the profile's)
  --page-size N                radix cache page size (default 1)
  --chunked-prefill-size N     prefill token budget per step, at least 64 (default: the profile's)
  --max-context N              context limit in tokens; longer prompts get 400 (default 131072)
  --model-name NAME            model id reported (default kvroute-mock)
  --tokenizer PATH             Hugging Face tokenizer.json for text prompts (default: approximate)
  --fail-rate P                fraction of requests that fail, seeded (default 0)
  --fail-after N               after N requests every request fails (default never)
  --fail-mode http500|reset    injected failure: HTTP 500 or a reset connection (default http500)
  --slow-ms MS                 extra wall-clock delay before each request starts (default 0)
  --seed S                     seed for --fail-rate (default kvroute)
  --kv-events-config JSON      publish KV events as vLLM/SGLang, e.g.
                               '{"publisher":"zmq","endpoint":"tcp://*:5557","replay_endpoint":"tcp://*:5558"}'
                               (DP rank r binds port + r; port 0 picks free ports)
  --kv-events-block-size N     tokens per published block (default 16)
  --role prefill|decode        prefill/decode disaggregation role (default colocated); alias
                               --disaggregation-mode (SGLang's flag)
  --disaggregation-bootstrap-port N
                               the prefill role's bootstrap server port (default 8998; 0 = any)
  --kv-transfer-gbps X         prefill-to-decode link bandwidth in Gb/s: the decode side waits
                               setup + prompt KV bytes x 8 / (X x 1e9) before decoding (default 400)
  --kv-transfer-setup-ms MS    fixed model ms per KV transfer (default 1)
  --bootstrap-timeout-ms MS    decode side's wait for the prefill's rank and KV (default 30000)
  --kv-store URL               PD roles: a KV store the workers share ('kvroute-mock-worker kv-store';
                               SGLang's HiCache storage backend): prefill loads from it what its
                               GPU cache lacks and writes each computed prompt (default: none)
  --kv-store-gbps X            prefill: store-to-GPU load bandwidth in Gb/s (default 100)
  --decode-offload             decode: write each finished request's prompt + reply to the store
                               (SGLang's --disaggregation-decode-enable-offload-kvcache; alias
                               that flag), so the next turn's prefill finds the reply (default off)
  --log                        fastify request logging
  -h, --help                   this text
`;

export interface CliArgs {
  options: MockWorkerOptions;
  host: string;
  port: number;
  help: boolean;
}

function cliNumber(flag: string, raw: string | undefined): number | undefined {
  if (raw === undefined) return undefined;
  const v = parseNumber(raw);
  if (v === undefined) throw new MockWorkerConfigError(`${flag} must be a number, got "${raw}"`);
  return v;
}

export function parseMockWorkerArgs(argv: readonly string[]): CliArgs {
  // `pnpm start -- --dp-size 4` (pnpm 12) hands the script a leading `--`: drop it.
  const args = argv[0] === '--' ? argv.slice(1) : argv;
  let values: ReturnType<typeof parse>['values'];
  try {
    values = parse(args).values;
  } catch (err) {
    throw new MockWorkerConfigError(`${(err as Error).message}\n\n${USAGE}`);
  }
  let policyOptions: Record<string, unknown>;
  try {
    policyOptions = { ...parseAssignments('--policy-option', values['policy-option'] ?? []) };
  } catch (err) {
    throw new MockWorkerConfigError((err as Error).message);
  }
  const options: MockWorkerOptions = {
    dpSize: cliNumber('--dp-size', values['dp-size']),
    loadBalanceMethod: values['load-balance-method'],
    policyOptions,
    profile: values.profile,
    profileFile: values['profile-file'],
    timeScale: cliNumber('--time-scale', values['time-scale']),
    kvCapacity: cliNumber('--kv-capacity', values['kv-capacity']),
    pageSize: cliNumber('--page-size', values['page-size']),
    chunkedPrefillSize: cliNumber('--chunked-prefill-size', values['chunked-prefill-size']),
    maxContext: cliNumber('--max-context', values['max-context']),
    modelName: values['model-name'],
    tokenizer: values.tokenizer,
    failRate: cliNumber('--fail-rate', values['fail-rate']),
    failAfter: cliNumber('--fail-after', values['fail-after']),
    failMode: values['fail-mode'] as FailMode | undefined,
    slowMs: cliNumber('--slow-ms', values['slow-ms']),
    seed: values.seed,
    logger: values.log ?? false,
    kvEventsBlockSize: cliNumber('--kv-events-block-size', values['kv-events-block-size']),
    role: (values.role ?? values['disaggregation-mode']) as WorkerRole | undefined,
    bootstrapPort: cliNumber(
      '--disaggregation-bootstrap-port',
      values['disaggregation-bootstrap-port'],
    ),
    kvTransferGbps: cliNumber('--kv-transfer-gbps', values['kv-transfer-gbps']),
    kvTransferSetupMs: cliNumber('--kv-transfer-setup-ms', values['kv-transfer-setup-ms']),
    bootstrapTimeoutMs: cliNumber('--bootstrap-timeout-ms', values['bootstrap-timeout-ms']),
    kvStore: values['kv-store'],
    kvStoreGbps: cliNumber('--kv-store-gbps', values['kv-store-gbps']),
    decodeOffload:
      values['decode-offload'] === true ||
      values['disaggregation-decode-enable-offload-kvcache'] === true
        ? true
        : undefined,
  };
  const rawEvents = values['kv-events-config'];
  if (rawEvents !== undefined) {
    try {
      options.kvEventsConfig = JSON.parse(rawEvents) as KvEventsConfig;
    } catch (err) {
      throw new MockWorkerConfigError(`--kv-events-config must be JSON: ${(err as Error).message}`);
    }
  }
  return {
    options,
    host: values.host ?? '127.0.0.1',
    port: cliPort(values.port),
    help: values.help ?? false,
  };
}

function cliPort(raw: string | undefined): number {
  const port = cliNumber('--port', raw) ?? 0;
  if (!Number.isInteger(port) || port < 0 || port > 65535) {
    throw new MockWorkerConfigError(`--port must be an integer in [0, 65535], got ${port}`);
  }
  return port;
}

export const KV_STORE_USAGE = `Usage: kvroute-mock-worker kv-store [flags]

A KV store the mock PD workers share (SGLang's HiCache storage backend): prefill workers started
with --kv-store URL load what it holds and write their prompts to it; decode workers with
--kv-store URL --decode-offload write each finished prompt + reply to it.

  --host HOST          listen address (default 127.0.0.1)
  --port N             listen port (default 0: any free port; the URL is printed)
  --kv-store-tokens N  tokens held before least recently used paths are evicted (default: unbounded)
  --page-size N        radix page size in tokens (default 1, as the workers')
  -h, --help           this text
`;

export interface KvStoreCliArgs {
  host: string;
  port: number;
  capacityTokens?: number;
  pageSize?: number;
  help: boolean;
}

/** `kvroute-mock-worker kv-store [flags]`, with the worker's number rules and errors. */
export function parseKvStoreArgs(argv: readonly string[]): KvStoreCliArgs {
  let values: ReturnType<typeof parseKvStore>['values'];
  try {
    values = parseKvStore(argv.filter((a) => a !== '--')).values;
  } catch (err) {
    throw new MockWorkerConfigError(`${(err as Error).message}\n\n${KV_STORE_USAGE}`);
  }
  const capacityTokens = int(
    '--kv-store-tokens',
    cliNumber('--kv-store-tokens', values['kv-store-tokens']),
    1,
  );
  const pageSize = int('--page-size', cliNumber('--page-size', values['page-size']), 1);
  return {
    host: values.host ?? '127.0.0.1',
    port: cliPort(values.port),
    ...(capacityTokens !== undefined ? { capacityTokens } : {}),
    ...(pageSize !== undefined ? { pageSize } : {}),
    help: values.help ?? false,
  };
}

/** Flags the worker and its kv-store subcommand both take, read the same way. */
const SHARED_FLAGS = {
  host: { type: 'string' },
  port: { type: 'string' },
  'page-size': { type: 'string' },
  help: { type: 'boolean', short: 'h' },
} as const;

function parseKvStore(argv: readonly string[]) {
  return parseArgs({
    args: [...argv],
    strict: true,
    allowPositionals: false,
    options: { ...SHARED_FLAGS, 'kv-store-tokens': { type: 'string' } },
  });
}

function parse(argv: readonly string[]) {
  return parseArgs({
    args: [...argv],
    strict: true,
    allowPositionals: false,
    options: {
      ...SHARED_FLAGS,
      'dp-size': { type: 'string' },
      'load-balance-method': { type: 'string' },
      'policy-option': { type: 'string', multiple: true },
      profile: { type: 'string' },
      'profile-file': { type: 'string' },
      'time-scale': { type: 'string' },
      'kv-capacity': { type: 'string' },
      'chunked-prefill-size': { type: 'string' },
      'max-context': { type: 'string' },
      'model-name': { type: 'string' },
      tokenizer: { type: 'string' },
      'fail-rate': { type: 'string' },
      'fail-after': { type: 'string' },
      'fail-mode': { type: 'string' },
      'slow-ms': { type: 'string' },
      seed: { type: 'string' },
      'kv-events-config': { type: 'string' },
      'kv-events-block-size': { type: 'string' },
      role: { type: 'string' },
      'disaggregation-mode': { type: 'string' },
      'disaggregation-bootstrap-port': { type: 'string' },
      'kv-transfer-gbps': { type: 'string' },
      'kv-transfer-setup-ms': { type: 'string' },
      'bootstrap-timeout-ms': { type: 'string' },
      'kv-store': { type: 'string' },
      'kv-store-gbps': { type: 'string' },
      'decode-offload': { type: 'boolean' },
      'disaggregation-decode-enable-offload-kvcache': { type: 'boolean' },
      log: { type: 'boolean' },
    },
  });
}
