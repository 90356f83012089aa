// Drives @kvroute/sim's RankModel in real time. The RankModel asks for `now()` and
// `at(time, fn)` in model milliseconds; this maps model time onto the wall clock:
//   wall ms = model ms * timeScale   (1 = real time, 0.1 = 10x faster, 0 = instant)
// Events sit in the simulator's own EventHeap, ordered by (time, sequence), and a
// single timer is armed for the earliest one, so equal-time events run first-in first-out
// and a late timer never reorders them. While an event runs, `now()` is that event's model
// time (the RankModel sees the same consistent clock it sees in simulation); between
// events it follows the wall clock and never goes backwards.
// With timeScale 0 model time only moves from event to event: every queued event runs on
// the next turn of the event loop, so a request completes "immediately" while its cache
// and batching effects (cached_tokens) are still computed by the model.
import { EventHeap, type ScheduledEvent, type Scheduler } from '@kvroute/sim/model';

/** Instant mode yields to I/O after this many events so a long drain cannot starve sockets. */
const INSTANT_BATCH = 5000;

export class RealtimeScheduler implements Scheduler {
  readonly timeScale: number;
  private readonly events = new EventHeap();
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
    const event = this.events.push(timeMs, fn);
    this.arm();
    return event;
  }

  /** Number of pending (not cancelled) events; for tests. */
  pending(): number {
    return this.events.pending();
  }

  /** Stops all timers; pending events never run. */
  close(): void {
    this.closed = true;
    if (this.timer) clearTimeout(this.timer);
    if (this.immediate) clearImmediate(this.immediate);
    this.timer = undefined;
    this.immediate = undefined;
    this.events.clear();
  }

  private arm(): void {
    if (this.closed) return;
    const head = this.events.peek();
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
      const head = this.events.peek();
      if (!head) break;
      // Real time: run what is due (timers fire a little late, never early by more than
      // their 1 ms granularity, so accept events up to 1 ms ahead in wall time).
      if (this.timeScale > 0 && (head.time - this.wallModelTime()) * this.timeScale > 1) break;
      this.events.pop();
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
}
