// The router's configuration from three sources with one option table: CLI flags (SGLang's
// names where SGLang has one), KVROUTE_* environment variables and a YAML file. Precedence,
// lowest first: defaults, YAML (--config), environment, flags. One table means the README,
// the parser and the error messages cannot disagree about an option's name or type.
import { readFileSync } from 'node:fs';
import {
  isNumericOption,
  isOptionKey,
  methodOptionCatalog,
  optionHelp,
  parseNumber,
  parseScalar,
} from '@kvroute/policy';
import { parse as parseYaml, type Tags } from 'yaml';
import { redactCredentials } from './credentials.ts';
import { RouterConfigError } from './errors.ts';
import { type ModelGroupConfig, parseModelGroups, validateModelGroups } from './model-groups.ts';
import type { OutlierConfig } from './outlier.ts';
import { type PdSettings, validatePdConfig } from './pd/config.ts';

export interface HealthConfig {
  /** Active check period; 0 turns active checks off (passive marking still applies). */
  intervalMs: number;
  timeoutMs: number;
  /** Consecutive failed checks (or upstream 5xx) before a worker is marked down. */
  failureThreshold: number;
  /** Consecutive good checks before a down worker is marked up again. */
  successThreshold: number;
  endpoint: string;
  /** Generation check (SGLang /health_generate or a 1-token completion) period; 0 = off. */
  generationIntervalMs?: number;
  generationTimeoutMs?: number;
}

export interface RouterConfig extends PdSettings {
  host: string;
  port: number;
  workerUrls: string[];
  dpAware: boolean;
  /** DP ranks per worker in --dp-aware mode; undefined = ask each worker's /get_server_info. */
  dpSize?: number;
  loadBalanceMethod: string;
  /** 'routing_key' turns on the affinity table keyed by X-Routing-Key / routing_key. */
  dpCacheAffinity?: 'routing_key';
  affinityMaxEntries: number;
  affinityTtlMs: number;
  /**
   * Method options set by their own flags (`--window`, `--epsilon`, ...: one per option of any
   * registered method, derived from the methods' schemas); passed at the dispatcher config's
   * top level, where options of methods other than the chosen one are ignored.
   */
  methodOptions: Record<string, number | string>;
  /** Extra method options passed to the dispatcher as `options` (from --policy-option k=v). */
  policyOptions: Record<string, unknown>;
  allowRankOverride: boolean;
  adminToken?: string;
  /** 0 = off. Otherwise poll /v1/loads (SGLang) or /metrics (vLLM) this often. */
  loadPollIntervalMs: number;
  health: HealthConfig;
  requestTimeoutMs: number;
  /** Floor of the first-byte timeout; the request's expected prefill (and decode) time is added. */
  firstByteTimeoutMs: number;
  /** Longest pause between response chunks once the first arrived (0 = off). */
  idleTimeoutMs: number;
  /** Prefill speed assumed when bounding the first byte: slower than any real engine on purpose. */
  prefillTokensPerSec: number;
  /** Per output token, added to a non-streaming request's first-byte bound (it arrives at the end). */
  decodeMsPerToken: number;
  /**
   * Cost profile (built-in name or kvroute-cost-profile/v1 file) the first-byte bound takes the
   * request's expected prefill (and decode) time from, instead of the two linear settings above.
   */
  costProfile?: string;
  /** With a cost profile: the first-byte bound allows this many times the profile's estimate. */
  firstByteSlowdown: number;
  /** A non-streaming 2xx body larger than this is passed through unchecked instead of held. */
  maxHeldResponseBytes: number;
  outlier: OutlierConfig;
  maxRetries: number;
  /** Backoff before a retry: uniform in [0, min(max, base * 2^(retry-1))] ms (full jitter). */
  retryBackoffBaseMs: number;
  retryBackoffMaxMs: number;
  /** Retries in flight at most this percent of requests in flight (but always retryMinConcurrency). */
  retryBudgetPercent: number;
  retryMinConcurrency: number;
  maxBodyBytes: number;
  /** The model's context length; undefined = the smallest one the workers report. */
  maxModelLen?: number;
  maxJsonDepth: number;
  /** Requests being served at once (0 = no limit); beyond it they wait in the queue. */
  maxConcurrentRequests: number;
  /** Requests in flight on one rank at once (0 = no limit). */
  maxConcurrentPerRank: number;
  /** Requests waiting for a slot; beyond it 503 with Retry-After. */
  maxQueuedRequests: number;
  queueTimeoutMs: number;
  /** Token bucket per API key (or client address without keys): requests/s, 0 = off. */
  rateLimitRps: number;
  rateLimitBurst: number;
  /** Time to receive a request body once its headers arrived (408 beyond). */
  bodyTimeoutMs: number;
  /** Time to receive a request's headers. */
  headersTimeoutMs: number;
  /** Client connections open at once (0 = no limit); more are closed on accept. */
  maxConnections: number;
  /** Request bodies held in memory at once, in bytes; beyond it 503 with Retry-After. */
  bodyMemoryBytes: number;
  /** Inference API keys (Authorization: Bearer); empty = inference needs no key. */
  apiKeys: string[];
  /** A file with one inference API key per line. */
  apiKeyFile?: string;
  /** Pass the client's Authorization and Cookie headers to workers. */
  forwardClientAuth: boolean;
  /** Record OpenTelemetry spans per request (tracing.ts); traceparent is sent either way. */
  otel: boolean;
  /** Sent to workers as `Authorization: Bearer` (workers started with --api-key). */
  workerApiKey?: string;
  /** Serve /metrics and the admin routes on this port instead of the main one. */
  adminPort?: number;
  adminHost: string;
  /** Path of a Hugging Face tokenizer.json; undefined = the approximate byte tokenizer. */
  tokenizer?: string;
  mockWorkers: number;
  mockTimeScale: number;
  mockProfile?: string;
  mockDpSize: number;
  /** First port of the --mock-workers (then +1 each); undefined = any free ports. */
  mockBasePort?: number;
  /** Forward requests to paths the router does not know to a worker instead of a 404. */
  passThroughUnknown: boolean;
  /** Record the routed traffic to this JSONL file (recording/recorder.ts); undefined = off. */
  recordTrace?: string;
  /** The HMAC secret for the recorded block ids; undefined = a random one per recording. */
  recordTraceSecretFile?: string;
  recordBlockTokens: number;
  recordSampleRate: number;
  recordRotateBytes: number;
  recordRotateMs: number;
  recordQueueBytes: number;
  /** Cost profile (file or built-in name) of the live cache model (shadow/); undefined = off. */
  shadowProfile?: string;
  /** KV tokens per rank for the live cache model; undefined = the profile's. */
  shadowKvCapacity?: number;
  shadowPageSize: number;
  /** Requests per rank in the drift gauge's sliding window. */
  shadowWindow: number;
  logLevel: string;
  /** 'json' (one object per line), 'pretty' (readable lines), 'auto' = pretty on a TTY. */
  logFormat: 'auto' | 'json' | 'pretty';
  /** Workers found by pod label through the Kubernetes API (src/discovery/). */
  serviceDiscovery: boolean;
  /** key=value label requirements the worker pods must all match. */
  selector: string[];
  /** Port of the workers' HTTP server in each discovered pod. */
  serviceDiscoveryPort: number;
  /** Namespace to watch; undefined = the pod's own namespace (service account), else default. */
  serviceDiscoveryNamespace?: string;
  /** KV events: endpoint template with {host} (tcp://{host}:5557); see src/kv-events/feed.ts. */
  kvEventsEndpoint?: string;
  kvEventsReplayEndpoint?: string;
  /** KV events: one endpoint per worker, in --worker-urls order (wins over the template). */
  kvEventsEndpoints: string[];
  kvEventsReplayEndpoints: string[];
  kvEventsTopic: string;
  /** A rank that lost a batch this recently, or (with a replay endpoint) whose publisher is silent this long, is not live. */
  kvEventsStaleMs: number;
  kvEventsMaxBlocks: number;
  /** The engines' KV block size; an engine reporting another has its blocks refused for its rank. */
  kvEventsBlockSize: number;
  /**
   * Worker groups keyed by model (YAML `models:`, or --model-group): each its own workers,
   * method and options. Empty: one group of --worker-urls that takes every model.
   */
  modelGroups: ModelGroupConfig[];
}

