// Worker health, per worker (a DP server's ranks go up and down together). Active: GET the
// health endpoint every intervalMs; failureThreshold consecutive failures mark a worker down,
// successThreshold consecutive successes mark it up. Passive: a connect error marks it down at
// once (the process is gone; waiting for three probes would send it more traffic), a 5xx
// counts as one failed check. With active checks off (interval 0) a worker marked down
// passively stays down until an admin re-adds it.

import { describeError, getText } from '@kvroute/protocol';
import type { Agent } from 'undici';
import type { HealthConfig } from './config.ts';
import type { RankTable, Worker } from './rank-table.ts';

export interface HealthLog {
  warn(obj: object, msg: string): void;
  info(obj: object, msg: string): void;
}

export class HealthMonitor {
  private timer: NodeJS.Timeout | undefined;
  private readonly checking = new Set<Worker>();

  constructor(
    private readonly table: RankTable,
    private readonly agent: Agent,
    private readonly config: HealthConfig,
    private readonly log: HealthLog,
  ) {}

  start(): void {
    if (this.config.intervalMs <= 0 || this.timer) return;
    this.timer = setInterval(() => void this.checkAll(), this.config.intervalMs);
    this.timer.unref();
  }

  stop(): void {
    if (this.timer) clearInterval(this.timer);
    this.timer = undefined;
  }

  async checkAll(): Promise<void> {
    await Promise.all(this.table.workers().map((w) => this.check(w)));
  }

  async check(worker: Worker): Promise<void> {
    if (this.checking.has(worker)) return;
    this.checking.add(worker);
    try {
      const res = await getText(
        this.agent,
        worker.url + this.config.endpoint,
        this.config.timeoutMs,
      );
      if (res.status >= 200 && res.status < 300) this.success(worker);
      else this.failure(worker, `health check answered ${res.status}`);
    } catch (err) {
      this.failure(worker, `health check failed: ${describeError(err)}`);
    } finally {
      this.checking.delete(worker);
    }
  }

  /** A request reached the worker and got a non-5xx answer. */
  reportSuccess(worker: Worker): void {
    if (worker.healthy) worker.consecutiveFailures = 0;
  }

  /** Connect error (refused, reset before any answer): the worker is down now. */
  reportConnectError(worker: Worker, detail: string): void {
    worker.consecutiveFailures = Math.max(
      worker.consecutiveFailures + 1,
      this.config.failureThreshold,
    );
    worker.consecutiveSuccesses = 0;
    worker.lastError = detail;
    this.markDown(worker, detail);
  }

  /** The worker answered 5xx: one strike. */
  reportServerError(worker: Worker, detail: string): void {
    this.failure(worker, detail);
  }

  private success(worker: Worker): void {
    worker.consecutiveFailures = 0;
    worker.consecutiveSuccesses++;
    if (!worker.healthy && worker.consecutiveSuccesses >= this.config.successThreshold) {
      this.table.setHealthy(worker, true);
      this.log.info({ worker: worker.url }, 'worker marked up');
    }
  }

  private failure(worker: Worker, detail: string): void {
    worker.consecutiveSuccesses = 0;
    worker.consecutiveFailures++;
    worker.lastError = detail;
    if (worker.consecutiveFailures >= this.config.failureThreshold) this.markDown(worker, detail);
  }

  private markDown(worker: Worker, detail: string): void {
    if (!worker.healthy) return;
    this.table.setHealthy(worker, false);
    this.log.warn({ worker: worker.url, reason: detail }, 'worker marked down');
  }
}
