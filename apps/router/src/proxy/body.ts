// Reading a proxied request's body. The router needs the whole prompt to route, so the body is
// buffered, up to --max-body-bytes, within --body-timeout-ms, and counted against the body
// memory budget while it is held (admission.ts); bytes past a limit are never kept.
import type { IncomingMessage } from 'node:http';
import { payloadTooLarge } from '@kvroute/protocol';
import type { Admission } from '../admission.ts';
import { RouterError } from '../errors.ts';

/** Rejection for a client that went away before its body was complete (nothing to answer). */
export const CLIENT_GONE = new Error('client closed the connection before sending its body');

export interface BodyLimits {
  maxBytes: number;
  timeoutMs: number;
  admission: Admission;
}

export interface ReadBody {
  raw: Buffer;
  /** Bytes counted against the memory budget; the caller releases them when done. */
  reserved: number;
}

/** The request body; 413 past maxBytes, 503 past the memory budget, 408 past the timeout. */
export function readBody(req: IncomingMessage, limits: BodyLimits): Promise<ReadBody> {
  const { maxBytes, admission } = limits;
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    let done = false;
    const fail = (err: Error): void => {
      done = true;
      clearTimeout(timer);
      admission.releaseBody(size);
      reject(err);
    };
    const timer = setTimeout(() => {
      if (done) return;
      fail(
        new RouterError(
          'request_timeout',
          `The request body did not arrive within ${limits.timeoutMs} ms (--body-timeout-ms)`,
        ),
      );
    }, limits.timeoutMs);
    req.on('data', (chunk: Buffer) => {
      if (done) return;
      if (size + chunk.length > maxBytes) {
        fail(payloadTooLarge(maxBytes, { param: 'body' }));
        return;
      }
      if (!admission.reserveBody(chunk.length)) {
        fail(admission.overBudget());
        return;
      }
      size += chunk.length;
      chunks.push(chunk);
    });
    req.once('end', () => {
      if (done) return;
      done = true;
      clearTimeout(timer);
      resolve({
        raw: chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks, size),
        reserved: size,
      });
    });
    req.once('close', () => {
      if (done) return;
      fail(CLIENT_GONE);
    });
    req.once('error', (err) => {
      if (done) return;
      fail(err);
    });
  });
}