export const DEFAULT_CONFIG: RouterConfig = {
  host: '127.0.0.1',
  port: 30000,
  workerUrls: [],
  dpAware: false,
  loadBalanceMethod: 'cache_aware',
  affinityMaxEntries: 100_000,
  affinityTtlMs: 3_600_000,
  methodOptions: {},
  policyOptions: {},
  allowRankOverride: false,
  loadPollIntervalMs: 0,
  health: {
    intervalMs: 5_000,
    timeoutMs: 2_000,
    failureThreshold: 3,
    successThreshold: 2,
    endpoint: '/health',
    generationIntervalMs: 30_000,
    generationTimeoutMs: 10_000,
  },
  requestTimeoutMs: 1_800_000,
  firstByteTimeoutMs: 10_000,
  idleTimeoutMs: 10_000,
  prefillTokensPerSec: 2_000,
  decodeMsPerToken: 50,
  firstByteSlowdown: 4,
  maxHeldResponseBytes: 64 * 1024 * 1024,
  outlier: {
    consecutiveFailures: 3,
    baseEjectionMs: 30_000,
    maxEjectionMs: 300_000,
    maxEjectedPercent: 50,
  },
  maxRetries: 2,
  retryBackoffBaseMs: 25,
  retryBackoffMaxMs: 250,
  retryBudgetPercent: 25,
  retryMinConcurrency: 8,
  maxJsonDepth: 64,
  maxConcurrentRequests: 4096,
  maxConcurrentPerRank: 0,
  maxQueuedRequests: 4096,
  queueTimeoutMs: 30_000,
  rateLimitRps: 0,
  rateLimitBurst: 0,
  bodyTimeoutMs: 30_000,
  headersTimeoutMs: 10_000,
  maxConnections: 16_384,
  bodyMemoryBytes: 64 * 1024 * 1024,
  apiKeys: [],
  forwardClientAuth: false,
  otel: false,
  adminHost: '127.0.0.1',
  maxBodyBytes: 32 * 1024 * 1024,
  mockWorkers: 0,
  mockTimeScale: 1,
  mockDpSize: 1,
  passThroughUnknown: false,
  recordBlockTokens: 512,
  recordSampleRate: 1,
  recordRotateBytes: 256 * 1024 * 1024,
  recordRotateMs: 3_600_000,
  recordQueueBytes: 16 * 1024 * 1024,
  shadowPageSize: 1,
  shadowWindow: 1000,
  logLevel: 'info',
  logFormat: 'auto',
  serviceDiscovery: false,
  selector: [],
  serviceDiscoveryPort: 30000,
  kvEventsEndpoints: [],
  kvEventsReplayEndpoints: [],
  kvEventsTopic: '',
  kvEventsStaleMs: 10_000,
  kvEventsMaxBlocks: 4_194_304,
  kvEventsBlockSize: 16,
  pdDisaggregation: false,
  prefill: [],
  decode: [],
  pdStyle: 'sglang',
  pdRankDiscovery: 'told',
  modelGroups: [],
};

type Kind = 'string' | 'int' | 'number' | 'bool' | 'duration' | 'list' | 'kv' | 'groups';

export interface OptionSpec {
  /** Flag name without the dashes; also the YAML key (camelCase `key` is accepted too). */
  flag: string;
  /** Path in RouterConfig, dotted for nested fields. */
  key: string;
  kind: Kind;
  help: string;
  aliases?: string[];
  /** Flags that are spelled differently in SGLang's router and mean the same with a unit change. */
  scale?: number;
  choices?: readonly string[];
  min?: number;
  max?: number;
}

/** Spellings the router accepted before method options had flags of their own. */
const METHOD_OPTION_ALIASES: Readonly<Record<string, readonly string[]>> = {
  window: ['prefix-window'],
};

/**
 * One flag (and env variable and YAML key) per option of any registered method, derived from
 * the methods' schemas: the flag is the option's kebab-case name, the YAML key also its
 * camelCase one; the help lists each method's default, range and doc.
 */
function methodOptionSpecs(): OptionSpec[] {
  return methodOptionCatalog().map((entry) => {
    const specs = Object.values(entry.specs);
    const aliases = [...(METHOD_OPTION_ALIASES[entry.name] ?? [])];
    if (entry.name !== entry.flag) aliases.push(entry.name);
    const out: OptionSpec = {
      flag: entry.flag,
      key: `methodOptions.${entry.name}`,
      kind: 'string',
      help: `Method option ${entry.name}: ${optionHelp(entry)}`,
      aliases,
    };
    if (isNumericOption(entry)) {
      out.kind = specs.every((x) => x.type === 'int') ? 'int' : 'number';
      out.min = Math.min(...specs.map((x) => (x.type === 'enum' ? 0 : x.min)));
    } else {
      out.choices = [...new Set(specs.flatMap((x) => (x.type === 'enum' ? x.choices : [])))];
    }
    return out;
  });
}

