// The router's ranks: which (worker URL, DP rank) each policy rank index stands for, whether
// it is routable, and its load. Topologies:
//   --worker-urls A B C             three workers, one rank each (replicas, or vLLM)
//   --dp-aware --worker-urls A      one SGLang DP-attention server, dp_size ranks (A, 0..n-1)
//   --dp-aware --worker-urls A B    ranks (A, 0..n-1), then (B, 0..m-1)
// A removed worker leaves tombstone slots (never healthy) instead of shifting later ranks
// down: rank indexes stay stable, so affinity entries and prefix hashes for the other ranks
// survive an admin removal; a later add reuses tombstones first.
import { createLoadTracker, type LoadTracker, type RankState } from '@kvroute/policy';

export interface Worker {
  /** Base URL without a trailing slash. */
  readonly url: string;
  /** `http://host:port` of url, and its path (empty or `/prefix`), split once for the proxy. */
  readonly origin: string;
  readonly basePath: string;
  /** Ranks this worker contributes: its dp_size with --dp-aware, else 1. */
  readonly dpSize: number;
  /** Whether requests to it carry routed_dp_rank (its ranks are DP ranks inside one server). */
  readonly dpAware: boolean;
  /** Global rank indexes of this worker's ranks, in DP rank order. */
  readonly ranks: number[];
  healthy: boolean;
  /** Ejected by outlier detection (outlier.ts): healthy or not, the policy does not see it. */
  ejected: boolean;
  /** Whether any check of this worker has passed since it was added (readiness). */
  everPassed: boolean;
  removed: boolean;
  consecutiveFailures: number;
  consecutiveSuccesses: number;
  lastError?: string;
  /** Which load endpoint answered last time (--load-poll-interval). */
  loadSource?: 'loads' | 'metrics' | 'none';
  /** The model it serves, as its /v1/models says (the metrics' `model` label). */
  model?: string;
}

export interface RankSlot {
  readonly rank: number;
  worker: Worker;
  /** The DP rank inside the worker, sent as routed_dp_rank; undefined for plain replicas. */
  dpRank?: number;
  /** Requests the worker reports beyond the router's own in-flight count (other clients). */
  externalRequests: number;
}

export interface RankInfo {
  rank: number;
  url: string;
  dpRank: number | null;
  /** Routable: healthy and not ejected. */
  healthy: boolean;
  ejected: boolean;
  removed: boolean;
  inFlightRequests: number;
  inFlightTokens: number;
  externalRequests: number;
  consecutiveFailures: number;
  lastError: string | null;
}

export class RankTable {
  readonly tracker: LoadTracker = createLoadTracker(0);
  private readonly slots: RankSlot[] = [];
  private readonly byUrl = new Map<string, Worker>();
  private anyExternal = false;
  /** Called as a worker's ranks are added or removed, before anything can route to them. */
  onChange: (() => void) | undefined;

  get size(): number {
    return this.slots.length;
  }

  slot(rank: number): RankSlot | undefined {
    return this.slots[rank];
  }

  workers(): Worker[] {
    return [...this.byUrl.values()];
  }

  worker(url: string): Worker | undefined {
    return this.byUrl.get(url);
  }

  /** Adds a worker's ranks; dpSize must already be known (see topology.ts). */
  addWorker(url: string, dpSize: number, dpAware: boolean): Worker {
    if (this.byUrl.has(url)) throw new Error(`worker ${url} is already in the rank table`);
    const parsed = new URL(url);
    const worker: Worker = {
      url,
      origin: parsed.origin,
      basePath: parsed.pathname.replace(/\/+$/, ''),
      dpSize,
      dpAware,
      ranks: [],
      healthy: true,
      ejected: false,
      everPassed: false,
      removed: false,
      consecutiveFailures: 0,
      consecutiveSuccesses: 0,
    };
    const free = this.slots.filter((s) => s.worker.removed);
    for (let dp = 0; dp < dpSize; dp++) {
      let slot = free.shift();
      if (slot) {
        slot.worker = worker;
        slot.externalRequests = 0;
      } else {
        slot = { rank: this.slots.length, worker, externalRequests: 0 };
        this.slots.push(slot);
        this.tracker.resize(this.slots.length);
      }
      if (dpAware) slot.dpRank = dp;
      else delete slot.dpRank;
      worker.ranks.push(slot.rank);
      this.tracker.setHealthy(slot.rank, true);
    }
    this.byUrl.set(url, worker);
    this.onChange?.();
    return worker;
  }

  removeWorker(url: string): Worker | undefined {
    const worker = this.byUrl.get(url);
    if (!worker) return undefined;
    worker.removed = true;
    this.byUrl.delete(url);
    for (const r of worker.ranks) this.tracker.setHealthy(r, false);
    this.onChange?.();
    return worker;
  }

  setHealthy(worker: Worker, healthy: boolean): void {
    worker.healthy = healthy;
    this.refresh(worker);
  }

  /** Re-derives whether the policy may choose the worker's ranks: healthy and not ejected. */
  refresh(worker: Worker): void {
    if (worker.removed) return;
    const routable = worker.healthy && !worker.ejected;
    for (const r of worker.ranks) this.tracker.setHealthy(r, routable);
  }

  setExternal(rank: number, requests: number): void {
    const slot = this.slots[rank];
    if (!slot) return;
    slot.externalRequests = Math.max(0, Math.round(requests));
    this.anyExternal = this.slots.some((s) => s.externalRequests > 0);
  }

  hasHealthy(exclude?: ReadonlySet<number>): boolean {
    return this.tracker.ranks.some((r) => r.healthy && !exclude?.has(r.rank));
  }

  /**
   * The rank states handed to the policy. The common case (no exclusions, no external load)
   * passes the tracker's own array, allocation-free; retries see the failed ranks as down,
   * and polled load is added on top of the router's in-flight counts.
   */
  view(exclude?: ReadonlySet<number>): readonly RankState[] {
    const ranks = this.tracker.ranks;
    if ((!exclude || exclude.size === 0) && !this.anyExternal) return ranks;
    return ranks.map((r) => {
      const ext = this.slots[r.rank]?.externalRequests ?? 0;
      const excluded = exclude?.has(r.rank) ?? false;
      if (!excluded && ext === 0) return r;
      return {
        ...r,
        healthy: r.healthy && !excluded,
        inFlightRequests: r.inFlightRequests + ext,
      };
    });
  }

  info(): RankInfo[] {
    return this.slots.map((s) => {
      const state = this.tracker.ranks[s.rank];
      return {
        rank: s.rank,
        url: s.worker.url,
        dpRank: s.dpRank ?? null,
        healthy: !s.worker.removed && s.worker.healthy && !s.worker.ejected,
        ejected: s.worker.ejected,
        removed: s.worker.removed,
        inFlightRequests: state?.inFlightRequests ?? 0,
        inFlightTokens: state?.inFlightTokens ?? 0,
        externalRequests: s.externalRequests,
        consecutiveFailures: s.worker.consecutiveFailures,
        lastError: s.worker.lastError ?? null,
      };
    });
  }
}
