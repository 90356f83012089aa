// The recorded trace's file side: a bounded in-memory queue of finished lines and one
// asynchronous writer draining it, so a request never waits on the disk. When the queue is
// full (the disk is slower than the traffic, or stalled) a line is dropped and counted, never
// queued without bound and never blocking the request that produced it.
//
// Lines go to the disk in batches: when `flushBytes` of them wait, or `flushMs` after the
// oldest one queued, whichever comes first. An fs.write costs a thread-pool round trip and a
// wake-up of the event loop (tens of microseconds of CPU in all), more than building a line,
// so writing every few lines as they come would cost the router more than the recording.
//
// Files: the live file is PATH; rotation (by size, by age) renames it to PATH.NNNNNN with the
// next free number, so `cat PATH.* PATH` is the recording in order, and every file opens with
// the header line (the recording's `start` event, same origin each time). A recording that
// starts where a file already exists moves that file aside the same way first: files of two
// recordings are never mixed.
import {
  close,
  closeSync,
  existsSync,
  open,
  openSync,
  readdirSync,
  rename,
  renameSync,
  statSync,
  write,
} from 'node:fs';
import { basename, dirname, join } from 'node:path';
import { promisify } from 'node:util';

// Plain descriptors and fs.write (no FileHandle objects): one descriptor the writer owns.
const closeAsync = promisify(close);
const openAsync = promisify(open);
const renameAsync = promisify(rename);

export interface TraceWriterOptions {
  path: string;
  /** Rotate when the live file reaches this size; 0 = never. */
  rotateBytes: number;
  /** Rotate when the live file is this old (and holds a request line); 0 = never. */
  rotateMs: number;
  /** Lines waiting for the disk at most this many bytes; beyond it lines are dropped. */
  queueBytes: number;
  /** Write as soon as this many bytes wait (default 64 KiB, at most queueBytes / 2). */
  flushBytes?: number;
  /** Write what waits at the latest this long after it was queued (default 200 ms). */
  flushMs?: number;
  /** The first line of every file (without newline). */
  header(): string;
  /** A line was dropped because the queue was full. */
  onDrop(): void;
  /** A write, rotation or close failed (the line batch is lost, counted as dropped). */
  onError(err: Error): void;
}

const ROTATED = /^\.(\d{6,})$/;

/** The next free rotated name of `path` (PATH.000001, PATH.000002, ...). */
export function nextRotatedPath(path: string): string {
  const dir = dirname(path);
  const base = basename(path);
  let max = 0;
  for (const name of readdirSync(dir)) {
    if (!name.startsWith(base)) continue;
    const m = ROTATED.exec(name.slice(base.length));
    if (m) max = Math.max(max, Number(m[1]));
  }
  return join(dir, `${base}.${String(max + 1).padStart(6, '0')}`);
}

/** The rotated files of a recording at `path`, oldest first (not the live file). */
export function rotatedFiles(path: string): string[] {
  const dir = dirname(path);
  const base = basename(path);
  return readdirSync(dir)
    .filter((n) => n.startsWith(base) && ROTATED.test(n.slice(base.length)))
    .sort()
    .map((n) => join(dir, n));
}

export class TraceWriter {
  private fd: number;
  private queue: string[] = [];
  private queuedBytes = 0;
  /** Bytes promised to lines still being built (reserve / pushReserved). */
  private reservedBytes = 0;
  private readonly flushBytes: number;
  private readonly flushMs: number;
  private flushTimer: NodeJS.Timeout | undefined;
  /** The batch's bytes on their way to the disk (see writeText). */
  private scratch = Buffer.alloc(0);
  private flushNow: NodeJS.Immediate | undefined;
  private writing = false;
  private closed = false;
  private fileBytes = 0;
  /** Request lines written to the live file (a file with none is never rotated). */
  private fileRequests = 0;
  /** Header lines at the front of the queue (0 or 1: a file's header goes first). */
  private headersQueued = 0;
  private openedAt = Date.now();
  private ageTimer: NodeJS.Timeout | undefined;
  private idle: (() => void) | undefined;
  /** Lines written to disk and files rotated, for status and tests. */
  written = 0;
  rotations = 0;

