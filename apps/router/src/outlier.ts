// Outlier ejection, per worker, from the outcomes of real requests (Envoy's outlier detection,
// SGLang router's circuit breaker). A worker whose last `consecutiveFailures` requests all failed
// at the gateway (connect or socket error, 5xx, timeout, bad body, a stream cut mid-way) is
// ejected, i.e. no longer offered to the policy, for baseEjectionMs x n, capped at
// maxEjectionMs, where n counts its ejections (decaying by one per base period it stays clean).
// At most maxEjectedPercent of the workers are ejected at once, and never the last routable one:
// a fleet that fails everywhere keeps serving what it can rather than answering 503 to all.
// When the time is up the worker is probed (half-open): its health endpoint (and the
// generation check, when on) must answer before it takes traffic again, and then its first
// request decides: a failure ejects it again at once, a success closes the circuit.
//
// Health (health.ts) is the other, independent signal: active checks and refused connections
// mark a worker down or up. The policy sees a worker only when it is healthy and not ejected.
import type { RankTable, Worker } from './rank-table.ts';

export interface OutlierConfig {
  /** Consecutive gateway failures that eject a worker; 0 turns ejection off. */
  consecutiveFailures: number;
  baseEjectionMs: number;
  maxEjectionMs: number;
  /** Largest share of workers ejected at once, in percent (the last routable one never is). */
  maxEjectedPercent: number;
}

export interface OutlierLog {
  warn(obj: object, msg: string): void;
  info(obj: object, msg: string): void;
}

/** Per-worker ejection state, kept on the Worker so admin and metrics can show it. */
export interface EjectionState {
  ejected: boolean;
  /** Ejections so far, the multiplier of the next one (decays while the worker stays clean). */
  count: number;
  until: number;
  /** Readmitted after an ejection and not yet proven by a successful request. */
  trial: boolean;
  consecutive: number;
  lastEjectedAt: number;
  timer?: NodeJS.Timeout;
}

export class OutlierDetector {
  private readonly state = new WeakMap<Worker, EjectionState>();
  /** Called when a worker is ejected: attempts on it that sent nothing yet move elsewhere. */
  onEject: ((worker: Worker, reason: string) => void) | undefined;
  ejectionsTotal = 0;

  constructor(
    private readonly table: RankTable,
    private readonly config: OutlierConfig,
    /** Half-open probe: resolves true when the worker answered its checks. */
    private readonly probe: (worker: Worker) => Promise<boolean>,
    private readonly log: OutlierLog,
    private readonly now: () => number = Date.now,
  ) {}

  of(worker: Worker): EjectionState {
    let s = this.state.get(worker);
    if (!s) {
      s = { ejected: false, count: 0, until: 0, trial: false, consecutive: 0, lastEjectedAt: 0 };
      this.state.set(worker, s);
    }
    return s;
  }

  success(worker: Worker): void {
    const s = this.state.get(worker);
    if (!s) return;
    s.consecutive = 0;
    s.trial = false;
  }

  failure(worker: Worker, detail: string): void {
    const s = this.of(worker);
    s.consecutive++;
    if (s.ejected || this.config.consecutiveFailures <= 0 || worker.removed) return;
    if (s.trial || s.consecutive >= this.config.consecutiveFailures) this.eject(worker, s, detail);
  }

  /** Stops every probe timer (router close). */
  stop(): void {
    for (const w of this.table.workers()) {
      const s = this.state.get(w);
      if (s?.timer) clearTimeout(s.timer);
    }
  }

  private eject(worker: Worker, s: EjectionState, detail: string): void {
    const workers = this.table.workers().filter((w) => !w.removed);
    const ejected = workers.filter((w) => this.state.get(w)?.ejected).length;
    const routable = workers.filter((w) => w.healthy && !this.state.get(w)?.ejected).length;
    const cap = Math.floor((workers.length * this.config.maxEjectedPercent) / 100);
    if (ejected + 1 > Math.max(1, cap) || routable <= 1) {
      this.log.warn(
        { worker: worker.url, reason: detail, ejected, cap },
        'worker keeps failing but is not ejected: the ejection cap is reached',
      );
      return;
    }
    const now = this.now();
    const base = this.config.baseEjectionMs;
    // The multiplier decays by one per base period the worker stayed clean since its last one.
    if (s.count > 0 && base > 0) {
      const clean = now - s.until;
      s.count = Math.max(0, s.count - Math.floor(clean / base));
    }
    s.count++;
    const ms = Math.min(this.config.maxEjectionMs, base * s.count);
    s.ejected = true;
    s.trial = false;
    s.until = now + ms;
    s.lastEjectedAt = now;
    this.ejectionsTotal++;
    worker.ejected = true;
    this.table.refresh(worker);
    this.log.warn(
      { worker: worker.url, reason: detail, ejection_ms: ms, ejections: s.count },
      'worker ejected',
    );
    this.onEject?.(worker, detail);
    s.timer = setTimeout(() => void this.tryReadmit(worker, s), ms);
    s.timer.unref();
  }

  private async tryReadmit(worker: Worker, s: EjectionState): Promise<void> {
    s.timer = undefined;
    if (worker.removed) return;
    let ok = false;
    try {
      ok = await this.probe(worker);
    } catch {
      ok = false;
    }
    if (worker.removed) return;
    if (!ok) {
      // Still failing its checks: eject again for longer, without waiting for traffic.
      s.ejected = false;
      worker.ejected = false;
      s.trial = true;
      this.failure(worker, 'half-open probe failed');
      if (!s.ejected) {
        // The cap kept it in: it is routable again, on trial.
        this.table.refresh(worker);
      }
      return;
    }
    s.ejected = false;
    s.trial = true;
    s.consecutive = 0;
    worker.ejected = false;
    this.table.refresh(worker);
    this.log.info({ worker: worker.url }, 'worker readmitted after ejection (on trial)');
  }
}
