// Routing hints carried in HTTP headers. Header names follow SGLang's router
// (`X-Data-Parallel-Rank`, `x-smg-routing-key`) so clients written for it work unchanged.
import { badRequest } from './errors.ts';
import type { ParsedRequest } from './request.ts';

/** Node's `IncomingHttpHeaders` (lower-cased keys) or a fetch/undici `Headers`. */
export type HeaderSource =
  | Readonly<Record<string, string | string[] | undefined>>
  | { get(name: string): string | null };

export const ROUTING_KEY_HEADERS = ['x-routing-key', 'x-smg-routing-key'] as const;
export const RANK_HEADER = 'x-data-parallel-rank';

function header(headers: HeaderSource, name: string): string | undefined {
  if (typeof (headers as { get?: unknown }).get === 'function') {
    return (headers as { get(name: string): string | null }).get(name) ?? undefined;
  }
  const v = (headers as Readonly<Record<string, string | string[] | undefined>>)[name];
  return Array.isArray(v) ? v[0] : v;
}

/** `X-Routing-Key`, else `x-smg-routing-key`; empty values count as absent. */
export function routingKeyFromHeaders(headers: HeaderSource): string | undefined {
  for (const name of ROUTING_KEY_HEADERS) {
    const v = header(headers, name)?.trim();
    if (v) return v;
  }
  return undefined;
}

/** `X-Data-Parallel-Rank` as a non-negative integer; 400 naming the header if malformed. */
export function routedRankFromHeaders(headers: HeaderSource): number | undefined {
  const raw = header(headers, RANK_HEADER)?.trim();
  if (raw === undefined || raw === '') return undefined;
  if (!/^\d+$/.test(raw) || !Number.isSafeInteger(Number(raw))) {
    throw badRequest(`Header 'X-Data-Parallel-Rank' must be a non-negative integer, got "${raw}"`, {
      param: 'X-Data-Parallel-Rank',
      code: 'invalid_value',
    });
  }
  return Number(raw);
}

/** The header or body field a routed rank came from, as error messages and `param` name it. */
export function routedRankParam(source: 'header' | 'body' | undefined): string {
  return source === 'header' ? 'X-Data-Parallel-Rank' : 'routed_dp_rank';
}

export interface RoutingHints {
  routingKey?: string;
  routedRank?: number;
  /** Where the routed rank came from, for error messages (403 / out of range). */
  routedRankSource?: 'header' | 'body';
  bootstrapRoom?: number;
}

/**
 * Header and body hints combined. Headers win over body fields: a proxy or gateway in front
 * of the client sets headers, and it knows better than the body the client wrote.
 */
export function routingHints(
  parsed: Pick<ParsedRequest, 'routingKey' | 'routedRank' | 'bootstrapRoom'>,
  headers: HeaderSource,
): RoutingHints {
  const out: RoutingHints = {};
  const key = routingKeyFromHeaders(headers) ?? parsed.routingKey;
  if (key !== undefined) out.routingKey = key;
  const headerRank = routedRankFromHeaders(headers);
  if (headerRank !== undefined) {
    out.routedRank = headerRank;
    out.routedRankSource = 'header';
  } else if (parsed.routedRank !== undefined) {
    out.routedRank = parsed.routedRank;
    out.routedRankSource = 'body';
  }
  if (parsed.bootstrapRoom !== undefined) out.bootstrapRoom = parsed.bootstrapRoom;
  return out;
}
