// Field checks shared by the request parsers: every field a parser reads is checked, and a
// wrong one gets a 400 naming it (OpenAI's `param`).
import { badRequest } from './errors.ts';
import type { ParsedRequest } from './request.ts';

export function requireObjectBody(value: unknown): Record<string, unknown> {
  if (!isPlainObject(value)) {
    throw badRequest(`Request body must be a JSON object, got ${describe(value)}`, {
      code: 'invalid_body',
    });
  }
  return value;
}

export function tokenIds(param: string, value: unknown): number[] {
  if (!Array.isArray(value)) throw wrongType(param, 'an array of token ids', value);
  for (let i = 0; i < value.length; i++) {
    const v = value[i];
    if (typeof v !== 'number' || !Number.isInteger(v) || v < 0 || v > 0xffffffff) {
      throw badRequest(
        `'${param}[${i}]' must be an integer token id in [0, 4294967295], got ${describe(v)}`,
        { param: `${param}[${i}]`, code: 'invalid_type' },
      );
    }
  }
  return value as number[];
}

export function optionalInt(
  obj: Record<string, unknown>,
  key: string,
  min: number,
  param = key,
): number | undefined {
  const v = obj[key];
  if (v === undefined || v === null) return undefined;
  if (typeof v !== 'number' || !Number.isInteger(v)) throw wrongType(param, 'an integer', v);
  if (v < min) {
    throw badRequest(`'${param}' must be at least ${min}, got ${v}`, {
      param,
      code: 'invalid_value',
    });
  }
  return v;
}

export function optionalNumber(
  obj: Record<string, unknown>,
  key: string,
  param = key,
): number | undefined {
  const v = obj[key];
  if (v === undefined || v === null) return undefined;
  if (typeof v !== 'number' || !Number.isFinite(v)) throw wrongType(param, 'a number', v);
  return v;
}

export function missing(param: string) {
  return badRequest(`Missing required parameter: '${param}'`, {
    param,
    code: 'missing_required_parameter',
  });
}

export function wrongType(param: string, expected: string, got: unknown) {
  return badRequest(`'${param}' must be ${expected}, got ${describe(got)}`, {
    param,
    code: 'invalid_type',
  });
}

export function describe(v: unknown): string {
  if (v === null) return 'null';
  if (Array.isArray(v)) return 'an array';
  if (typeof v === 'string')
    return `a string (${JSON.stringify(v.length > 40 ? `${v.slice(0, 40)}...` : v)})`;
  if (typeof v === 'object') return 'an object';
  return `${typeof v} ${String(v)}`;
}

export function isPlainObject(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

export type Common = Omit<ParsedRequest, 'kind' | 'prompt' | 'maxTokens'>;

export function common(body: Record<string, unknown>): Common {
  const out: Common = { stream: false, includeUsage: false, body };
  if (body.stream !== undefined && body.stream !== null) {
    if (typeof body.stream !== 'boolean') throw wrongType('stream', 'a boolean', body.stream);
    out.stream = body.stream;
  }
  const so = body.stream_options;
  if (so !== undefined && so !== null) {
    if (!isPlainObject(so)) throw wrongType('stream_options', 'an object', so);
    if (so.include_usage !== undefined && so.include_usage !== null) {
      if (typeof so.include_usage !== 'boolean') {
        throw wrongType('stream_options.include_usage', 'a boolean', so.include_usage);
      }
      out.includeUsage = so.include_usage;
    }
  }
  if (body.model !== undefined && body.model !== null) {
    if (typeof body.model !== 'string') throw wrongType('model', 'a string', body.model);
    out.model = body.model;
  }
  const temperature = optionalNumber(body, 'temperature');
  if (temperature !== undefined) out.temperature = temperature;
  if (body.routing_key !== undefined && body.routing_key !== null) {
    if (typeof body.routing_key !== 'string') {
      throw wrongType('routing_key', 'a string', body.routing_key);
    }
    out.routingKey = body.routing_key;
  }
  const routedRank = optionalInt(body, 'routed_dp_rank', 0);
  if (routedRank !== undefined) out.routedRank = routedRank;
  const room = optionalInt(body, 'bootstrap_room', 0);
  if (room !== undefined) out.bootstrapRoom = room;
  return out;
}
