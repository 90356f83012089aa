// One error module for the router and the workers, so every 4xx/5xx a client sees
// has OpenAI's shape: {"error": {"message", "type", "param", "code"}}. OpenAI SDKs
// read `error.message` and `error.code`; SGLang clients mostly print the body.

/** OpenAI's error body. */
export interface OpenAIErrorBody {
  error: {
    message: string;
    type: string;
    param: string | null;
    code: string | null;
  };
}

export interface ErrorOptions {
  /** The request field (or header) that is wrong, as the client spelled it. */
  param?: string | null;
  /** Machine-readable code, e.g. `invalid_type`, `context_length_exceeded`. */
  code?: string | null;
  /** Overrides the type derived from the status. */
  type?: string;
}

/** OpenAI's error `type` for an HTTP status. */
export function errorTypeForStatus(status: number): string {
  if (status === 401) return 'authentication_error';
  if (status === 403) return 'permission_error';
  if (status === 404) return 'not_found_error';
  if (status === 429) return 'rate_limit_error';
  if (status >= 500) return 'server_error';
  return 'invalid_request_error';
}

/** Builds the body for any status; `ProtocolError` and the helpers below use it. */
export function openAIErrorBody(
  status: number,
  message: string,
  opts: ErrorOptions = {},
): OpenAIErrorBody {
  return {
    error: {
      message,
      type: opts.type ?? errorTypeForStatus(status),
      param: opts.param ?? null,
      code: opts.code ?? null,
    },
  };
}

/**
 * An error that knows its HTTP status and OpenAI body. Parsing throws it with status
 * 400; hosts throw it for their own statuses (403, 404, 413, 503, 504) through the
 * helpers below and render it with `toJSON()`.
 */
export class ProtocolError extends Error {
  readonly status: number;
  readonly type: string;
  readonly param: string | null;
  readonly code: string | null;

  constructor(status: number, message: string, opts: ErrorOptions = {}) {
    super(message);
    this.name = 'ProtocolError';
    this.status = status;
    this.type = opts.type ?? errorTypeForStatus(status);
    this.param = opts.param ?? null;
    this.code = opts.code ?? null;
  }

  toJSON(): OpenAIErrorBody {
    return openAIErrorBody(this.status, this.message, {
      type: this.type,
      param: this.param,
      code: this.code,
    });
  }
}

export function isProtocolError(err: unknown): err is ProtocolError {
  return err instanceof ProtocolError;
}

export const badRequest = (message: string, opts: ErrorOptions = {}) =>
  new ProtocolError(400, message, opts);

export const forbidden = (message: string, opts: ErrorOptions = {}) =>
  new ProtocolError(403, message, { code: 'forbidden', ...opts });

export const notFound = (message: string, opts: ErrorOptions = {}) =>
  new ProtocolError(404, message, { code: 'not_found', ...opts });

/** Unknown route, worded like OpenAI's own 404. */
export const routeNotFound = (method: string, url: string) =>
  new ProtocolError(404, `Invalid URL (${method} ${url})`, {
    type: 'invalid_request_error',
    code: 'unknown_url',
  });

export const payloadTooLarge = (limitBytes: number, opts: ErrorOptions = {}) =>
  new ProtocolError(413, `Request body is larger than the limit of ${limitBytes} bytes`, {
    code: 'payload_too_large',
    ...opts,
  });

export const contextLengthExceeded = (
  promptTokens: number,
  maxContext: number,
  param = 'messages',
) =>
  new ProtocolError(
    400,
    `This model's maximum context length is ${maxContext} tokens, but the request has ${promptTokens} prompt tokens`,
    { param, code: 'context_length_exceeded' },
  );

export const internalError = (message: string, opts: ErrorOptions = {}) =>
  new ProtocolError(500, message, { code: 'internal_error', ...opts });

export const badGateway = (message: string, opts: ErrorOptions = {}) =>
  new ProtocolError(502, message, { code: 'bad_gateway', ...opts });

export const serviceUnavailable = (message: string, opts: ErrorOptions = {}) =>
  new ProtocolError(503, message, { code: 'service_unavailable', ...opts });

export const gatewayTimeout = (message: string, opts: ErrorOptions = {}) =>
  new ProtocolError(504, message, { code: 'upstream_timeout', ...opts });

/** An unknown model, in OpenAI's words and shape (a 404 with code model_not_found). */
export const modelNotFound = (model: string) =>
  new ProtocolError(404, `The model \`${model}\` does not exist or you do not have access to it.`, {
    type: 'invalid_request_error',
    param: 'model',
    code: 'model_not_found',
  });