export const OPTIONS: readonly OptionSpec[] = [
  { flag: 'host', key: 'host', kind: 'string', help: 'Address to listen on' },
  {
    flag: 'port',
    key: 'port',
    kind: 'int',
    min: 0,
    max: 65535,
    help: 'Port to listen on (0 = any free port)',
  },
  {
    flag: 'worker-urls',
    key: 'workerUrls',
    kind: 'list',
    help: 'Worker base URLs; each one rank, or each one DP server with --dp-aware',
  },
  {
    flag: 'dp-aware',
    key: 'dpAware',
    kind: 'bool',
    help: 'Workers are SGLang servers with DP attention: route to (url, dp rank) and set routed_dp_rank',
  },
  {
    flag: 'dp-size',
    key: 'dpSize',
    kind: 'int',
    min: 1,
    help: 'DP ranks per worker with --dp-aware (default: from /get_server_info)',
  },
  {
    flag: 'load-balance-method',
    key: 'loadBalanceMethod',
    kind: 'string',
    aliases: ['policy'],
    help: 'Policy method (SGLang names: round_robin, total_requests, total_tokens, follow_bootstrap_room, prefix_match; kvroute: consistent_hash, cache_aware, the recommended default)',
  },
  {
    flag: 'dp-cache-affinity',
    key: 'dpCacheAffinity',
    kind: 'string',
    choices: ['routing_key'],
    help: 'Cache affinity: routing_key pins a routing key to the rank that served it first',
  },
  {
    flag: 'affinity-max-entries',
    key: 'affinityMaxEntries',
    kind: 'int',
    min: 1,
    help: 'Affinity table size (LRU)',
  },
  {
    flag: 'affinity-ttl-ms',
    key: 'affinityTtlMs',
    kind: 'duration',
    min: 1,
    help: 'Affinity entry lifetime',
  },
  ...methodOptionSpecs(),
  {
    flag: 'model-group',
    key: 'modelGroups',
    kind: 'groups',
    aliases: ['models'],
    help: "A worker group serving one model, routed to by the request's `model`: NAME=URL[,URL...][;method=M][;OPTION=V...] (repeatable; YAML: `models:`, a list of maps with model, aliases, default, worker-urls, load-balance-method, method options, policy-option)",
  },
  {
    flag: 'policy-option',
    key: 'policyOptions',
    kind: 'kv',
    help: 'Extra method option key=value (repeatable); YAML: a map',
  },
  {
    flag: 'allow-rank-override',
    key: 'allowRankOverride',
    kind: 'bool',
    help: 'Honour X-Data-Parallel-Rank / routed_dp_rank from clients (otherwise 403)',
  },
  {
    flag: 'admin-token',
    key: 'adminToken',
    kind: 'string',
    help: 'Bearer token for the admin routes (GET/POST /ranks, GET/POST /policy, POST /flush_cache, /trace_recording); without it those routes do not exist',
  },
  {
    flag: 'load-poll-interval',
    key: 'loadPollIntervalMs',
    kind: 'duration',
    min: 0,
    help: 'Poll /v1/loads (or vLLM /metrics) this often to correct load; 0 = off',
  },
  {
    flag: 'health-check-interval-ms',
    key: 'health.intervalMs',
    kind: 'duration',
    min: 0,
    help: 'Active /health period; 0 = off',
  },
  {
    flag: 'health-check-interval-secs',
    key: 'health.intervalMs',
    kind: 'number',
    scale: 1000,
    min: 0,
    help: 'SGLang spelling of --health-check-interval-ms, in seconds',
  },
  {
    flag: 'health-check-timeout-ms',
    key: 'health.timeoutMs',
    kind: 'duration',
    min: 1,
    help: 'Active check timeout',
  },
  {
    flag: 'health-check-timeout-secs',
    key: 'health.timeoutMs',
    kind: 'number',
    scale: 1000,
    min: 0.001,
    help: 'SGLang spelling of --health-check-timeout-ms, in seconds',
  },
  {
    flag: 'health-failure-threshold',
    key: 'health.failureThreshold',
    kind: 'int',
    min: 1,
    help: 'Consecutive failures to mark a worker down',
  },
  {
    flag: 'health-success-threshold',
    key: 'health.successThreshold',
    kind: 'int',
    min: 1,
    help: 'Consecutive successes to mark it up',
  },
  {
    flag: 'health-check-endpoint',
    key: 'health.endpoint',
    kind: 'string',
    help: 'Path probed by active checks',
  },
  {
    flag: 'generation-check-interval-ms',
    key: 'health.generationIntervalMs',
    kind: 'duration',
    min: 0,
    help: 'Generation check period (SGLang /health_generate, else a 1-token completion); 0 = off',
  },
  {
    flag: 'generation-check-timeout-ms',
    key: 'health.generationTimeoutMs',
    kind: 'duration',
    min: 1,
    help: 'Generation check timeout',
  },
  {
    flag: 'request-timeout-ms',
    key: 'requestTimeoutMs',
    kind: 'duration',
    min: 1,
    help: 'Per-request upstream timeout (504 beyond)',
  },
  {
    flag: 'request-timeout-secs',
    key: 'requestTimeoutMs',
    kind: 'number',
    scale: 1000,
    min: 0.001,
    help: 'SGLang spelling of --request-timeout-ms, in seconds',
  },
  {
    flag: 'max-retries',
    key: 'maxRetries',
    kind: 'int',
    min: 0,
    help: 'Other ranks tried when a request fails before any byte reached the client',
  },
  {
    flag: 'max-body-bytes',
    key: 'maxBodyBytes',
    kind: 'int',
    min: 1,
    help: 'Request body limit (413 beyond)',
  },
  {
    flag: 'first-byte-timeout-ms',
    key: 'firstByteTimeoutMs',
    kind: 'duration',
    min: 0,
    help: 'Floor of the wait for a response byte; the prompt at --prefill-tokens-per-sec (and, non-streaming, max tokens at --decode-ms-per-token) is added; then retried elsewhere',
  },
  {
    flag: 'idle-timeout-ms',
    key: 'idleTimeoutMs',
    kind: 'duration',
    min: 0,
    help: 'Longest pause between response chunks (a stream then ends with an error event); 0 = off',
  },
  {
    flag: 'prefill-tokens-per-sec',
    key: 'prefillTokensPerSec',
    kind: 'number',
    min: 1,
    help: 'Prefill speed assumed by the first-byte timeout (keep it below the real one)',
  },
  {
    flag: 'decode-ms-per-token',
    key: 'decodeMsPerToken',
    kind: 'number',
    min: 0,
    help: 'Per output token added to a non-streaming request first-byte timeout',
  },
  {
    flag: 'cost-profile',
    key: 'costProfile',
    kind: 'string',
    help: "Cost profile (built-in name, or the JSON `kvroute-sim fit` or the GPU worker --calibrate writes) for the first-byte timeout: floor + --first-byte-slowdown x the request's expected prefill (and, non-streaming, decode) time, instead of the linear --prefill-tokens-per-sec / --decode-ms-per-token model",
  },
  {
    flag: 'first-byte-slowdown',
    key: 'firstByteSlowdown',
    kind: 'number',
    min: 1,
    help: "With --cost-profile: how many times the profile's time to first byte a busy rank may take before the attempt is timed out",
  },
  {
    flag: 'max-held-response-bytes',
    key: 'maxHeldResponseBytes',
    kind: 'int',
    min: 1,
    help: 'Non-streaming bodies up to this size are checked before the client sees them',
  },
  {
    flag: 'outlier-consecutive-failures',
    key: 'outlier.consecutiveFailures',
    kind: 'int',
    min: 0,
    help: 'Consecutive gateway failures (5xx, reset, timeout, bad body) that eject a worker; 0 = off',
  },
  {
    flag: 'outlier-base-ejection-ms',
    key: 'outlier.baseEjectionMs',
    kind: 'duration',
    min: 1,
    help: 'Ejection time, times the number of ejections so far',
  },
  {
    flag: 'outlier-max-ejection-ms',
    key: 'outlier.maxEjectionMs',
    kind: 'duration',
    min: 1,
    help: 'Longest ejection',
  },
  {
    flag: 'outlier-max-ejected-percent',
    key: 'outlier.maxEjectedPercent',
    kind: 'number',
    min: 0,
    help: 'Most workers ejected at once, percent (at least one may be; never the last routable)',
  },
  {
    flag: 'retry-backoff-base-ms',
    key: 'retryBackoffBaseMs',
    kind: 'duration',
    min: 0,
    help: 'Retry backoff base: a retry waits uniform [0, min(max, base*2^(n-1))]',
  },
  {
    flag: 'retry-backoff-max-ms',
    key: 'retryBackoffMaxMs',
    kind: 'duration',
    min: 0,
    help: 'Retry backoff cap',
  },
  {
    flag: 'retry-budget-percent',
    key: 'retryBudgetPercent',
    kind: 'number',
    min: 0,
    help: 'Retries in flight at most this percent of requests in flight',
  },
  {
    flag: 'retry-min-concurrency',
    key: 'retryMinConcurrency',
    kind: 'int',
    min: 0,
    help: 'Retries always allowed in flight, whatever the budget',
  },
  {
    flag: 'max-model-len',
    key: 'maxModelLen',
    kind: 'int',
    min: 1,
    help: 'Model context length bounding max_tokens (default: from the workers /v1/models or /get_model_info)',
  },
  {
    flag: 'max-json-depth',
    key: 'maxJsonDepth',
    kind: 'int',
    min: 2,
    help: 'Deepest JSON nesting in a request body (400 beyond)',
  },
  {
    flag: 'max-concurrent-requests',
    key: 'maxConcurrentRequests',
    kind: 'int',
    min: 0,
    help: 'Requests served at once; more wait in the queue (0 = no limit)',
  },
  {
    flag: 'max-concurrent-per-rank',
    key: 'maxConcurrentPerRank',
    kind: 'int',
    min: 0,
    help: 'Requests in flight on one rank; a full rank is skipped, all full = wait (0 = no limit)',
  },
  {
    flag: 'max-queued-requests',
    key: 'maxQueuedRequests',
    kind: 'int',
    min: 0,
    help: 'Requests waiting for a slot; beyond it 503 with Retry-After',
  },
  {
    flag: 'queue-timeout-ms',
    key: 'queueTimeoutMs',
    kind: 'duration',
    min: 1,
    help: 'Longest wait in the queue (503 with Retry-After beyond)',
  },
  {
    flag: 'rate-limit-rps',
    key: 'rateLimitRps',
    kind: 'number',
    min: 0,
    help: 'Token bucket per API key (per client address without keys), requests/s; 429 beyond; 0 = off',
  },
  {
    flag: 'rate-limit-burst',
    key: 'rateLimitBurst',
    kind: 'int',
    min: 0,
    help: 'Token bucket size (default: 2 x --rate-limit-rps)',
  },
  {
    flag: 'body-timeout-ms',
    key: 'bodyTimeoutMs',
    kind: 'duration',
    min: 1,
    help: 'Time to receive a request body (408 and close beyond)',
  },
  {
    flag: 'headers-timeout-ms',
    key: 'headersTimeoutMs',
    kind: 'duration',
    min: 1,
    help: 'Time to receive request headers',
  },
  {
    flag: 'max-connections',
    key: 'maxConnections',
    kind: 'int',
    min: 0,
    help: 'Client connections open at once (0 = no limit)',
  },
  {
    flag: 'body-memory-bytes',
    key: 'bodyMemoryBytes',
    kind: 'int',
    min: 1,
    help: 'Request bodies held at once, bytes; beyond it 503 with Retry-After before the body is read',
  },
  {
    flag: 'api-key',
    key: 'apiKeys',
    kind: 'list',
    aliases: ['api-keys'],
    help: 'Inference API keys clients send as Authorization: Bearer (repeatable; none = open)',
  },
  {
    flag: 'api-key-file',
    key: 'apiKeyFile',
    kind: 'string',
    help: 'File with one inference API key per line',
  },
  {
    flag: 'forward-client-auth',
    key: 'forwardClientAuth',
    kind: 'bool',
    help: "Pass the client's Authorization and Cookie headers on to workers",
  },
  {
    flag: 'otel',
    key: 'otel',
    kind: 'bool',
    help: 'Record OpenTelemetry spans per request (received, routed, upstream first byte, done) through the tracer provider the process registers',
  },
  {
    flag: 'worker-api-key',
    key: 'workerApiKey',
    kind: 'string',
    help: 'Bearer key sent to workers (those started with --api-key)',
  },
  {
    flag: 'admin-port',
    key: 'adminPort',
    kind: 'int',
    min: 0,
    max: 65535,
    help: 'Serve /metrics and the admin routes on this port only (not on the main one)',
  },
  {
    flag: 'admin-host',
    key: 'adminHost',
    kind: 'string',
    help: 'Address of the --admin-port listener',
  },
  {
    flag: 'tokenizer',
    key: 'tokenizer',
    kind: 'string',
    help: 'Hugging Face tokenizer.json for routing tokens (default: approximate byte tokenizer)',
  },
  {
    flag: 'pd-disaggregation',
    key: 'pdDisaggregation',
    kind: 'bool',
    help: 'Prefill/decode disaggregation: each request goes to a --prefill and a --decode server',
  },
  {
    flag: 'prefill',
    key: 'prefill',
    kind: 'list',
    help: 'PD: a prefill server URL, optionally followed by its bootstrap port (repeatable: --prefill URL [PORT])',
  },
  {
    flag: 'decode',
    key: 'decode',
    kind: 'list',
    help: 'PD: a decode server URL (repeatable)',
  },
  {
    flag: 'prefill-policy',
    key: 'prefillPolicy',
    kind: 'string',
    help: 'PD: method choosing the prefill rank, any method (default: --load-balance-method; a cache-aware one is the point)',
  },
  {
    flag: 'decode-policy',
    key: 'decodePolicy',
    kind: 'string',
    help: 'PD: load method choosing the decode rank: round_robin, total_requests or total_tokens (default total_tokens)',
  },
  {
    flag: 'pd-style',
    key: 'pdStyle',
    kind: 'string',
    choices: ['sglang', 'vllm'],
    help: 'PD: sglang sends both requests at once with bootstrap_host/port/room; vllm prefills first (max_tokens 1, kv_transfer_params) then decodes',
  },
  {
    flag: 'pd-rank-discovery',
    key: 'pdRankDiscovery',
    kind: 'string',
    choices: ['told', 'bootstrap'],
    help: 'PD with --dp-aware: told sends the decode server disagg_prefill_dp_rank; bootstrap leaves it to look the rank up on the prefill bootstrap server',
  },
  {
    flag: 'mock-workers',
    key: 'mockWorkers',
    kind: 'int',
    min: 0,
    help: 'Start N mock workers on loopback and route to them',
  },
  {
    flag: 'mock-time-scale',
    key: 'mockTimeScale',
    kind: 'number',
    min: 0,
    help: 'Mock workers: cost-model time scale (0 = instant)',
  },
  {
    flag: 'mock-profile',
    key: 'mockProfile',
    kind: 'string',
    help: 'Mock workers: sim cost profile name',
  },
  {
    flag: 'mock-dp-size',
    key: 'mockDpSize',
    kind: 'int',
    min: 1,
    help: 'Mock workers: internal DP ranks each (use with --dp-aware)',
  },
  {
    flag: 'mock-base-port',
    key: 'mockBasePort',
    kind: 'int',
    min: 1,
    help: 'Mock workers: listen on this port and the next N-1 (default: any free ports)',
  },
  {
    flag: 'pass-through-unknown',
    key: 'passThroughUnknown',
    kind: 'bool',
    help: 'Forward requests to paths the router does not serve to a healthy worker (round robin) instead of answering 404',
  },
  {
    flag: 'record-trace',
    key: 'recordTrace',
    kind: 'string',
    help: 'Record the routed traffic to this JSONL file (docs/recorded-trace.md: Mooncake fields, HMAC-keyed block ids, no prompt text); also on/off through POST /trace_recording',
  },
  {
    flag: 'record-trace-secret-file',
    key: 'recordTraceSecretFile',
    kind: 'string',
    help: 'File with the per-deployment HMAC secret of recorded block ids and keys (>= 16 bytes); default: a random secret per recording',
  },
  {
    flag: 'record-block-tokens',
    key: 'recordBlockTokens',
    kind: 'int',
    min: 1,
    help: 'Recorded trace: prompt tokens per hash id',
  },
  {
    flag: 'record-sample-rate',
    key: 'recordSampleRate',
    kind: 'number',
    min: 0,
    help: 'Recorded trace: share of requests recorded, in (0, 1]',
  },
  {
    flag: 'record-rotate-bytes',
    key: 'recordRotateBytes',
    kind: 'int',
    min: 0,
    help: 'Recorded trace: rotate the file at this size (PATH.000001, ...); 0 = never',
  },
  {
    flag: 'record-rotate-age',
    key: 'recordRotateMs',
    kind: 'duration',
    min: 0,
    help: 'Recorded trace: rotate the file at this age; 0 = never',
  },
  {
    flag: 'record-queue-bytes',
    key: 'recordQueueBytes',
    kind: 'int',
    min: 1024,
    help: 'Recorded trace: lines waiting for the disk at most this many bytes; beyond it lines are dropped (kvroute_trace_dropped_total)',
  },
  {
    flag: 'shadow-profile',
    key: 'shadowProfile',
    kind: 'string',
    help: "Run the simulator's per-rank cache model on the routed traffic with this cost profile (JSON file or built-in name) and export predicted vs observed cached tokens and a drift gauge",
  },
  {
    flag: 'shadow-kv-capacity',
    key: 'shadowKvCapacity',
    kind: 'int',
    min: 1,
    help: "Shadow cache model: KV tokens per rank (default: the profile's)",
  },
  {
    flag: 'shadow-page-size',
    key: 'shadowPageSize',
    kind: 'int',
    min: 1,
    help: "Shadow cache model: the engines' KV page size in tokens",
  },
  {
    flag: 'shadow-window',
    key: 'shadowWindow',
    kind: 'int',
    min: 1,
    help: 'Shadow cache model: requests per rank in the drift gauge window',
  },
  {
    flag: 'kv-events-endpoint',
    key: 'kvEventsEndpoint',
    kind: 'string',
    help: "Subscribe to the workers' KV events (vLLM/SGLang ZMQ): endpoint template, {host} = worker host, e.g. tcp://{host}:5557 (DP rank r: port + r)",
  },
  {
    flag: 'kv-events-replay-endpoint',
    key: 'kvEventsReplayEndpoint',
    kind: 'string',
    help: 'KV events replay (ROUTER) endpoint template, e.g. tcp://{host}:5558; fills sequence gaps',
  },
  {
    flag: 'kv-events-endpoints',
    key: 'kvEventsEndpoints',
    kind: 'list',
    help: 'KV event endpoints, one per worker in --worker-urls order (instead of the template)',
  },
  {
    flag: 'kv-events-replay-endpoints',
    key: 'kvEventsReplayEndpoints',
    kind: 'list',
    help: 'KV event replay endpoints, one per worker in --worker-urls order',
  },
  {
    flag: 'kv-events-topic',
    key: 'kvEventsTopic',
    kind: 'string',
    help: "KV events topic (the engines' kv-events-config topic; default empty)",
  },
  {
    flag: 'kv-events-stale',
    key: 'kvEventsStaleMs',
    kind: 'duration',
    min: 1,
    help: 'A rank falls back to the learned index while its socket is not connected (warned after this long), when it lost a batch this recently, or (with a replay endpoint) when its publisher is not heard from this long (default 10s)',
  },
  {
    flag: 'kv-events-max-blocks',
    key: 'kvEventsMaxBlocks',
    kind: 'int',
    min: 1,
    help: 'Events index bound: blocks kept per rank at most (default 4194304)',
  },
  {
    flag: 'kv-events-block-size',
    key: 'kvEventsBlockSize',
    kind: 'int',
    min: 1,
    help: "The engines' KV block size (vLLM --block-size, SGLang --page-size); an engine whose events report another size has its blocks refused for its rank, with a warning (default 16)",
  },
  {
    flag: 'log-level',
    key: 'logLevel',
    kind: 'string',
    choices: ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'],
    help: 'Log level',
  },
  {
    flag: 'log-format',
    key: 'logFormat',
    kind: 'string',
    choices: ['auto', 'json', 'pretty'],
    help: 'json: one JSON object per line; pretty: readable lines; auto: pretty on a terminal, else json',
  },
  {
    flag: 'service-discovery',
    key: 'serviceDiscovery',
    kind: 'bool',
    help: 'Find workers by pod label through the Kubernetes API (in-cluster service account, or KUBECONFIG)',
  },
  {
    flag: 'selector',
    key: 'selector',
    kind: 'list',
    help: 'Service discovery: label requirements key=value the worker pods must match (all of them)',
  },
  {
    flag: 'service-discovery-port',
    key: 'serviceDiscoveryPort',
    kind: 'int',
    min: 1,
    max: 65535,
    help: "Service discovery: the workers' HTTP port in each pod",
  },
  {
    flag: 'service-discovery-namespace',
    key: 'serviceDiscoveryNamespace',
    kind: 'string',
    help: "Service discovery: namespace to watch (default: the router pod's own)",
  },
];

