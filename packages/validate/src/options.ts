// Command-line options of `kvroute-sim validate`, parsed into a plain object so the command
// and its tests share one definition.
import {
  type OptionSpec,
  parseAssignments,
  parseCommandArgs,
  parseSeed,
  positiveInt,
  positiveNumber,
  str,
  strs,
  UsageError,
} from '@kvroute/sim/cli';
import type { ApiKind } from './types.ts';

export const VALIDATE_USAGE = `kvroute-sim validate --target URL (--scenario NAME | --replay FILE) [options]

Sends a scenario's exact request sequence to a live SGLang/vLLM/kvroute endpoint, then
simulates the same requests with the target's routing policy and prints predicted vs
observed: hit rate, TTFT p50/p90/p99, throughput, errors, with the error of each.

  --target URL              endpoint base URL (router, worker, or anything compatible)
  --scenario NAME           workload scenario (see \`kvroute-sim scenarios\`)
  --set KEY=VALUE           scenario option, repeatable (numbers and true/false parsed)
  --seed S                  workload seed (default 1)
  --requests N              send only the first N requests (closed loop: by each client's summed
                            think times, so early sessions keep their later turns)
  --concurrency C           closed loop: use the first C clients; open loop: at most C in flight
  --policy METHOD           the policy the target routes with (default: --policy-label if it
                            names a method, else the load_balance_method the target reports
                            in /get_server_info, else prefix_match)
  --policy-label L          name shown for the prediction column
  --window W                prefix window (prefix_match and window-hashing methods)
  --prefix-length L         prefix length
  --affinity routing_key    model the router's routing-key affinity
  --policy-set KEY=VALUE    any other dispatcher option, repeatable
  --profile P               cost profile of the target's hardware (see \`kvroute-sim profiles\`;
                            default as for \`run\`: seed-qwen3-moe-dp16 for seed-* scenarios,
                            else h200-llama-3.1-8b)
  --profile-file F          cost profile JSON (e.g. written by the gpu-worker's --calibrate)
  --ranks N                 ranks behind the target (default: dp_size from /get_server_info,
                            else the scenario's)
  --kv-capacity N           KV tokens per rank (default: the target's max_total_num_tokens, else
                            the profile's)
  --page-size N             radix page size (default: the target's page_size, else 1)
  --chunked-prefill-size N  (default: the target's chunked_prefill_size, else the profile's)
  --api generate|completions|chat   request shape (default generate: SGLang /generate with
                            input_ids; completions: /v1/completions with a token-id prompt;
                            chat: /v1/chat/completions, ids as text the routing tokenizer reads back)
  --model M                 model name for the OpenAI APIs (default: first of /v1/models)
  --header 'K: V'           extra request header, repeatable (e.g. authorization)
  --time-scale X            wall ms per plan ms, as the mock worker's --time-scale (default: the
                            time_scale the target reports, else 1)
  --timeout-ms N            per-request limit (default 600000)
  --json FILE               write the report as JSON ('-' for stdout: nothing else goes there)
  --html FILE               write a self-contained HTML report
  --record FILE             write the sent requests and what each did (JSONL) as they finish
  --replay FILE             send the requests of a recording instead of a scenario`;

export interface ValidateOptions {
  target: string;
  scenario?: string;
  replay?: string;
  record?: string;
  scenarioOptions: Record<string, unknown>;
  seed: string | number;
  requests?: number;
  concurrency?: number;
  policy: Record<string, unknown> & { method: string };
  /** Label given with --policy-label; otherwise the label is derived from the final policy. */
  policyLabel?: string;
  /** False when neither --policy nor a method-named --policy-label chose the method. */
  policyChosen: boolean;
  profile?: string;
  profileFile?: string;
  ranks?: number;
  kvCapacityTokens?: number;
  pageSize?: number;
  chunkedPrefillSize?: number;
  api: ApiKind;
  /** False when --api was not given (a --replay then reuses the recorded request shape). */
  apiChosen: boolean;
  model?: string;
  headers: Record<string, string>;
  timeScale: number;
  timeScaleChosen: boolean;
  timeoutMs: number;
  json?: string;
  html?: string;
}

const CMD = 'validate';

const OPTIONS: OptionSpec = {
  target: { type: 'string' },
  scenario: { type: 'string' },
  set: { type: 'string', multiple: true },
  seed: { type: 'string' },
  requests: { type: 'string' },
  concurrency: { type: 'string' },
  policy: { type: 'string' },
  'policy-label': { type: 'string' },
  window: { type: 'string' },
  'prefix-length': { type: 'string' },
  affinity: { type: 'string' },
  'policy-set': { type: 'string', multiple: true },
  profile: { type: 'string' },
  'profile-file': { type: 'string' },
  ranks: { type: 'string' },
  'kv-capacity': { type: 'string' },
  'page-size': { type: 'string' },
  'chunked-prefill-size': { type: 'string' },
  api: { type: 'string' },
  model: { type: 'string' },
  header: { type: 'string', multiple: true },
  'time-scale': { type: 'string' },
  'timeout-ms': { type: 'string' },
  json: { type: 'string' },
  html: { type: 'string' },
  record: { type: 'string' },
  replay: { type: 'string' },
};

