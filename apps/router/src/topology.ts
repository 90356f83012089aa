// Turns --worker-urls (+ --dp-aware, --dp-size) into rank-table entries. With --dp-aware each
// URL is one SGLang server running DP attention: its dp_size comes from --dp-size or from the
// server's own /get_server_info, and each of its DP ranks becomes one router rank.

import { describeError, getJson, getText } from '@kvroute/protocol';
import type { Agent } from 'undici';
import type { RankTable, Worker } from './rank-table.ts';

export async function fetchDpSize(agent: Agent, url: string, timeoutMs: number): Promise<number> {
  let info: unknown;
  try {
    info = await getJson(agent, `${url}/get_server_info`, timeoutMs);
  } catch (err) {
    throw new Error(
      `--dp-aware: cannot read dp_size from ${url}/get_server_info (${describeError(err)}); start the worker first or pass --dp-size N`,
    );
  }
  const dp = (info as { dp_size?: unknown } | null)?.dp_size;
  if (typeof dp !== 'number' || !Number.isInteger(dp) || dp < 1) {
    throw new Error(
      `--dp-aware: ${url}/get_server_info has no usable dp_size (got ${JSON.stringify(dp)}); pass --dp-size N`,
    );
  }
  return dp;
}

export interface AddWorkerOptions {
  dpAware: boolean;
  /** Known dp_size (flag or admin body); undefined = ask the worker. */
  dpSize?: number;
  timeoutMs: number;
}

export async function addWorker(
  table: RankTable,
  agent: Agent,
  url: string,
  opts: AddWorkerOptions,
): Promise<Worker> {
  const dpSize = opts.dpAware
    ? (opts.dpSize ?? (await fetchDpSize(agent, url, opts.timeoutMs)))
    : 1;
  return table.addWorker(url, dpSize, opts.dpAware);
}

/**
 * The model's context length as the worker reports it: vLLM's and SGLang's /v1/models
 * (`max_model_len`), else SGLang's /get_model_info or /get_server_info (`context_length`).
 * Undefined when none says (then --max-model-len or the default bound applies).
 */
export async function fetchContextLength(
  agent: Agent,
  url: string,
  timeoutMs: number,
  headers?: Record<string, string>,
): Promise<number | undefined> {
  const usable = (v: unknown): number | undefined =>
    typeof v === 'number' && Number.isSafeInteger(v) && v > 0 ? v : undefined;
  const tries: [string, (j: Record<string, unknown>) => unknown][] = [
    ['/v1/models', (j) => (j.data as Record<string, unknown>[] | undefined)?.[0]?.max_model_len],
    ['/get_model_info', (j) => j.context_length ?? j.max_context_length],
    ['/get_server_info', (j) => j.context_length],
  ];
  for (const [path, pick] of tries) {
    try {
      const { status, text } = await getText(agent, url + path, timeoutMs, headers);
      if (status !== 200) continue;
      const found = usable(pick(JSON.parse(text) as Record<string, unknown>));
      if (found !== undefined) return found;
    } catch {
      // Not this endpoint: try the next one.
    }
  }
  return undefined;
}

/**
 * The model id the worker serves: vLLM's and SGLang's /v1/models (`data[0].id`), else SGLang's
 * /get_model_info (`model_path`). Undefined when neither says.
 */
export async function fetchModelId(
  agent: Agent,
  url: string,
  timeoutMs: number,
  headers?: Record<string, string>,
): Promise<string | undefined> {
  const tries: [string, (j: Record<string, unknown>) => unknown][] = [
    ['/v1/models', (j) => (j.data as Record<string, unknown>[] | undefined)?.[0]?.id],
    ['/get_model_info', (j) => j.model_path],
  ];
  for (const [path, pick] of tries) {
    try {
      const { status, text } = await getText(agent, url + path, timeoutMs, headers);
      if (status !== 200) continue;
      const found = pick(JSON.parse(text) as Record<string, unknown>);
      if (typeof found === 'string' && found.length > 0) return found;
    } catch {
      // Not this endpoint: try the next one.
    }
  }
  return undefined;
}
