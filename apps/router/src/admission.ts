// What the router admits, decided before it spends anything on a request. In order:
//   1. the inference API key, if keys are configured (401, constant-time comparison);
//   2. a token bucket per API key, or per client address without keys (429 + Retry-After);
//   3. the body: over --max-body-bytes is 413 and over the free body memory 503 + Retry-After,
//      both answered before reading it (and without "100 Continue" to a client that asked);
//      while it is read, bytes held count against --body-memory-bytes;
//   4. a slot among --max-concurrent-requests, else a place in a bounded FIFO queue for at
//      most --queue-timeout-ms (503 + Retry-After when the queue is full or the wait too long);
//   5. per rank, --max-concurrent-per-rank: a full rank is not offered to the policy, and when
//      every routable rank is full the request waits in the same queue.
// The router needs the whole prompt to route, so bodies are buffered; the memory budget is
// what keeps many large bodies at once from exhausting the process.
import { createHash, timingSafeEqual } from 'node:crypto';
import { RouterError } from './errors.ts';

export interface AdmissionConfig {
  maxConcurrentRequests: number;
  maxQueuedRequests: number;
  queueTimeoutMs: number;
  rateLimitRps: number;
  rateLimitBurst: number;
  bodyMemoryBytes: number;
}

interface Waiter {
  resolve: () => void;
  reject: (err: Error) => void;
  timer: NodeJS.Timeout;
  /** Woken for a free global slot (acquire) or for any completion (waitForChange). */
  kind: 'slot' | 'change';
  /** Stops listening to the waiter's cancel signal, once it left the queue. */
  detach?: () => void;
}

const BUCKETS_MAX = 100_000;

export class Admission {
  inFlight = 0;
  bodyBytes = 0;
  private readonly queue: Waiter[] = [];
  private readonly buckets = new Map<string, { tokens: number; at: number }>();
  private readonly keyDigests: Buffer[];

  constructor(
    private readonly config: AdmissionConfig,
    apiKeys: readonly string[],
    private readonly now: () => number = Date.now,
  ) {
    this.keyDigests = apiKeys.map(digest);
  }

  get queued(): number {
    return this.queue.length;
  }

  get requiresKey(): boolean {
    return this.keyDigests.length > 0;
  }

  /**
   * A client request's key (401 without a valid one when keys are configured), then its
   * token from the rate limit, per key or else per client address (429 when empty).
   */
  checkClient(authorization: string | undefined, address: string | undefined): void {
    const key = this.checkApiKey(authorization);
    if (this.config.rateLimitRps > 0) this.checkRate(key ?? address ?? 'unknown');
  }

  /** The API key the request carries when keys are configured; 401 otherwise. */
  checkApiKey(authorization: string | undefined): string | undefined {
    if (this.keyDigests.length === 0) return undefined;
    if (!authorization) {
      throw new RouterError(
        'missing_api_key',
        'Missing API key: send "Authorization: Bearer <key>"',
        'Authorization',
      );
    }
    const m = /^Bearer\s+(.+)$/i.exec(authorization);
    const given = digest(m ? m[1]!.trim() : '');
    // Every key is compared, whatever matches first, so timing says nothing about which.
    let ok = false;
    for (const d of this.keyDigests) ok = timingSafeEqual(given, d) || ok;
    if (!m || !ok) throw new RouterError('invalid_api_key', 'Invalid API key', 'Authorization');
    return m[1]!.trim();
  }

  /** Takes a token from `key`'s bucket; 429 with Retry-After when it is empty. */
  checkRate(key: string): void {
    const rps = this.config.rateLimitRps;
    if (rps <= 0) return;
    const burst =
      this.config.rateLimitBurst > 0 ? this.config.rateLimitBurst : Math.max(1, 2 * rps);
    const now = this.now();
    let b = this.buckets.get(key);
    if (b) {
      this.buckets.delete(key);
      b.tokens = Math.min(burst, b.tokens + ((now - b.at) / 1000) * rps);
      b.at = now;
    } else {
      b = { tokens: burst, at: now };
      if (this.buckets.size >= BUCKETS_MAX) {
        // Least recently used first: Map keeps insertion order and a use re-inserts.
        this.buckets.delete(this.buckets.keys().next().value!);
      }
    }
    this.buckets.set(key, b);
    if (b.tokens < 1) {
      const wait = Math.ceil((1 - b.tokens) / rps);
      throw new RouterError(
        'rate_limited',
        `Rate limit of ${rps} requests/s exceeded; retry after ${wait} s`,
      ).withRetryAfter(wait);
    }
    b.tokens -= 1;
  }