export const API_KINDS: readonly ApiKind[] = ['generate', 'completions', 'chat'];

function usage(message: string): UsageError {
  return new UsageError(message, CMD);
}

/** `methods` (the policy registry's names) lets `--policy-label round_robin` imply the method. */
export function parseValidateArgs(
  argv: readonly string[],
  methods: readonly string[] = [],
): ValidateOptions {
  const p = parseCommandArgs(CMD, argv, OPTIONS);
  if (p.positionals.length > 0) throw usage(`unexpected argument '${p.positionals[0]}'`);
  const int = (flag: string) => {
    const v = str(p, flag);
    return v === undefined ? undefined : positiveInt(flag, v);
  };
  const target = str(p, 'target');
  const scenario = str(p, 'scenario');
  const replay = str(p, 'replay');
  const profile = str(p, 'profile');
  const profileFile = str(p, 'profile-file');
  if (!target) throw usage('--target URL is required (the endpoint to validate against)');
  if (!scenario && !replay) throw usage('one of --scenario NAME or --replay FILE is required');
  if (scenario && replay) {
    throw usage('--scenario and --replay exclude each other (a recording fixes the requests)');
  }
  if (profile && profileFile) throw usage('--profile and --profile-file exclude each other');
  const apiRaw = str(p, 'api') ?? 'generate';
  if (!(API_KINDS as readonly string[]).includes(apiRaw)) {
    throw usage(`--api must be one of ${API_KINDS.join(', ')}, got '${apiRaw}'`);
  }
  const api = apiRaw as ApiKind;

  const label = str(p, 'policy-label');
  const labelIsMethod = label !== undefined && methods.includes(label);
  const method = str(p, 'policy') ?? (labelIsMethod ? label : 'prefix_match');
  const policy: Record<string, unknown> & { method: string } = { method };
  const window = int('window');
  if (window !== undefined) policy.window = window;
  const prefixLength = int('prefix-length');
  if (prefixLength !== undefined) policy.prefixLength = prefixLength;
  const affinity = str(p, 'affinity');
  if (affinity !== undefined) {
    if (affinity !== 'routing_key')
      throw usage(`--affinity supports only routing_key, got '${affinity}'`);
    policy.affinity = { kind: 'routing_key' };
  }
  Object.assign(policy, parseAssignments('policy-set', strs(p, 'policy-set')));
  policy.method = method;

  const headers: Record<string, string> = {};
  for (const h of strs(p, 'header')) {
    const colon = h.indexOf(':');
    if (colon <= 0) throw usage(`--header expects 'Name: value', got '${h}'`);
    headers[h.slice(0, colon).trim().toLowerCase()] = h.slice(colon + 1).trim();
  }
  const timeScale = str(p, 'time-scale');
  const timeoutMs = str(p, 'timeout-ms');

  const opts: ValidateOptions = {
    target,
    scenarioOptions: parseAssignments('set', strs(p, 'set')),
    seed: parseSeed(str(p, 'seed'), 1),
    policy,
    policyChosen: str(p, 'policy') !== undefined || labelIsMethod,
    api,
    apiChosen: str(p, 'api') !== undefined,
    headers,
    timeScale: timeScale === undefined ? 1 : positiveNumber('time-scale', timeScale),
    timeScaleChosen: timeScale !== undefined,
    timeoutMs: timeoutMs === undefined ? 600_000 : positiveNumber('timeout-ms', timeoutMs),
  };
  const assign = <K extends keyof ValidateOptions>(k: K, v: ValidateOptions[K] | undefined) => {
    if (v !== undefined) opts[k] = v;
  };
  assign('scenario', scenario);
  assign('replay', replay);
  assign('record', str(p, 'record'));
  assign('requests', int('requests'));
  assign('concurrency', int('concurrency'));
  assign('profile', profile);
  assign('profileFile', profileFile);
  assign('ranks', int('ranks'));
  assign('kvCapacityTokens', int('kv-capacity'));
  assign('pageSize', int('page-size'));
  assign('chunkedPrefillSize', int('chunked-prefill-size'));
  assign('model', str(p, 'model'));
  assign('policyLabel', label);
  assign('json', str(p, 'json'));
  assign('html', str(p, 'html'));
  return opts;
}

export function describePolicy(policy: Record<string, unknown>): string {
  const parts: string[] = [];
  for (const [k, v] of Object.entries(policy)) {
    if (k === 'method') continue;
    parts.push(`${k}=${typeof v === 'object' ? JSON.stringify(v) : String(v)}`);
  }
  return parts.length ? `${String(policy.method)} (${parts.join(', ')})` : String(policy.method);
}