const BY_FLAG = new Map<string, OptionSpec>();
for (const o of OPTIONS) {
  BY_FLAG.set(o.flag, o);
  // Two flags may share a key (ms and SGLang's secs spelling): the key means the first, unscaled one.
  if (!BY_FLAG.has(o.key)) BY_FLAG.set(o.key, o);
  for (const a of o.aliases ?? []) BY_FLAG.set(a, o);
}

export function envName(o: OptionSpec): string {
  return `KVROUTE_${o.flag.toUpperCase().replaceAll('-', '_')}`;
}

const DURATION_UNITS_MS: Readonly<Record<string, number>> = {
  ms: 1,
  s: 1000,
  m: 60_000,
  h: 3_600_000,
};

function parseDuration(raw: string, what: string): number {
  const m = /^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h)?\s*$/.exec(raw);
  if (!m)
    throw new RouterConfigError(
      `${what}: expected a duration like 500, 500ms, 2s, 1m or 1h, got "${raw}"`,
    );
  return Number(m[1]) * DURATION_UNITS_MS[m[2] ?? 'ms']!;
}

function convert(o: OptionSpec, value: unknown, what: string): unknown {
  const asString = (): string => {
    if (typeof value === 'string') return value;
    if (typeof value === 'number' || typeof value === 'boolean') return String(value);
    throw new RouterConfigError(`${what}: expected a ${o.kind}, got ${JSON.stringify(value)}`);
  };
  let out: unknown;
  switch (o.kind) {
    case 'string': {
      out = asString();
      if (o.choices && !o.choices.includes(out as string)) {
        throw new RouterConfigError(
          `${what}: must be one of ${o.choices.join(', ')}, got "${out}"`,
        );
      }
      return out;
    }
    case 'bool': {
      if (typeof value === 'boolean') return value;
      const s = asString().toLowerCase();
      if (['1', 'true', 'yes', 'on', ''].includes(s)) return true;
      if (['0', 'false', 'no', 'off'].includes(s)) return false;
      throw new RouterConfigError(`${what}: expected true or false, got "${s}"`);
    }
    case 'int':
    case 'number': {
      const n = typeof value === 'number' ? value : (parseNumber(asString()) ?? Number.NaN);
      if (!Number.isFinite(n)) {
        throw new RouterConfigError(`${what}: expected a number, got "${asString()}"`);
      }
      if (o.kind === 'int' && !Number.isInteger(n))
        throw new RouterConfigError(`${what}: expected an integer, got ${n}`);
      if (o.min !== undefined && n < o.min)
        throw new RouterConfigError(`${what}: must be >= ${o.min}, got ${n}`);
      if (o.max !== undefined && n > o.max)
        throw new RouterConfigError(`${what}: must be <= ${o.max}, got ${n}`);
      return o.scale ? n * o.scale : n;
    }
    case 'duration': {
      const n = typeof value === 'number' ? value : parseDuration(asString(), what);
      if (!Number.isFinite(n)) throw new RouterConfigError(`${what}: expected a duration`);
      if (o.min !== undefined && n < o.min)
        throw new RouterConfigError(`${what}: must be >= ${o.min} ms, got ${n}`);
      return n;
    }
    case 'list': {
      if (Array.isArray(value)) return value.map((v) => String(v));
      return asString()
        .split(/[\s,]+/)
        .filter((s) => s.length > 0);
    }
    case 'groups':
      return parseModelGroups(value, what, readGroupKey);
    case 'kv': {
      if (value !== null && typeof value === 'object' && !Array.isArray(value)) return { ...value };
      const s = asString();
      const eq = s.indexOf('=');
      if (eq <= 0) throw new RouterConfigError(`${what}: expected key=value, got "${s}"`);
      const key = s.slice(0, eq);
      if (!isOptionKey(key)) throw new RouterConfigError(`${what}: invalid key "${key}"`);
      // Typed as YAML would type them, by the policy's one strict scalar parser.
      return { [key]: parseScalar(s.slice(eq + 1)) };
    }
  }
}

