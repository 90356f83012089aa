// Every error the router answers with, in one place, so a status or code is found by name and
// never invented at a call site. RouterError is a @kvroute/protocol ProtocolError, so parse
// errors (400s from the protocol package) and the router's own render through one path, in
// OpenAI's shape {"error": {"message", "type", "param", "code"}}.
import { ProtocolError } from '@kvroute/protocol';

const STATUS = {
  /** X-Data-Parallel-Rank / routed_dp_rank without --allow-rank-override. */
  rank_override_forbidden: 403,
  /** An explicit rank outside 0..n-1 or a removed one. */
  invalid_rank: 400,
  /** Admin route without an Authorization header. */
  unauthorized: 401,
  /** Admin route with the wrong bearer token. */
  invalid_token: 403,
  /** POST /ranks with a body we cannot act on. */
  invalid_admin_request: 400,
  payload_too_large: 413,
  unknown_url: 404,
  /** A `model` no worker group serves (a router with groups keyed by model). */
  model_not_found: 404,
  /** POST /policy (or a SIGHUP reload) with a method or options the policy refuses. */
  invalid_policy: 400,
  /** Every rank is down (or removed): nothing to try. */
  no_healthy_rank: 503,
  /** The chosen worker could not be reached and no other rank was left to retry on. */
  upstream_unavailable: 502,
  /** The per-request timeout (--request-timeout-ms), or first-byte/idle timeouts on every rank tried. */
  upstream_timeout: 504,
  /** The worker answered garbage, or failed mid-way, and no retry was left. */
  upstream_error: 502,
  /** Inference without an API key when --api-key is set. */
  missing_api_key: 401,
  /** Inference with a key that is not one of --api-key. */
  invalid_api_key: 401,
  /** The client's token bucket is empty (--rate-limit-rps). */
  rate_limited: 429,
  /** Queue full, queue wait too long, or the body memory budget spent. */
  overloaded: 503,
  /** The request body did not arrive within --body-timeout-ms. */
  request_timeout: 408,
  internal_error: 500,
} as const;

export type RouterErrorCode = keyof typeof STATUS;

/** Where OpenAI's `type` differs from the one its status implies: its unknown-model 404. */
const TYPE: Partial<Record<RouterErrorCode, string>> = {
  model_not_found: 'invalid_request_error',
};

export class RouterError extends ProtocolError {
  override readonly code: RouterErrorCode;
  /** Seconds for a Retry-After header (429, 503). */
  retryAfterSec: number | undefined;
  constructor(code: RouterErrorCode, message: string, param: string | null = null) {
    const type = TYPE[code];
    super(STATUS[code], message, type ? { code, param, type } : { code, param });
    this.name = 'RouterError';
    this.code = code;
  }

  withRetryAfter(seconds: number): this {
    this.retryAfterSec = seconds;
    return this;
  }
}

/** Thrown while reading flags, env or YAML; the message names the option that is wrong. */
export class RouterConfigError extends Error {
  readonly code = 'ROUTER_CONFIG';
  constructor(message: string) {
    super(`kvroute-router: ${message}`);
    this.name = 'RouterConfigError';
  }
}