  /** Whether `bytes` more of request bodies fit in memory now. */
  bodyFits(bytes: number): boolean {
    return this.bodyBytes + bytes <= this.config.bodyMemoryBytes;
  }

  /** Counts `bytes` of a body being held; false (nothing counted) when over the budget. */
  reserveBody(bytes: number): boolean {
    if (!this.bodyFits(bytes)) return false;
    this.bodyBytes += bytes;
    return true;
  }

  releaseBody(bytes: number): void {
    this.bodyBytes = Math.max(0, this.bodyBytes - bytes);
  }

  overBudget(): RouterError {
    return new RouterError(
      'overloaded',
      `Request bodies in flight exceed the router's memory budget (${this.config.bodyMemoryBytes} bytes, --body-memory-bytes); retry shortly`,
    ).withRetryAfter(1);
  }

  /**
   * A slot among maxConcurrentRequests, taken at once when one is free and no one waits for
   * one (true); false when the request has to wait (waitForSlot). Pair every slot with
   * release().
   */
  tryAcquire(): boolean {
    const max = this.config.maxConcurrentRequests;
    if (max <= 0 || (this.inFlight < max && this.queue.length === 0)) {
      this.inFlight++;
      return true;
    }
    return false;
  }

  /**
   * Waits in line for a slot: resolves when one frees up (FIFO), holding it; rejects with 503
   * when the queue is full or the wait passes queueTimeoutMs, and with `signal`'s reason when
   * it aborts (the client left), holding nothing.
   */
  waitForSlot(signal?: AbortSignal): Promise<void> {
    return this.enqueue('slot', signal).then(() => {
      this.inFlight++;
    });
  }

  release(): void {
    this.inFlight--;
    this.wake();
  }

  /**
   * Waits for any request to complete (a rank slot may have freed up), within the queue bounds;
   * an aborted `signal` takes the waiter out of the queue and rejects with its reason.
   */
  waitForChange(signal?: AbortSignal): Promise<void> {
    return this.enqueue('change', signal);
  }

  /** Wakes waiters for a freed slot (first in line) and every waiter for a change. */
  wake(): void {
    if (this.queue.length === 0) return;
    const max = this.config.maxConcurrentRequests;
    let free = max <= 0 ? Number.POSITIVE_INFINITY : max - this.inFlight;
    for (let i = 0; i < this.queue.length; ) {
      const w = this.queue[i]!;
      if (w.kind === 'change' || free > 0) {
        if (w.kind === 'slot') free--;
        this.queue.splice(i, 1);
        clearTimeout(w.timer);
        w.detach?.();
        w.resolve();
      } else {
        i++;
      }
    }
  }

  private enqueue(kind: Waiter['kind'], signal?: AbortSignal): Promise<void> {
    if (signal?.aborted) return Promise.reject(signal.reason);
    if (this.queue.length >= this.config.maxQueuedRequests) {
      return Promise.reject(
        new RouterError(
          'overloaded',
          `The router is at capacity and its queue is full (${this.config.maxQueuedRequests} waiting, --max-queued-requests); retry shortly`,
        ).withRetryAfter(1),
      );
    }
    return new Promise<void>((resolve, reject) => {
      const w: Waiter = {
        resolve,
        reject,
        kind,
        timer: setTimeout(() => {
          const i = this.queue.indexOf(w);
          if (i >= 0) this.queue.splice(i, 1);
          w.detach?.();
          reject(
            new RouterError(
              'overloaded',
              `No capacity within ${this.config.queueTimeoutMs} ms (--queue-timeout-ms); retry shortly`,
            ).withRetryAfter(Math.max(1, Math.ceil(this.config.queueTimeoutMs / 1000))),
          );
        }, this.config.queueTimeoutMs),
      };
      if (signal) {
        // A client that leaves while queued must not keep its place, nor be sent on later.
        const onAbort = (): void => {
          const i = this.queue.indexOf(w);
          if (i >= 0) this.queue.splice(i, 1);
          clearTimeout(w.timer);
          reject(signal.reason);
        };
        signal.addEventListener('abort', onAbort, { once: true });
        w.detach = () => signal.removeEventListener('abort', onAbort);
      }
      this.queue.push(w);
    });
  }

  /** Drops a waiter whose client went away (its promise never settles). */
  close(): void {
    for (const w of this.queue.splice(0)) {
      clearTimeout(w.timer);
      w.detach?.();
    }
  }
}

function digest(s: string): Buffer {
  return createHash('sha256').update(s).digest();
}