type Partial = Map<string, unknown>;

function put(acc: Partial, o: OptionSpec, value: unknown): void {
  if (o.kind === 'kv') {
    acc.set(o.key, {
      ...((acc.get(o.key) as Record<string, unknown>) ?? {}),
      ...(value as object),
    });
  } else if ((o.kind === 'list' || o.kind === 'groups') && acc.has(o.key)) {
    acc.set(o.key, [...(acc.get(o.key) as string[]), ...(value as string[])]);
  } else {
    acc.set(o.key, value);
  }
}

/** Parses argv (without node and script). Returns the options set, and --config if given. */
export function parseArgs(args: readonly string[]): { values: Partial; configFile?: string } {
  // `pnpm router -- --port 8000` (pnpm 12) hands the script a leading `--`: drop it.
  const argv = args[0] === '--' ? args.slice(1) : args;
  const values: Partial = new Map();
  let configFile: string | undefined;
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i]!;
    if (!arg.startsWith('--'))
      throw new RouterConfigError(`unexpected argument "${arg}" (flags start with --)`);
    let name = arg.slice(2);
    let inline: string | undefined;
    const eq = name.indexOf('=');
    if (eq >= 0) {
      inline = name.slice(eq + 1);
      name = name.slice(0, eq);
    }
    if (name === 'config') {
      configFile = inline ?? argv[++i];
      if (!configFile) throw new RouterConfigError('--config needs a file path');
      continue;
    }
    const o = BY_FLAG.get(name);
    if (!o || (name !== o.flag && !(o.aliases ?? []).includes(name))) {
      throw new RouterConfigError(`unknown flag --${name} (see --help)`);
    }
    const what = `--${name}`;
    if (o.kind === 'bool') {
      const next = argv[i + 1];
      if (inline !== undefined) put(values, o, convert(o, inline, what));
      else if (next !== undefined && /^(true|false)$/i.test(next))
        put(values, o, convert(o, argv[++i], what));
      else put(values, o, true);
      continue;
    }
    if (o.kind === 'groups') {
      const groups: unknown[] = [];
      if (inline !== undefined) groups.push(...(convert(o, inline, what) as unknown[]));
      while (inline === undefined && i + 1 < argv.length && !argv[i + 1]!.startsWith('--')) {
        groups.push(...(convert(o, argv[++i], what) as unknown[]));
      }
      if (groups.length === 0) throw new RouterConfigError(`${what} needs NAME=URL[,URL...]`);
      put(values, o, groups);
      continue;
    }
    if (o.kind === 'list') {
      // SGLang style: --worker-urls A B C (values up to the next flag).
      const items: string[] = inline !== undefined ? (convert(o, inline, what) as string[]) : [];
      while (inline === undefined && i + 1 < argv.length && !argv[i + 1]!.startsWith('--')) {
        items.push(...(convert(o, argv[++i], what) as string[]));
      }
      if (items.length === 0) throw new RouterConfigError(`${what} needs at least one value`);
      put(values, o, items);
      continue;
    }
    const raw = inline ?? argv[++i];
    if (raw === undefined) throw new RouterConfigError(`${what} needs a value`);
    put(values, o, convert(o, raw, what));
  }
  return { values, configFile };
}

