// Drives @kvroute/sim's RankModel in real time. The RankModel asks for `now()` and
// `at(time, fn)` in model milliseconds; this maps model time onto the wall clock:
//   wall ms = model ms * timeScale   (1 = real time, 0.1 = 10x faster, 0 = instant)
// Events sit in one heap ordered by (time, sequence), exactly as in the simulator, and a
// single timer is armed for the earliest one, so equal-time events run first-in first-out
// and a late timer never reorders them. While an event runs, `now()` is that event's model
// time (the RankModel sees the same consistent clock it sees in simulation); between
// events it follows the wall clock and never goes backwards.
// With timeScale 0 model time only moves from event to event: every queued event runs on
// the next turn of the event loop, so a request completes "immediately" while its cache
// and batching effects (cached_tokens) are still computed by the model.
import type { ScheduledEvent, Scheduler } from '@kvroute/sim';

interface Entry {
  time: number;
  seq: number;
  fn: () => void;
  cancelled: boolean;
}

/** Instant mode yields to I/O after this many events so a long drain cannot starve sockets. */
const INSTANT_BATCH = 5000;

export class RealtimeScheduler implements Scheduler {
  readonly timeScale: number;
  private readonly heap: Entry[] = [];
  private seq = 0;
  private readonly startWall: number;
  private last = 0;
  private firing: number | undefined;
  private timer: NodeJS.Timeout | undefined;
  private timerAt = Number.POSITIVE_INFINITY;
  private immediate: NodeJS.Immediate | undefined;
  private closed = false;
  private readonly wall: () => number;

  constructor(timeScale: number, wallClock: () => number = () => performance.now()) {
    if (!Number.isFinite(timeScale) || timeScale < 0) {
      throw new RangeError(`timeScale must be a number >= 0, got ${timeScale}`);
    }
    this.timeScale = timeScale;
    this.wall = wallClock;
    this.startWall = wallClock();
  }

  private wallModelTime(): number {
    return this.timeScale > 0 ? (this.wall() - this.startWall) / this.timeScale : this.last;
  }

  now(): number {
    if (this.firing !== undefined) return this.firing;
    const t = this.wallModelTime();
    return Math.max(t, this.last);
  }

  at(timeMs: number, fn: () => void): ScheduledEvent {
    if (!Number.isFinite(timeMs)) throw new RangeError(`event time must be finite, got ${timeMs}`);
    const entry: Entry = { time: timeMs, seq: this.seq++, fn, cancelled: false };
    this.push(entry);
    this.arm();
    return {
      cancel: () => {
        entry.cancelled = true;
      },
    };
  }

  /** Number of pending (not cancelled) events; for tests. */
  pending(): number {
    return this.heap.reduce((n, e) => n + (e.cancelled ? 0 : 1), 0);
  }

  /** Stops all timers; pending events never run. */
  close(): void {
    this.closed = true;
    if (this.timer) clearTimeout(this.timer);
    if (this.immediate) clearImmediate(this.immediate);
    this.timer = undefined;
    this.immediate = undefined;
    this.heap.length = 0;
  }

  private arm(): void {
    if (this.closed) return;
    const head = this.heap[0];
    if (!head) return;
    if (this.timeScale === 0) {
      this.immediate ??= setImmediate(() => {
        this.immediate = undefined;
        this.drain(INSTANT_BATCH);
      });
      return;
    }
    if (this.timer && this.timerAt <= head.time) return;
    if (this.timer) clearTimeout(this.timer);
    const delay = Math.max(0, (head.time - this.wallModelTime()) * this.timeScale);
    this.timerAt = head.time;
    this.timer = setTimeout(() => {
      this.timer = undefined;
      this.timerAt = Number.POSITIVE_INFINITY;
      this.drain(Number.POSITIVE_INFINITY);
    }, delay);
  }

  private drain(maxEvents: number): void {
    let ran = 0;
    while (ran < maxEvents && !this.closed) {
      const head = this.heap[0];
      if (!head) break;
      // Real time: run what is due (timers fire a little late, never early by more than
      // their 1 ms granularity, so accept events up to 1 ms ahead in wall time).
      if (this.timeScale > 0 && (head.time - this.wallModelTime()) * this.timeScale > 1) break;
      this.pop();
      if (head.cancelled) continue;
      ran++;
      if (head.time > this.last) this.last = head.time;
      this.firing = this.last;
      try {
        head.fn();
      } finally {
        this.firing = undefined;
      }
    }
    this.arm();
  }

  private less(a: Entry, b: Entry): boolean {
    return a.time < b.time || (a.time === b.time && a.seq < b.seq);
  }

  private push(e: Entry): void {
    const h = this.heap;
    h.push(e);
    let i = h.length - 1;
    while (i > 0) {
      const p = (i - 1) >> 1;
      const parent = h[p] as Entry;
      if (!this.less(e, parent)) break;
      h[i] = parent;
      i = p;
    }
    h[i] = e;
  }

  private pop(): Entry | undefined {
    const h = this.heap;
    const top = h[0];
    const last = h.pop();
    if (h.length === 0 || !last) return top;
    let i = 0;
    const n = h.length;
    for (;;) {
      const l = 2 * i + 1;
      if (l >= n) break;
      const r = l + 1;
      const c = r < n && this.less(h[r] as Entry, h[l] as Entry) ? r : l;
      if (!this.less(h[c] as Entry, last)) break;
      h[i] = h[c] as Entry;
      i = c;
    }
    h[i] = last;
    return top;
  }
}
