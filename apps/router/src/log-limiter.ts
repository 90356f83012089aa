// Failures are logged, but a worker failing hundreds of requests a second must not flood the
// log: one line per key (worker and cause) per interval, carrying how many were suppressed.
export class LogLimiter {
  private readonly last = new Map<string, { at: number; suppressed: number }>();

  constructor(
    private readonly intervalMs = 5_000,
    private readonly now: () => number = Date.now,
  ) {}

  /** The number of suppressed lines to report when this one should be logged, else -1. */
  take(key: string): number {
    const now = this.now();
    const e = this.last.get(key);
    if (e && now - e.at < this.intervalMs) {
      e.suppressed++;
      return -1;
    }
    const suppressed = e?.suppressed ?? 0;
    if (this.last.size > 10_000) this.last.clear();
    this.last.set(key, { at: now, suppressed: 0 });
    return suppressed;
  }
}