export function readEnv(env: NodeJS.ProcessEnv): Partial {
  const values: Partial = new Map();
  for (const o of OPTIONS) {
    const name = envName(o);
    const raw = env[name];
    if (raw === undefined || raw === '') continue;
    if (o.kind === 'groups') {
      for (const part of raw.split(/\s+/).filter((s) => s.length > 0))
        put(values, o, convert(o, part, name));
    } else if (o.kind === 'kv') {
      for (const part of raw.split(',').filter((s) => s.trim()))
        put(values, o, convert(o, part.trim(), name));
    } else {
      put(values, o, convert(o, raw, name));
    }
  }
  return values;
}

/**
 * YAML's core schema reads `0x10` as 16, `0o17` as 15 and `.inf` as Infinity. Flags and env
 * variables take plain decimals only, so the file does too: without those tags such a value
 * stays a string and the option's own number check refuses it, naming the key.
 */
function decimalScalarsOnly(tags: Tags): Tags {
  return tags.filter((t) => {
    if (typeof t === 'string') return true;
    const { format, test } = t as { format?: string; test?: RegExp };
    return format !== 'HEX' && format !== 'OCT' && !(test?.test('.inf') || test?.test('.nan'));
  });
}

export function readYaml(text: string, source: string): Partial {
  let doc: unknown;
  try {
    doc = parseYaml(text, { schema: 'core', customTags: decimalScalarsOnly });
  } catch (err) {
    throw new RouterConfigError(`${source}: not valid YAML: ${(err as Error).message}`);
  }
  const values: Partial = new Map();
  if (doc === null || doc === undefined) return values;
  if (typeof doc !== 'object' || Array.isArray(doc))
    throw new RouterConfigError(`${source}: expected a map of options`);
  const visit = (obj: Record<string, unknown>, prefix: string): void => {
    for (const [k, v] of Object.entries(obj)) {
      const o = BY_FLAG.get(prefix + k);
      // `health: { intervalMs: ... }` (RouterConfig's own nesting, camelCase keys) is accepted
      // as a spelling of health-check-*; `health: { interval-ms }` is not.
      if (!o && prefix === '' && k === 'health' && v && typeof v === 'object') {
        visit(v as Record<string, unknown>, 'health.');
        continue;
      }
      if (!o) throw new RouterConfigError(`${source}: unknown key "${prefix}${k}"`);
      if (v === null) continue;
      put(values, o, convert(o, v, `${source}: ${prefix}${k}`));
    }
  };
  visit(doc as Record<string, unknown>, '');
  return values;
}

