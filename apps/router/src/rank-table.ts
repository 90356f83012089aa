// The router's ranks: which (worker URL, DP rank) each policy rank index stands for, whether
// it is routable, and its load. Topologies:
//   --worker-urls A B C             three workers, one rank each (replicas, or vLLM)
//   --dp-aware --worker-urls A      one SGLang DP-attention server, dp_size ranks (A, 0..n-1)
//   --dp-aware --worker-urls A B    ranks (A, 0..n-1), then (B, 0..m-1)
// A removed worker leaves tombstone slots (never healthy) instead of shifting later ranks
// down: rank indexes stay stable, so affinity entries and prefix hashes for the other ranks
// survive an admin removal; a later add reuses tombstones first.
//
// That numbering depends on the order of adds and removes each router has seen, which is
// the same on every replica only for a fixed --worker-urls list. With service discovery every
// replica sees its own pod churn, so the table is `ordered` instead: ranks follow the workers
// sorted by URL (code-unit order, not locale), a DP server's ranks together in DP rank order,
// with no tombstones. The numbering is then a function of the current worker set alone, and
// every replica that sees the same pods gives each the same ranks, so the hash methods send a
// prefix to the same worker from all of them. The price: an add or remove renumbers the
// ranks after the changed worker's place, moving their share of hashed prefixes once. What
// is counted or learned per rank follows its worker: in-flight load (open tickets release it
// at the new index) and, through onRenumber, the policy's learned state such as cache_aware's
// prefix index and routing-key pins. When a new worker takes a removed one's tombstone in an
// unordered table, it starts there idle and empty.
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
  /**
   * The pod service discovery found it as (`namespace/name`): the metrics' `worker` label on
   * the main listener, where ranks of an ordered table renumber as pods come and go.
   */
  pod?: string;
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
  /**
   * Called when existing ranks changed index or occupant, before onChange: the rank that
   * stood at index `old` now stands at `moves[old]`, or its worker left (-1); indexes no move
   * reaches are new workers' ranks. Not called when ranks were only appended.
   */
  onRenumber: ((moves: readonly number[], numRanks: number) => void) | undefined;
  /**
   * Ranks numbered by the sorted worker URLs (see the header) instead of by history. Set
   * before the first add (service discovery does).
   */
  ordered = false;

  get size(): number {
    return this.slots.length;
  }

  slot(rank: number): RankSlot | undefined {
    return this.slots[rank];
  }

  /**
   * Each rank's stable name for the policy's hash methods (Dispatcher.nameRanks): its
   * worker's URL without user information, `#`, its DP rank (0 for a plain replica); null
   * for a removed worker's tombstone.
   */
  rankNames(): (string | null)[] {
    return this.slots.map((s) =>
      s.worker.removed ? null : `${s.worker.origin}${s.worker.basePath}#${s.dpRank ?? 0}`,
    );
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
    if (this.ordered) {
      this.byUrl.set(url, worker);
      this.layout();
      this.onChange?.();
      return worker;
    }
    const free = this.slots.filter((s) => s.worker.removed);
    if (free.length > 0) {
      // Tombstones the new worker takes over: the load still counted there (requests of the
      // removed worker, released later) and what was learned there were its predecessor's.
      const moves = this.slots.map((s) => s.rank);
      for (const s of free.slice(0, dpSize)) moves[s.rank] = -1;
      this.tracker.remap(moves, this.slots.length);
      this.onRenumber?.(moves, this.slots.length + Math.max(0, dpSize - free.length));
    }
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
    if (this.ordered) this.layout();
    else for (const r of worker.ranks) this.tracker.setHealthy(r, false);
    this.onChange?.();
    return worker;
  }

  /**
   * Ordered tables: lays the live workers out by URL. A position whose occupant changes gets
   * a new slot object (code still holding the old one sees the worker it was given), and
   * polled external load moves with its worker. O(R) per add or remove, nothing per request.
   */
  private layout(): void {
    const live = [...this.byUrl.values()].sort((a, b) =>
      a.url < b.url ? -1 : a.url > b.url ? 1 : 0,
    );
    // Where each current rank was: its worker and DP rank, to tell the policy what moved.
    const before = this.slots.map((s) => ({ worker: s.worker, dp: s.dpRank ?? 0 }));
    const external = new Map<string, number>();
    for (const s of this.slots)
      external.set(`${s.worker.url}#${s.dpRank ?? 0}`, s.externalRequests);
    let rank = 0;
    for (const worker of live) {
      worker.ranks.length = 0;
      for (let dp = 0; dp < worker.dpSize; dp++, rank++) {
        const dpRank = worker.dpAware ? dp : undefined;
        const old = this.slots[rank];
        if (!old || old.worker !== worker || old.dpRank !== dpRank) {
          const slot: RankSlot = {
            rank,
            worker,
            externalRequests: external.get(`${worker.url}#${dp}`) ?? 0,
          };
          if (dpRank !== undefined) slot.dpRank = dpRank;
          this.slots[rank] = slot;
        }
        worker.ranks.push(rank);
      }
    }
    this.slots.length = rank;
    const moves = before.map(({ worker, dp }) => (worker.removed ? -1 : (worker.ranks[dp] ?? -1)));
    const renumbered = moves.some((to, old) => to !== old);
    // In-flight load moves with its worker (open tickets release it there), as does what the
    // policy learned (onRenumber); health is then set for each index's occupant.
    if (renumbered) this.tracker.remap(moves, rank);
    else this.tracker.resize(rank);
    for (const worker of live) this.refresh(worker);
    this.anyExternal = this.slots.some((s) => s.externalRequests > 0);
    if (renumbered) this.onRenumber?.(moves, rank);
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
