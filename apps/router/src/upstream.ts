// Small GET helpers over the router's undici Agent (keep-alive pools per worker origin), for
// health checks, discovery and load polls. Proxying itself lives in proxy/forward.ts.
import { type Agent, request } from 'undici';

export interface GetResult {
  status: number;
  text: string;
}

/** GET with a hard timeout; rejects on connect errors and timeouts, resolves on any status. */
export async function getText(agent: Agent, url: string, timeoutMs: number): Promise<GetResult> {
  const res = await request(url, {
    method: 'GET',
    dispatcher: agent,
    signal: AbortSignal.timeout(timeoutMs),
    headersTimeout: timeoutMs,
    bodyTimeout: timeoutMs,
  });
  const text = await res.body.text();
  return { status: res.statusCode, text };
}

export async function getJson(agent: Agent, url: string, timeoutMs: number): Promise<unknown> {
  const { status, text } = await getText(agent, url, timeoutMs);
  if (status !== 200) throw new Error(`GET ${url} answered ${status}: ${text.slice(0, 200)}`);
  try {
    return JSON.parse(text);
  } catch {
    throw new Error(`GET ${url} did not answer JSON: ${text.slice(0, 200)}`);
  }
}

/** The error's code, or its cause's (undici nests the system error, e.g. ECONNREFUSED). */
export function errorCode(err: unknown): string | undefined {
  const e = err as { code?: string; cause?: { code?: string } | null } | null | undefined;
  return e?.code ?? e?.cause?.code;
}

/** Short, log-friendly description of a network error, with its code. */
export function describeError(err: unknown): string {
  if (!(err instanceof Error)) return String(err);
  const code = errorCode(err);
  const msg = err.name === 'TimeoutError' ? 'timed out' : err.message;
  return code && !msg.includes(code) ? `${msg} (${code})` : msg;
}
