// Reading a proxied request's body. The router needs the whole prompt to route, so the body is
// buffered, up to the configured limit; bytes past it are never kept.
import type { IncomingMessage } from 'node:http';
import { payloadTooLarge } from '@kvroute/protocol';

/** Rejection for a client that went away before its body was complete (nothing to answer). */
export const CLIENT_GONE = new Error('client closed the connection before sending its body');

/** The request body up to `limit` bytes; 413 (as a ProtocolError) beyond it. */
export function readBody(req: IncomingMessage, limit: number): Promise<Buffer> {
  const declared = Number(req.headers['content-length']);
  if (declared > limit) return Promise.reject(payloadTooLarge(limit, { param: 'body' }));
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    let done = false;
    req.on('data', (chunk: Buffer) => {
      if (done) return;
      size += chunk.length;
      if (size > limit) {
        done = true;
        reject(payloadTooLarge(limit, { param: 'body' }));
        return;
      }
      chunks.push(chunk);
    });
    req.once('end', () => {
      if (done) return;
      done = true;
      resolve(chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks, size));
    });
    req.once('close', () => {
      if (done) return;
      done = true;
      reject(CLIENT_GONE);
    });
    req.once('error', (err) => {
      if (done) return;
      done = true;
      reject(err);
    });
  });
}
