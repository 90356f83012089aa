// Reading a proxied request's body. The router needs the whole prompt to route, so the body is
// buffered, up to --max-body-bytes, within --body-timeout-ms, and counted against the body
// memory budget while it is held (admission.ts); bytes past a limit are never kept.
import type { IncomingMessage } from 'node:http';
import type { Socket } from 'node:net';
import { payloadTooLarge } from '@kvroute/protocol';
import type { Admission } from '../admission.ts';
import { RouterError } from '../errors.ts';

/** Rejection for a client that went away before its body was complete (nothing to answer). */
export const CLIENT_GONE = new Error('client closed the connection before sending its body');

export interface BodyLimits {
  maxBytes: number;
  timeoutMs: number;
  admission: Admission;
  /** When the request began (performance.now() ms); timeoutMs counts from here. Default: now. */
  startedAt?: number;
}

const ACCEPTED_AT = Symbol('kvroute.acceptedAt');
type StampedSocket = Socket & { [ACCEPTED_AT]?: number };

/** Called on every accepted connection: the start of its first request (see requestStart). */
export function markAccepted(socket: Socket): void {
  (socket as StampedSocket)[ACCEPTED_AT] = performance.now();
}

/**
 * When the body timeout of a request starts counting. For a connection's first request: the
 * moment the connection was accepted, but never more than maxChargeMs before now. Under a
 * burst of connections the event loop can be busy for seconds between accepting a connection
 * and parsing its headers; counting only from the handler would grant each of them that wait
 * on top of --body-timeout-ms. The cap keeps a client that connected early and sent later
 * (a pre-connected pool) from losing more than that part of its allowance; Node itself closes
 * a fresh connection that sends nothing within the headers timeout. Later requests on a
 * kept-alive connection count from `now`. Every request must call this once: it consumes the
 * connection's stamp.
 */
export function requestStart(req: IncomingMessage, now: number, maxChargeMs: number): number {
  const socket = req.socket as StampedSocket | null;
  const at = socket?.[ACCEPTED_AT];
  if (at === undefined) return now;
  socket![ACCEPTED_AT] = undefined;
  return Math.max(at, now - maxChargeMs);
}

/**
 * After an answer written while the client was still sending (the connection: close answer
 * to a body the router refused): Node ends the socket once the answer is flushed; if it
 * cannot be flushed (a client that does not read), the socket is destroyed after boundMs
 * anyway, so a refused connection never outlives its answer by more than that.
 */
export function closeAfterAnswer(req: IncomingMessage, boundMs: number): void {
  const socket = req.socket as Socket | undefined;
  // app.inject's stand-in socket has nothing to close.
  if (!socket || socket.destroyed || typeof socket.destroy !== 'function') return;
  const cut = setTimeout(() => socket.destroy(), boundMs);
  cut.unref();
  socket.once('close', () => clearTimeout(cut));
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
    const startedAt = limits.startedAt ?? performance.now();
    const timer = setTimeout(
      () => {
        if (done) return;
        fail(
          new RouterError(
            'request_timeout',
            `The request body did not arrive within ${limits.timeoutMs} ms (--body-timeout-ms)`,
          ),
        );
      },
      Math.max(0, startedAt + limits.timeoutMs - performance.now()),
    );
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
