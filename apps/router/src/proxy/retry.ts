// Retries are bounded twice, as Envoy bounds them: per request (--max-retries, only while the
// client has seen nothing, only on another rank) and across the router (a retry budget: retries
// in flight at most a percentage of requests in flight, with a small floor), so a fleet that
// fails everywhere is not hit with up to three times its load. Each retry first waits a random
// time in [0, min(max, base * 2^(n-1))] (full jitter), which spreads a burst of failures out
// instead of sending it all to the next rank at once.

export interface RetryConfig {
  retryBackoffBaseMs: number;
  retryBackoffMaxMs: number;
  retryBudgetPercent: number;
  retryMinConcurrency: number;
}

export class RetryBudget {
  /** Requests in flight, and those of them now retrying. */
  active = 0;
  retrying = 0;

  constructor(
    private readonly config: RetryConfig,
    private readonly random: () => number = Math.random,
  ) {}

  /** Whether a retry slot is free now (without taking it). */
  hasRoom(): boolean {
    const allowed = Math.max(
      this.config.retryMinConcurrency,
      Math.floor((this.active * this.config.retryBudgetPercent) / 100),
    );
    return this.retrying < allowed;
  }

  /** Takes a retry slot if the budget has one; pair with release(). */
  tryAcquire(): boolean {
    if (!this.hasRoom()) return false;
    this.retrying++;
    return true;
  }

  release(): void {
    this.retrying--;
  }

  /** The wait before retry number `n` (1 = the first retry), ms. */
  backoffMs(n: number): number {
    const cap = Math.min(
      this.config.retryBackoffMaxMs,
      this.config.retryBackoffBaseMs * 2 ** Math.max(0, n - 1),
    );
    return cap <= 0 ? 0 : this.random() * cap;
  }
}
