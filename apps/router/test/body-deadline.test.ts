// When a proxied request's body timeout starts and how a refused connection is closed
// (src/proxy/body.ts), checked with fake timers so nothing depends on the machine's speed.
import { EventEmitter } from 'node:events';
import type { IncomingMessage } from 'node:http';
import type { Socket } from 'node:net';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { Admission } from '../src/admission.ts';
import { resolveConfig } from '../src/config.ts';
import { closeAfterAnswer, markAccepted, readBody, requestStart } from '../src/proxy/body.ts';

beforeEach(() => {
  vi.useFakeTimers({ toFake: ['setTimeout', 'clearTimeout', 'performance'] });
});
afterEach(() => {
  vi.useRealTimers();
});

function fakeSocket(): Socket & EventEmitter & { destroyCalls: number } {
  const s = new EventEmitter() as Socket & EventEmitter & { destroyCalls: number };
  s.destroyCalls = 0;
  Object.assign(s, {
    destroyed: false,
    destroy() {
      s.destroyCalls++;
      (s as { destroyed: boolean }).destroyed = true;
      return s;
    },
  });
  return s;
}

/** A request whose body never arrives. */
function pendingRequest(socket: Socket): IncomingMessage {
  const req = new EventEmitter() as IncomingMessage;
  Object.assign(req, { socket });
  return req;
}

describe('requestStart', () => {
  it("a connection's first request counts from its acceptance, later ones from their handler", () => {
    const socket = fakeSocket();
    const acceptedAt = performance.now();
    markAccepted(socket);
    vi.advanceTimersByTime(1_500);
    const now = performance.now();
    expect(requestStart(pendingRequest(socket), now, 5_000)).toBe(acceptedAt);
    // The stamp is consumed: the next request on the same connection starts when it is handled.
    expect(requestStart(pendingRequest(socket), now + 10, 5_000)).toBe(now + 10);
  });

  it('never charges more than maxChargeMs of the wait before the handler', () => {
    const socket = fakeSocket();
    markAccepted(socket);
    vi.advanceTimersByTime(8_000);
    const now = performance.now();
    expect(requestStart(pendingRequest(socket), now, 5_000)).toBe(now - 5_000);
  });

  it('a request without a stamped socket (inject) starts now', () => {
    const req = new EventEmitter() as IncomingMessage;
    expect(requestStart(req, 42, 5_000)).toBe(42);
  });
});

describe('readBody deadline', () => {
  const admission = new Admission(resolveConfig(['--worker-urls', 'http://127.0.0.1:1']), []);

  it('fires timeoutMs after startedAt, not after the call', async () => {
    const req = pendingRequest(fakeSocket());
    const startedAt = performance.now() - 4_000;
    let outcome: unknown;
    readBody(req, { maxBytes: 1_000, timeoutMs: 5_000, admission, startedAt }).then(
      () => {
        outcome = 'resolved';
      },
      (err: unknown) => {
        outcome = err;
      },
    );
    await vi.advanceTimersByTimeAsync(999);
    expect(outcome).toBeUndefined();
    await vi.advanceTimersByTimeAsync(2);
    expect(outcome).toMatchObject({ status: 408, code: 'request_timeout' });
  });

  it('a deadline already past rejects at once', async () => {
    const req = pendingRequest(fakeSocket());
    const p = readBody(req, {
      maxBytes: 1_000,
      timeoutMs: 1_000,
      admission,
      startedAt: performance.now() - 3_000,
    });
    const check = expect(p).rejects.toMatchObject({ status: 408 });
    await vi.advanceTimersByTimeAsync(0);
    await check;
  });
});

describe('closeAfterAnswer', () => {
  it('destroys a connection still open boundMs after its answer', () => {
    const socket = fakeSocket();
    closeAfterAnswer(pendingRequest(socket), 1_000);
    vi.advanceTimersByTime(999);
    expect(socket.destroyCalls).toBe(0);
    vi.advanceTimersByTime(1);
    expect(socket.destroyCalls).toBe(1);
  });

  it('leaves alone a connection that closed by itself', () => {
    const socket = fakeSocket();
    closeAfterAnswer(pendingRequest(socket), 1_000);
    socket.emit('close');
    vi.advanceTimersByTime(5_000);
    expect(socket.destroyCalls).toBe(0);
  });
});
