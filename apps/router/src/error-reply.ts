// One rendering for every error the router answers with, whether fastify (admin, /v1/models)
// or the proxy path (which answers on the raw response) produced it: protocol and router
// errors as they are, fastify's own 4xx in OpenAI's shape, anything else a logged 500.
import { isProtocolError, openAIErrorBody, payloadTooLarge } from '@kvroute/protocol';
import type { FastifyBaseLogger } from 'fastify';
import { RouterError } from './errors.ts';

export interface ErrorReply {
  status: number;
  body: object;
}

export function errorReply(err: unknown, log: FastifyBaseLogger, maxBodyBytes: number): ErrorReply {
  if (isProtocolError(err)) return { status: err.status, body: err.toJSON() };
  const e = err as { statusCode?: number; code?: string; message: string };
  if (e.statusCode === 413 || e.code === 'FST_ERR_CTP_BODY_TOO_LARGE') {
    return {
      status: 413,
      body: payloadTooLarge(maxBodyBytes, { param: 'body' }).toJSON(),
    };
  }
  if (e.statusCode && e.statusCode >= 400 && e.statusCode < 500) {
    return {
      status: e.statusCode,
      body: openAIErrorBody(e.statusCode, e.message, { code: e.code ?? 'invalid_request' }),
    };
  }
  log.error({ err }, 'unhandled router error');
  return {
    status: 500,
    body: new RouterError('internal_error', `internal router error: ${e.message}`).toJSON(),
  };
}
