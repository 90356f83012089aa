// What every route of the worker shares: bodies read as text whatever their content type (so
// bad JSON gets the protocol's 400, not fastify's), and one rendering of every error and of
// unknown routes in OpenAI's shape.
import { isUtf8 } from 'node:buffer';
import {
  badRequest,
  internalError,
  isProtocolError,
  ProtocolError,
  routeNotFound,
} from '@kvroute/protocol';
import type { FastifyInstance } from 'fastify';

/** Workers accept bigger bodies than the router's 32 MiB default, so the router's 413 is the one seen. */
export const BODY_LIMIT = 64 * 1024 * 1024;

export function installHttpBasics(app: FastifyInstance): void {
  app.removeAllContentTypeParsers();
  // As buffers, so that bytes that are not UTF-8 get JSON's 400 rather than being replaced.
  app.addContentTypeParser('*', { parseAs: 'buffer' }, (_req, body, done) => {
    const bytes = body as Buffer;
    if (!isUtf8(bytes)) {
      done(
        badRequest('Request body is not valid UTF-8 (JSON text must be)', { code: 'invalid_json' }),
      );
      return;
    }
    done(null, bytes.toString('utf8'));
  });

  app.setNotFoundHandler((req, reply) => {
    const err = routeNotFound(req.method, req.url);
    reply.code(err.status).send(err.toJSON());
  });
  app.setErrorHandler((error, req, reply) => {
    let err: ProtocolError;
    if (isProtocolError(error)) err = error;
    else {
      const e = error as { statusCode?: number; code?: string; message?: string };
      const status = e.statusCode && e.statusCode >= 400 && e.statusCode < 600 ? e.statusCode : 500;
      err =
        status === 413
          ? new ProtocolError(413, `Request body is larger than the limit of ${BODY_LIMIT} bytes`, {
              code: 'payload_too_large',
            })
          : status < 500
            ? new ProtocolError(status, e.message ?? 'bad request', { code: e.code ?? null })
            : internalError(`mock worker error: ${e.message ?? String(error)}`);
      if (status >= 500) req.log.error(error);
    }
    reply.code(err.status).send(err.toJSON());
  });
}
