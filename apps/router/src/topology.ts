// Turns --worker-urls (+ --dp-aware, --dp-size) into rank-table entries. With --dp-aware each
// URL is one SGLang server running DP attention: its dp_size comes from --dp-size or from the
// server's own /get_server_info, and each of its DP ranks becomes one router rank.

import { describeError, getJson } from '@kvroute/protocol';
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
