// The simulator's only clock: a binary min-heap of events ordered by (time, sequence number),
// so events at equal times run first-in first-out and a run never depends on heap internals.
// Cancelling marks the event; the heap drops it when it surfaces (cheaper than a decrease-key).

export interface ScheduledEvent {
  cancel(): void;
}

/** What a RankModel needs from its host: the same interface in simulated and real time. */
export interface Scheduler {
  now(): number;
  at(timeMs: number, fn: () => void): ScheduledEvent;
}

/** An event in an EventHeap: when it runs, what runs, and whether it was cancelled. */
export class HeapEvent implements ScheduledEvent {
  cancelled = false;
  constructor(
    readonly time: number,
    readonly seq: number,
    readonly fn: () => void,
  ) {}
  cancel(): void {
    this.cancelled = true;
  }
}

function before(a: HeapEvent, b: HeapEvent): boolean {
  return a.time < b.time || (a.time === b.time && a.seq < b.seq);
}

/**
 * The one (time, sequence) ordering both clocks run on: the simulator's EventQueue and the
 * mock worker's real-time scheduler, so a rank model sees events in the same order in both.
 */
export class EventHeap {
  private heap: HeapEvent[] = [];
  private seq = 0;

  get size(): number {
    return this.heap.length;
  }

  /** Events not cancelled (O(n); for tests and diagnostics). */
  pending(): number {
    let n = 0;
    for (const e of this.heap) if (!e.cancelled) n++;
    return n;
  }

  peek(): HeapEvent | undefined {
    return this.heap[0];
  }

  push(timeMs: number, fn: () => void): HeapEvent {
    const e = new HeapEvent(timeMs, this.seq++, fn);
    const h = this.heap;
    h.push(e);
    let i = h.length - 1;
    while (i > 0) {
      const p = (i - 1) >> 1;
      if (!before(e, h[p]!)) break;
      h[i] = h[p]!;
      i = p;
    }
    h[i] = e;
    return e;
  }

  pop(): HeapEvent | undefined {
    const h = this.heap;
    const top = h[0];
    const last = h.pop();
    if (top === undefined || last === undefined || h.length === 0) return top;
    let i = 0;
    const n = h.length;
    for (;;) {
      const l = 2 * i + 1;
      if (l >= n) break;
      const r = l + 1;
      const c = r < n && before(h[r]!, h[l]!) ? r : l;
      if (!before(h[c]!, last)) break;
      h[i] = h[c]!;
      i = c;
    }
    h[i] = last;
    return top;
  }

  clear(): void {
    this.heap.length = 0;
  }
}

export class EventQueue implements Scheduler {
  private readonly events = new EventHeap();
  private clock = 0;
  /** Events executed so far (cancelled ones excluded). */
  executed = 0;

  now(): number {
    return this.clock;
  }

  get size(): number {
    return this.events.size;
  }

  at(timeMs: number, fn: () => void): ScheduledEvent {
    if (!(timeMs >= this.clock)) {
      throw new RangeError(`event at ${timeMs} ms is before the current time ${this.clock} ms`);
    }
    return this.events.push(timeMs, fn);
  }

  /** Runs events in order until none are left or the next one is after `untilMs`. */
  run(untilMs = Number.POSITIVE_INFINITY): void {
    for (;;) {
      const top = this.events.peek();
      if (top === undefined || top.time > untilMs) break;
      this.events.pop();
      if (top.cancelled) continue;
      this.clock = top.time;
      this.executed++;
      top.fn();
    }
  }
}