  /** Opens the file synchronously, so a bad path is an error at start, naming the path. */
  constructor(private readonly o: TraceWriterOptions) {
    this.flushBytes = Math.max(
      1,
      Math.min(o.flushBytes ?? 64 * 1024, Math.floor(o.queueBytes / 2)),
    );
    this.flushMs = Math.max(0, o.flushMs ?? 200);
    if (existsSync(o.path) && statSync(o.path).size > 0)
      renameSync(o.path, nextRotatedPath(o.path));
    this.fd = openSync(o.path, 'a');
    this.queueLine(o.header(), true);
    if (o.rotateMs > 0) {
      // Also when no request comes: a file past its age is closed so it can be shipped.
      this.ageTimer = setInterval(() => this.kick(), Math.min(o.rotateMs, 60_000));
      this.ageTimer.unref();
    }
  }

  get queuedLines(): number {
    return this.queue.length;
  }

  /** Queues one request or event line; false (and counted as dropped) when the queue is full. */
  push(line: string): boolean {
    if (!this.reserve(line.length + 1)) return false;
    this.pushReserved(line, line.length + 1);
    return true;
  }

  /**
   * Holds room in the queue for a line built later (at most `bytes` long, newline included);
   * false (and counted as dropped) when the queue is full. The line follows by pushReserved.
   */
  reserve(bytes: number): boolean {
    if (this.closed || this.queuedBytes + this.reservedBytes + bytes > this.o.queueBytes) {
      this.o.onDrop();
      return false;
    }
    this.reservedBytes += bytes;
    return true;
  }

  /** Queues a line for which `reserved` bytes were held (reserve); the room is given back. */
  pushReserved(line: string, reserved: number): void {
    this.reservedBytes = Math.max(0, this.reservedBytes - reserved);
    this.queueLine(line, false);
  }

  private queueLine(line: string, header: boolean): void {
    this.queue.push(line);
    this.queuedBytes += line.length + 1;
    if (header) this.headersQueued++;
    this.kick();
  }

  /**
   * Schedules a write: right after the current turn when a batch is full, a rotation is due
   * or the writer closes (the disk write never runs inside a request's turn), else when the
   * oldest waiting line has waited flushMs.
   */
  private kick(): void {
    if (this.writing || this.flushNow !== undefined) return;
    if (this.closed || this.queuedBytes >= this.flushBytes || this.due()) {
      if (this.flushTimer !== undefined) clearTimeout(this.flushTimer);
      this.flushTimer = undefined;
      this.flushNow = setImmediate(() => {
        this.flushNow = undefined;
        void this.pump();
      });
    } else if (this.flushTimer === undefined && this.queue.length > 0) {
      this.flushTimer = setTimeout(() => {
        this.flushTimer = undefined;
        void this.pump();
      }, this.flushMs);
      // A recording never keeps the process alive: close() writes what is left.
      this.flushTimer.unref();
    }
  }

  private due(): boolean {
    if (this.fileRequests === 0) return false;
    if (this.o.rotateBytes > 0 && this.fileBytes >= this.o.rotateBytes) return true;
    return this.o.rotateMs > 0 && Date.now() - this.openedAt >= this.o.rotateMs;
  }