function setPath(target: Record<string, unknown>, path: string, value: unknown): void {
  const parts = path.split('.');
  let obj = target;
  for (const p of parts.slice(0, -1)) obj = obj[p] as Record<string, unknown>;
  obj[parts[parts.length - 1]!] = value;
}

function stripTrailingSlash(url: string): string {
  return url.replace(/\/+$/, '');
}

function checkWorkerUrl(u: string, what: string): string {
  let parsed: URL;
  try {
    parsed = new URL(u);
  } catch {
    throw new RouterConfigError(`${what}: "${u}" is not a URL (expected http://host:port)`);
  }
  if (parsed.protocol !== 'http:' && parsed.protocol !== 'https:') {
    throw new RouterConfigError(`${what}: "${u}" must be http:// or https://`);
  }
  return stripTrailingSlash(u);
}

/** A key of a `models:` entry (or of an admin policy switch), read as the router-wide option of that name would be. */
export function readGroupKey(key: string, value: unknown, what: string) {
  const o = BY_FLAG.get(key);
  if (!o || o.kind === 'groups') return undefined;
  return { path: o.key, value: convert(o, value, what) };
}

/** Merges the sources (defaults < YAML < env < flags) and checks the result as a whole. */
export function resolveConfig(
  argv: readonly string[],
  env: NodeJS.ProcessEnv = {},
  readFile: (path: string) => string = (p) => readFileSync(p, 'utf8'),
): RouterConfig {
  const cli = parseArgs(argv);
  const configFile = cli.configFile ?? env.KVROUTE_CONFIG;
  const layers: Partial[] = [];
  if (configFile) {
    let text: string;
    try {
      text = readFile(configFile);
    } catch (err) {
      throw new RouterConfigError(`--config ${configFile}: ${(err as Error).message}`);
    }
    layers.push(readYaml(text, configFile));
  }
  layers.push(readEnv(env), cli.values);
  const cfg = structuredClone(DEFAULT_CONFIG) as unknown as Record<string, unknown>;
  for (const layer of layers) {
    for (const [key, value] of layer) {
      const prev = key === 'policyOptions' ? (cfg.policyOptions as object) : undefined;
      setPath(cfg, key, prev ? { ...prev, ...(value as object) } : value);
    }
  }
  return validateConfig(cfg as unknown as RouterConfig);
}

