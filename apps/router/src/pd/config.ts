// Prefill/decode disaggregation options, named as SGLang's router names them:
//   --pd-disaggregation --prefill URL [BOOTSTRAP_PORT] ... --decode URL ...
//   --prefill-policy NAME --decode-policy NAME
// plus kvroute's --pd-style sglang|vllm (how a pair is driven) and --pd-rank-discovery
// told|bootstrap (how a DP decode server learns the prefill DP rank). YAML: the same keys
// (`prefill: ["http://p1:30000 8998", "http://p2:30000"]`, `decode: [...]`).
import { createDispatcher } from '@kvroute/policy';
import { RouterConfigError } from '../errors.ts';

export interface PrefillSpec {
  url: string;
  /** The prefill server's --disaggregation-bootstrap-port; undefined = ask its /get_server_info. */
  bootstrapPort?: number;
}

export type PdStyle = 'sglang' | 'vllm';
export type PdRankDiscovery = 'told' | 'bootstrap';

/** Decode is picked by load: its KV arrives with the request, so no cache can favour a rank. */
export const DECODE_LOAD_METHODS = ['round_robin', 'total_requests', 'total_tokens'] as const;

/** The router config's prefill/decode settings (its flags, env and YAML keys). */
export interface PdSettings {
  /** Prefill/decode disaggregation: the prefill servers are the config's workerUrls then. */
  pdDisaggregation: boolean;
  /** As given: URLs, each optionally followed by its bootstrap port (SGLang's nargs). */
  prefill: string[];
  decode: string[];
  prefillPolicy?: string;
  decodePolicy?: string;
  pdStyle: PdStyle;
  pdRankDiscovery: PdRankDiscovery;
  /** Filled by validation: the prefill servers with their bootstrap ports. */
  prefillWorkers?: PrefillSpec[];
}

/** What validation reads: the PD settings and the router settings they must agree with. */
export interface PdConfigFields extends PdSettings {
  dpAware: boolean;
  loadBalanceMethod: string;
  workerUrls: string[];
  mockWorkers: number;
  modelGroups: readonly unknown[];
}

function checkUrl(flag: string, u: string): string {
  let parsed: URL;
  try {
    parsed = new URL(u);
  } catch {
    throw new RouterConfigError(`${flag}: "${u}" is not a URL (expected http://host:port)`);
  }
  if (parsed.protocol !== 'http:' && parsed.protocol !== 'https:') {
    throw new RouterConfigError(`${flag}: "${u}" must be http:// or https://`);
  }
  return u.replace(/\/+$/, '');
}

/** `--prefill A 8998 --prefill B` arrives flattened ([A, 8998, B]): a port follows its URL. */
export function parsePrefillList(items: readonly string[]): PrefillSpec[] {
  const out: PrefillSpec[] = [];
  const ported = new Set<PrefillSpec>();
  for (const item of items.flatMap((s) => s.split(/\s+/)).filter((s) => s.length > 0)) {
    if (/^\d+$/.test(item) || item.toLowerCase() === 'none') {
      const last = out[out.length - 1];
      if (!last) {
        throw new RouterConfigError(`--prefill: bootstrap port "${item}" comes before any URL`);
      }
      if (ported.has(last)) {
        throw new RouterConfigError(
          `--prefill: "${last.url}" has two bootstrap ports (give --prefill URL [BOOTSTRAP_PORT])`,
        );
      }
      if (item.toLowerCase() !== 'none') {
        const port = Number(item);
        if (port < 1 || port > 65535) {
          throw new RouterConfigError(
            `--prefill: bootstrap port ${item} of "${last.url}" is not in 1..65535`,
          );
        }
        last.bootstrapPort = port;
      }
      ported.add(last);
      continue;
    }
    out.push({ url: checkUrl('--prefill', item) });
  }
  return out;
}

/** Checks the PD options; the prefill servers become the router's main workers. */
export function validatePdConfig<T extends PdConfigFields>(cfg: T): T {
  const pdGiven = cfg.prefill.length > 0 || cfg.decode.length > 0;
  if (!cfg.pdDisaggregation) {
    if (pdGiven || cfg.prefillPolicy !== undefined || cfg.decodePolicy !== undefined) {
      throw new RouterConfigError(
        '--prefill, --decode, --prefill-policy and --decode-policy need --pd-disaggregation',
      );
    }
    return cfg;
  }
  if (cfg.modelGroups.length > 0) {
    throw new RouterConfigError(
      '--pd-disaggregation serves one model: it does not combine with model groups (models: / --model-group)',
    );
  }
  if (cfg.workerUrls.length > 0 || cfg.mockWorkers > 0) {
    throw new RouterConfigError(
      '--pd-disaggregation takes its workers from --prefill and --decode, not --worker-urls or --mock-workers',
    );
  }
  const prefillWorkers = parsePrefillList(cfg.prefill);
  if (prefillWorkers.length === 0 || cfg.decode.length === 0) {
    throw new RouterConfigError(
      '--pd-disaggregation needs at least one --prefill URL [BOOTSTRAP_PORT] and one --decode URL',
    );
  }
  const decode = cfg.decode
    .flatMap((s) => s.split(/\s+/))
    .filter((s) => s)
    .map((u) => checkUrl('--decode', u));
  const all = [...prefillWorkers.map((p) => p.url), ...decode];
  if (new Set(all).size !== all.length) {
    throw new RouterConfigError(
      '--prefill/--decode: a URL is listed twice (a server has one role)',
    );
  }
  const prefillPolicy = cfg.prefillPolicy ?? cfg.loadBalanceMethod;
  try {
    createDispatcher({ method: prefillPolicy });
  } catch (err) {
    throw new RouterConfigError(`--prefill-policy: ${(err as Error).message}`);
  }
  const decodePolicy = cfg.decodePolicy ?? 'total_tokens';
  if (!(DECODE_LOAD_METHODS as readonly string[]).includes(decodePolicy)) {
    throw new RouterConfigError(
      `--decode-policy: must be a load method (${DECODE_LOAD_METHODS.join(', ')}), got "${decodePolicy}": a decode server receives the whole KV, so no rank holds a cache worth following`,
    );
  }
  return {
    ...cfg,
    prefillWorkers,
    decode,
    prefillPolicy,
    decodePolicy,
    // The prefill servers are the router's main rank table: the cache-aware side.
    workerUrls: prefillWorkers.map((p) => p.url),
    loadBalanceMethod: prefillPolicy,
  };
}