  private async pump(): Promise<void> {
    if (this.writing) return;
    this.writing = true;
    try {
      for (;;) {
        // Closing, a file is rotated only for lines still to come (never left holding a
        // header alone).
        if (this.due() && (!this.closed || this.queue.length > 0)) await this.rotate();
        if (this.queue.length === 0) break;
        const lines = this.takeForFile();
        const requests = lines.length - Math.min(lines.length, this.headersQueued);
        this.headersQueued -= lines.length - requests;
        const text = `${lines.join('\n')}\n`;
        try {
          this.fileBytes += await this.writeText(text);
          this.written += lines.length;
          this.fileRequests += requests;
        } catch (err) {
          for (let i = 0; i < lines.length; i++) this.o.onDrop();
          this.o.onError(err as Error);
        }
        // The rest of a batch split by a rotation follows into the next file; what came in
        // during the write waits for its own batch (unless closing).
        if (!this.closed && this.queuedBytes < this.flushBytes && !this.due()) break;
      }
    } finally {
      this.writing = false;
      if (this.queue.length > 0) this.kick();
      else this.idle?.();
    }
  }

  /**
   * The queued lines that go to the live file before it is due for rotation by size: up to
   * and including the one that brings it to rotateBytes (at least one), so a file overshoots
   * its size by at most one line, not by a batch.
   */
  private takeForFile(): string[] {
    const q = this.queue;
    let take = q.length;
    if (this.o.rotateBytes > 0) {
      let bytes = this.fileBytes;
      take = 0;
      while (take < q.length && bytes < this.o.rotateBytes) bytes += q[take++]!.length + 1;
      take = Math.max(1, take);
    }
    if (take === q.length) {
      this.queue = [];
      this.queuedBytes = 0;
      return q;
    }
    const lines = q.slice(0, take);
    this.queue = q.slice(take);
    for (const l of lines) this.queuedBytes -= l.length + 1;
    return lines;
  }

  /**
   * Writes a batch, encoded into a buffer the writer keeps (one write runs at a time), so a
   * batch allocates no new buffer: a fresh one per batch cost more than the encoding. A batch
   * far past the usual size (a backlog) gets a buffer of its own instead of growing it.
   */
  private async writeText(text: string): Promise<number> {
    const most = text.length * 3;
    let buf: Buffer;
    let n: number;
    if (most <= this.scratch.length) {
      buf = this.scratch;
      n = buf.write(text, 0, 'utf8');
    } else if (most <= 4 * this.flushBytes * 3) {
      this.scratch = Buffer.allocUnsafe(most);
      buf = this.scratch;
      n = buf.write(text, 0, 'utf8');
    } else {
      buf = Buffer.from(text, 'utf8');
      n = buf.length;
    }
    await writeAll(this.fd, buf, n);
    return n;
  }

  private async rotate(): Promise<void> {
    try {
      await closeAsync(this.fd);
      await renameAsync(this.o.path, nextRotatedPath(this.o.path));
      this.fd = await openAsync(this.o.path, 'a');
      this.rotations++;
    } catch (err) {
      this.o.onError(err as Error);
      try {
        this.fd = openSync(this.o.path, 'a');
      } catch {
        // Nothing left to write to: the next writes fail and count as dropped.
      }
    }
    this.fileBytes = 0;
    this.fileRequests = 0;
    this.openedAt = Date.now();
    this.queue.unshift(this.o.header());
    this.headersQueued++;
    this.queuedBytes += this.queue[0]!.length + 1;
  }

  /** Writes what is queued, then closes the file. */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    if (this.ageTimer) clearInterval(this.ageTimer);
    if (this.flushTimer !== undefined) clearTimeout(this.flushTimer);
    this.flushTimer = undefined;
    if (this.writing || this.queue.length > 0) {
      await new Promise<void>((resolve) => {
        this.idle = resolve;
        this.kick();
      });
    }
    try {
      closeSync(this.fd);
    } catch (err) {
      this.o.onError(err as Error);
    }
  }
}

function writeAll(fd: number, buf: Buffer, length: number): Promise<void> {
  return new Promise((resolve, reject) => {
    const from = (offset: number): void => {
      write(fd, buf, offset, length - offset, null, (err, n) => {
        if (err) reject(err);
        else if (offset + n < length) from(offset + n);
        else resolve();
      });
    };
    from(0);
  });
}
