// Worker health, per worker (a DP server's ranks go up and down together). Active: GET the
// health endpoint every intervalMs; failureThreshold consecutive failures mark a worker down,
// successThreshold consecutive successes mark it up; a check that cannot connect at all marks
// it down at once. Passive: a connect error marks it down at once (the process is gone;
// waiting for three probes would send it more traffic), a 5xx counts as one failed check. With active checks off (interval 0) a worker marked down
// passively stays down until an admin re-adds it.
//
// A worker can answer /health while generating nothing (a hung collective, a wedged
// scheduler), so a second, slower check exercises generation itself, with its own period and
// timeout: SGLang's GET /health_generate, or, where that route does not exist (vLLM and other
// OpenAI servers), a 1-token completion. Its failures count like failed health checks.
// Repeated 5xx and other request failures are outlier detection's business (outlier.ts).

import { describeError, getJson, getText, isConnectError } from '@kvroute/protocol';
import type { Agent } from 'undici';
import { request } from 'undici';
import type { HealthConfig } from './config.ts';
import type { RankTable, Worker } from './rank-table.ts';

export interface HealthLog {
  warn(obj: object, msg: string): void;
  info(obj: object, msg: string): void;
}

export class HealthMonitor {
  private timer: NodeJS.Timeout | undefined;
  private genTimer: NodeJS.Timeout | undefined;
  private readonly checking = new Set<Worker>();
  private readonly generating = new Set<Worker>();
  /** How each worker's generation is exercised, found on first use. */
  private readonly genMode = new WeakMap<Worker, 'sglang' | { model: string }>();
  /** Called when a worker is marked down: attempts on it that sent nothing move elsewhere. */
  onDown: ((worker: Worker, reason: string) => void) | undefined;
  /** Extra headers for checks (the workers' API key). */
  headers: Record<string, string> = {};

  constructor(
    private readonly table: RankTable,
    private readonly agent: Agent,
    private readonly config: HealthConfig,
    private readonly log: HealthLog,
  ) {}

  start(): void {
    const gen = this.config.generationIntervalMs ?? 0;
    if (gen > 0 && !this.genTimer) {
      this.genTimer = setInterval(() => void this.checkGenerationAll(), gen);
      this.genTimer.unref();
    }
    if (this.config.intervalMs <= 0 || this.timer) return;
    this.timer = setInterval(() => void this.checkAll(), this.config.intervalMs);
    this.timer.unref();
  }

  stop(): void {
    if (this.timer) clearInterval(this.timer);
    if (this.genTimer) clearInterval(this.genTimer);
    this.timer = undefined;
    this.genTimer = undefined;
  }

  async checkGenerationAll(): Promise<void> {
    await Promise.all(
      this.table
        .workers()
        .filter((w) => !w.removed)
        .map((w) => this.checkGeneration(w)),
    );
  }

  /** One generation check; counts as a passed or failed check. */
  async checkGeneration(worker: Worker): Promise<boolean> {
    if (this.generating.has(worker)) return true;
    this.generating.add(worker);
    try {
      const detail = await this.generate(worker);
      if (detail === undefined) {
        this.success(worker);
        return true;
      }
      this.failure(worker, detail);
      return false;
    } finally {
      this.generating.delete(worker);
    }
  }

  /** The half-open probe before an ejected worker is readmitted: health, then generation. */
  async probe(worker: Worker): Promise<boolean> {
    try {
      const res = await getText(
        this.agent,
        worker.url + this.config.endpoint,
        this.config.timeoutMs,
        this.headers,
      );
      if (res.status < 200 || res.status >= 300) return false;
    } catch {
      return false;
    }
    if ((this.config.generationIntervalMs ?? 0) <= 0) return true;
    return (await this.generate(worker)) === undefined;
  }

  /** Undefined when the worker generated a token in time, else what went wrong. */
  private async generate(worker: Worker): Promise<string | undefined> {
    const timeoutMs = this.config.generationTimeoutMs ?? 10_000;
    const started = Date.now();
    try {
      let mode = this.genMode.get(worker);
      if (mode === undefined || mode === 'sglang') {
        const res = await getText(
          this.agent,
          `${worker.url}/health_generate`,
          timeoutMs,
          this.headers,
        );
        if (res.status !== 404 && res.status !== 405) {
          this.genMode.set(worker, 'sglang');
          return res.status >= 200 && res.status < 300
            ? undefined
            : `generation check answered ${res.status}`;
        }
        const models = (await getJson(this.agent, `${worker.url}/v1/models`, timeoutMs)) as {
          data?: { id?: unknown }[];
        };
        const id = models?.data?.[0]?.id;
        mode = { model: typeof id === 'string' ? id : 'default' };
        this.genMode.set(worker, mode);
      }
      const left = Math.max(1, timeoutMs - (Date.now() - started));
      const res = await request(`${worker.url}/v1/completions`, {
        method: 'POST',
        dispatcher: this.agent,
        headers: { 'content-type': 'application/json', ...this.headers },
        body: JSON.stringify({ model: mode.model, prompt: 'ping', max_tokens: 1 }),
        signal: AbortSignal.timeout(left),
        headersTimeout: left,
        bodyTimeout: left,
      });
      await res.body.text();
      return res.statusCode >= 200 && res.statusCode < 300
        ? undefined
        : `generation check answered ${res.statusCode}`;
    } catch (err) {
      return `generation check failed: ${describeError(err)}`;
    }
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
        this.headers,
      );
      if (res.status >= 200 && res.status < 300) this.success(worker);
      else this.failure(worker, `health check answered ${res.status}`);
    } catch (err) {
      const detail = `health check failed: ${describeError(err)}`;
      // Nothing listens there (refused, unreachable, no such host): down now, as a request's
      // connect error would mark it, not after failureThreshold periods of looking healthy.
      if (isConnectError(err)) this.reportConnectError(worker, detail);
      else this.failure(worker, detail);
    } finally {
      this.checking.delete(worker);
    }
  }

  /** A request reached the worker and got a complete, good answer. */
  reportSuccess(worker: Worker): void {
    worker.everPassed = true;
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
    worker.everPassed = true;
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
    this.onDown?.(worker, detail);
  }
}
