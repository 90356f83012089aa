// Buffers for request bodies that arrive in several chunks, used again from one request to
// the next. A body the router must hold whole is joined into one buffer; a fresh buffer per
// request is memory V8 counts as external, and at 100+ KB bodies that count alone sets off a
// full garbage collection every few hundred requests, about a fifth of the router's CPU per
// request (measured with --trace-gc and perf on a bare node:http proxy). A pooled buffer is
// allocated once.
//
// A buffer goes back to the pool only when nothing can still read it. undici writes a body
// to the worker's socket and reports the answer complete without waiting for the write to
// finish: a worker that answers before it has read the whole body leaves the rest queued on
// the socket, to be sent later from the very memory the next request would be joined into.
// So a buffer is reused only if no connection to the origins its request went to has bytes
// waiting (socket.writableLength counts a write until the kernel has taken all of it, and a
// destroyed socket writes nothing more); otherwise it is left to the garbage collector.
import type { Socket } from 'node:net';

/** The smallest pooled buffer: a body up to this size in one chunk needs no join at all. */
const MIN_CLASS_BYTES = 64 * 1024;
/** Larger bodies are joined into a buffer of their own, as rare as they are large (default). */
export const MAX_POOLED_BYTES = 4 * 1024 * 1024;
/** Spare buffers kept for reuse, in all (memory the router holds while idle). */
export const DEFAULT_RETAINED_BYTES = 16 * 1024 * 1024;

/** The router's connections to workers, by origin, to ask whether any has bytes unwritten. */
export class UpstreamSockets {
  private readonly byOrigin = new Map<string, Set<Socket>>();

  /** Watches one connection until it closes (an undici connector reports each one here). */
  readonly add = (origin: string, socket: Socket): void => {
    let set = this.byOrigin.get(origin);
    if (!set) {
      set = new Set();
      this.byOrigin.set(origin, set);
    }
    set.add(socket);
    socket.once('close', () => {
      set.delete(socket);
      if (set.size === 0 && this.byOrigin.get(origin) === set) this.byOrigin.delete(origin);
    });
  };

  /** Whether every connection to this origin has handed all it was given to the kernel. */
  flushed(origin: string): boolean {
    const set = this.byOrigin.get(origin);
    if (!set) return true;
    for (const socket of set) {
      if (socket.writableLength > 0) return false;
    }
    return true;
  }
}

/** Size class of a body: the power of two at or above it, from MIN_CLASS_BYTES. */
function classOf(size: number): number {
  return size <= MIN_CLASS_BYTES ? MIN_CLASS_BYTES : 2 ** Math.ceil(Math.log2(size));
}

export interface JoinedBody {
  body: Buffer;
  /** The pooled buffer behind body, to give back once the request is done (see give). */
  slab?: Buffer;
}

export class BodyPool {
  private readonly free = new Map<number, Buffer[]>();
  private retained = 0;
  /** Counters for tests and the curious: joins served from the pool, and fresh allocations. */
  reused = 0;
  allocated = 0;

  private readonly maxRetainedBytes: number;
  private readonly maxPooledBytes: number;

  constructor(
    private readonly sockets: UpstreamSockets,
    opts: { maxRetainedBytes?: number; maxPooledBytes?: number } = {},
  ) {
    this.maxRetainedBytes = opts.maxRetainedBytes ?? DEFAULT_RETAINED_BYTES;
    this.maxPooledBytes = opts.maxPooledBytes ?? MAX_POOLED_BYTES;
  }

  /** The chunks as one buffer: a chunk alone as it is, a pooled buffer where one fits. */
  join(chunks: readonly Buffer[], size: number): JoinedBody {
    if (chunks.length === 1) return { body: chunks[0]! };
    if (size > this.maxPooledBytes) return { body: Buffer.concat(chunks as Buffer[], size) };
    const cls = classOf(size);
    let slab = this.free.get(cls)?.pop();
    if (slab) {
      this.retained -= slab.length;
      this.reused++;
    } else {
      slab = Buffer.allocUnsafeSlow(cls);
      this.allocated++;
    }
    let at = 0;
    for (const c of chunks) at += c.copy(slab, at);
    return { body: slab.subarray(0, size), slab };
  }

  /**
   * Back to the pool once the request is done, if no connection to the origins it was sent
   * to (every attempt's) still has bytes to write; else, or past the retained bound, dropped.
   */
  give(slab: Buffer, origins: readonly string[]): void {
    for (const origin of origins) {
      if (!this.sockets.flushed(origin)) return;
    }
    if (this.retained + slab.length > this.maxRetainedBytes) return;
    let list = this.free.get(slab.length);
    if (!list) {
      list = [];
      this.free.set(slab.length, list);
    }
    list.push(slab);
    this.retained += slab.length;
  }

  /** Bytes kept for reuse now. */
  get retainedBytes(): number {
    return this.retained;
  }
}