export function validateConfig(input: RouterConfig): RouterConfig {
  const cfg = validatePdConfig(input);
  const urls: string[] = [];
  for (const u of cfg.workerUrls) urls.push(checkWorkerUrl(u, '--worker-urls'));
  if (new Set(urls).size !== urls.length)
    throw new RouterConfigError('--worker-urls: a URL is listed twice');
  if (cfg.modelGroups.length > 0) {
    validateModelGroups(cfg.modelGroups, (u) => checkWorkerUrl(u, 'models: worker-urls'));
    const grouped = cfg.modelGroups.flatMap((g) => g.workerUrls);
    // (A config validated before already carries the groups' workers in workerUrls.)
    if (urls.some((u) => !grouped.includes(u)) || cfg.mockWorkers > 0) {
      throw new RouterConfigError(
        'models: with worker groups, list each worker under its group (worker-urls of a models entry), not in --worker-urls or --mock-workers',
      );
    }
    // One flat list in group order: what onReady adds, and what --kv-events-endpoints follow.
    urls.splice(0, urls.length, ...grouped);
  }
  if (urls.length === 0 && cfg.mockWorkers === 0 && !cfg.adminToken && !cfg.serviceDiscovery) {
    throw new RouterConfigError(
      'no workers: give --worker-urls URL..., --service-discovery --selector k=v, or --mock-workers N (or --admin-token to add them later)',
    );
  }
  if (cfg.serviceDiscovery && cfg.selector.length === 0) {
    throw new RouterConfigError(
      "--service-discovery needs --selector key=value (the worker pods' labels), e.g. --selector app=sglang",
    );
  }
  for (const req of cfg.selector) {
    if (!/^[A-Za-z0-9][-A-Za-z0-9_./]*=[-A-Za-z0-9_.]*$/.test(req)) {
      throw new RouterConfigError(`--selector: "${req}" is not a label requirement key=value`);
    }
  }
  if (cfg.dpSize !== undefined && !cfg.dpAware)
    throw new RouterConfigError('--dp-size only applies with --dp-aware');
  if (cfg.health.successThreshold < 1 || cfg.health.failureThreshold < 1) {
    throw new RouterConfigError('health thresholds must be >= 1');
  }
  if (!cfg.health.endpoint.startsWith('/'))
    throw new RouterConfigError('--health-check-endpoint must start with /');
  if (cfg.mockBasePort !== undefined && cfg.mockBasePort + cfg.mockWorkers - 1 > 65535) {
    throw new RouterConfigError(
      `--mock-base-port ${cfg.mockBasePort} leaves no room for ${cfg.mockWorkers} mock workers below port 65536`,
    );
  }
  if (cfg.adminPort !== undefined && cfg.adminPort === cfg.port && cfg.port !== 0) {
    throw new RouterConfigError('--admin-port must differ from --port');
  }
  if (cfg.pdDisaggregation && (cfg.recordTrace !== undefined || cfg.shadowProfile !== undefined)) {
    throw new RouterConfigError(
      `${cfg.recordTrace !== undefined ? '--record-trace' : '--shadow-profile'} does not apply to --pd-disaggregation yet: its requests take the prefill/decode path, which the recorder and the live cache model do not follow`,
    );
  }
  if (!(cfg.recordSampleRate > 0 && cfg.recordSampleRate <= 1)) {
    throw new RouterConfigError(
      `--record-sample-rate: must be in (0, 1], got ${cfg.recordSampleRate}`,
    );
  }
  if (cfg.apiKeys.some((k) => k.length < 8)) {
    throw new RouterConfigError('--api-key: keys must be at least 8 characters');
  }
  const zmqEndpoint = /^(tcp|ipc|inproc):\/\/\S+$/;
  for (const [flag, list] of [
    ['--kv-events-endpoints', cfg.kvEventsEndpoints],
    ['--kv-events-replay-endpoints', cfg.kvEventsReplayEndpoints],
    ['--kv-events-endpoint', cfg.kvEventsEndpoint === undefined ? [] : [cfg.kvEventsEndpoint]],
    [
      '--kv-events-replay-endpoint',
      cfg.kvEventsReplayEndpoint === undefined ? [] : [cfg.kvEventsReplayEndpoint],
    ],
  ] as const) {
    for (const ep of list) {
      if (!zmqEndpoint.test(ep)) {
        throw new RouterConfigError(
          `${flag}: "${ep}" is not a ZMQ endpoint (expected tcp://host:port, ipc://path or inproc://name)`,
        );
      }
    }
    if (flag.endsWith('endpoints') && list.length > urls.length) {
      throw new RouterConfigError(
        `${flag}: ${list.length} endpoints for ${urls.length} --worker-urls (one per worker, in order)`,
      );
    }
  }
  if (
    cfg.kvEventsReplayEndpoints.length > 0 &&
    cfg.kvEventsReplayEndpoints.length !== cfg.kvEventsEndpoints.length
  ) {
    throw new RouterConfigError(
      '--kv-events-replay-endpoints: give one per --kv-events-endpoints entry',
    );
  }
  return { ...cfg, workerUrls: urls };
}

/** Inference API keys from --api-key and --api-key-file (one per line, # comments). */
export function loadApiKeys(
  cfg: RouterConfig,
  readFile: (path: string) => string = (p) => readFileSync(p, 'utf8'),
): string[] {
  const keys = [...cfg.apiKeys];
  if (cfg.apiKeyFile) {
    let text: string;
    try {
      text = readFile(cfg.apiKeyFile);
    } catch (err) {
      throw new RouterConfigError(`--api-key-file ${cfg.apiKeyFile}: ${(err as Error).message}`);
    }
    for (const line of text.split(/\r?\n/)) {
      const k = line.trim();
      if (k && !k.startsWith('#')) keys.push(k);
    }
    if (keys.length === cfg.apiKeys.length) {
      throw new RouterConfigError(`--api-key-file ${cfg.apiKeyFile}: no keys in the file`);
    }
  }
  return keys;
}

/** The effective config as logged at start: tokens and keys are never printed. */
export function redactConfig(cfg: RouterConfig): Record<string, unknown> {
  return redactCredentials({
    ...cfg,
    adminToken: cfg.adminToken ? '<set>' : undefined,
    apiKeys: cfg.apiKeys.map(() => '<set>'),
    workerApiKey: cfg.workerApiKey ? '<set>' : undefined,
  });
}

/** How a flag's value is written in --help: its type, or its choices. */
const VALUE_HINT: Record<Kind, string> = {
  string: 'STR',
  int: 'INT',
  number: 'NUM',
  bool: '',
  duration: 'DURATION',
  list: 'A B ...',
  kv: 'KEY=VALUE',
  groups: 'NAME=URL,...',
};

function defaultOf(o: OptionSpec): string | undefined {
  let v: unknown = DEFAULT_CONFIG;
  for (const part of o.key.split('.')) v = (v as Record<string, unknown> | undefined)?.[part];
  if (v === undefined) return undefined;
  if (o.scale !== undefined && typeof v === 'number') v = v / o.scale;
  else if (o.kind === 'duration' && typeof v === 'number') v = `${v}ms`;
  if (Array.isArray(v)) return v.length > 0 ? v.join(' ') : undefined;
  if (typeof v === 'object' && v !== null)
    return Object.keys(v).length > 0 ? JSON.stringify(v) : undefined;
  if (v === '') return undefined;
  return String(v);
}

export function helpText(): string {
  const lines = [
    'Usage: kvroute-router [--config file.yaml] [flags]',
    '',
    'DURATION is a number of ms or with a unit: 500ms, 2s, 1m, 1h. Booleans take no value (or true/false).',
    '',
  ];
  for (const o of OPTIONS) {
    const hint = o.choices ? o.choices.join('|') : VALUE_HINT[o.kind];
    const flag = `--${o.flag}${hint ? ` ${hint}` : ''}`;
    // Some help texts already say their default in their own words.
    const def = /\(default/.test(o.help) ? undefined : defaultOf(o);
    lines.push(
      `  ${flag.padEnd(40)} ${o.help}${def !== undefined ? ` (default ${def})` : ''} [env ${envName(o)}]`,
    );
  }
  lines.push(
    `  ${'--config FILE'.padEnd(40)} YAML file whose keys are these flag names [env KVROUTE_CONFIG]`,
  );
  return lines.join('\n');
}
