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

class Entry implements ScheduledEvent {
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

function before(a: Entry, b: Entry): boolean {
  return a.time < b.time || (a.time === b.time && a.seq < b.seq);
}

export class EventQueue implements Scheduler {
  private heap: Entry[] = [];
  private seq = 0;
  private clock = 0;
  /** Events executed so far (cancelled ones excluded). */
  executed = 0;

  now(): number {
    return this.clock;
  }

  get size(): number {
    return this.heap.length;
  }

  at(timeMs: number, fn: () => void): ScheduledEvent {
    if (!(timeMs >= this.clock)) {
      throw new RangeError(`event at ${timeMs} ms is before the current time ${this.clock} ms`);
    }
    const e = new Entry(timeMs, this.seq++, fn);
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

  private pop(): Entry | undefined {
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

  /** Runs events in order until none are left or the next one is after `untilMs`. */
  run(untilMs = Number.POSITIVE_INFINITY): void {
    for (;;) {
      const top = this.heap[0];
      if (top === undefined || top.time > untilMs) break;
      this.pop();
      if (top.cancelled) continue;
      this.clock = top.time;
      this.executed++;
      top.fn();
    }
  }
}
