// Carries requests through the cluster: asks the policy for a rank, submits to that rank's
// model, turns the model's callbacks into a RequestRecord, and keeps requests that found no
// healthy rank until capacity comes back. Load accounting (the tracker the policy reads)
// moves only through dispatch tickets: opened here, closed here on completion and where the
// cluster evacuates a rank.
import {
  type Dispatcher,
  type DispatchTicket,
  type KvIndexView,
  type LoadTracker,
  NoHealthyRankError,
  type PrefixDigests,
  type RankState,
} from '@kvroute/policy';
import type { Scheduler } from '../engine/event-queue.ts';
import type { RequestRecord } from '../metrics/types.ts';
import type { WorkloadRequest } from '../workloads/types.ts';
import type { Cluster, Flight } from './cluster.ts';

export interface RequestHost {
  /** A new request arrives now. */
  send(req: WorkloadRequest): void;
  /** Requests taken off a rank that went away. */
  redispatch(moved: Flight[]): void;
  /** Retry requests that arrived while no rank was healthy. */
  drainPending(): void;
}

export interface RequestHostOptions {
  q: Scheduler;
  dispatcher: Dispatcher;
  tracker: LoadTracker;
  /** Set once the cluster exists (the cluster's hooks call back into this host). */
  cluster(): Cluster;
  /** A request completed with this record. */
  onDone(record: RequestRecord, req: WorkloadRequest): void;
  /**
   * Router replicas: each has its own dispatcher and load view; request i goes to replica
   * i mod n (a load balancer in front of them). Default: `dispatcher` with `tracker` alone.
   */
  replicas?: readonly { dispatcher: Dispatcher; tracker: LoadTracker }[];
  /** The events-fed cache index the replicas share (index source events or oracle). */
  kvIndex?: KvIndexView;
  /** Prefix digests kept across the simulations of one plan (see SimulateOptions). */
  prefixDigests?: PrefixDigests;
  /**
   * Replicas poll the ranks' load this often (host ms), as the router's --load-poll-interval:
   * a rank reports the requests it holds (running + waiting), the replica keeps what exceeds
   * its own in-flight count then and adds it to its own live count until the next poll. Only
   * request counts, as in the router (no engine reports pending tokens). Replica j polls at
   * j/n of the interval. 0: every decision sees the ranks' counts as they are (a poll with no
   * staleness, the reference). Undefined: never (a replica sees only its own requests).
   */
  loadPollMs?: number;
}

export function createRequestHost(o: RequestHostOptions): RequestHost {
  const { q, dispatcher, tracker } = o;
  const pending: Flight[] = [];
  let attempts = 0;
  let sent = 0;
  const replicas = o.replicas ?? [{ dispatcher, tracker }];
  const poller =
    o.loadPollMs !== undefined && replicas.length > 1
      ? new LoadPolls(q, o.loadPollMs, replicas, () => o.cluster().slots)
      : undefined;

  // Per replica, the cluster tracker's healthChanges when its health was last copied.
  const healthSeen: number[] = replicas.map(() => -1);
  const dispatch = (f: Flight) => {
    let decision: DispatchTicket;
    const index = sent++ % replicas.length;
    const replica = replicas[index] as (typeof replicas)[number];
    if (replica.tracker !== tracker) {
      // A replica's own load view: its in-flight counts, the cluster's ranks and health.
      if (replica.tracker.ranks.length !== tracker.ranks.length) {
        replica.tracker.resize(tracker.ranks.length);
      }
      // Copied only when the cluster's ranks or health changed since this replica's last
      // copy (the load index stamps every change), not on every request.
      const changes = tracker.index?.healthChanges;
      if (changes === undefined || healthSeen[index] !== changes) {
        for (const r of tracker.ranks) replica.tracker.setHealthy(r.rank, r.healthy);
        healthSeen[index] = changes ?? -1;
      }
    }
    poller?.wake();
    const view = poller?.view(index);
    try {
      decision = replica.dispatcher.begin(
        { inputIds: f.inputIds, routingKey: f.req.routingKey, maxNewTokens: f.req.outputTokens },
        replica.tracker,
        // One shape every decision (absent fields are undefined, which the dispatcher reads
        // as absent), instead of a spread per optional field.
        { nowMs: q.now(), kvIndex: o.kvIndex, prefixDigests: o.prefixDigests, view },
      );
    } catch (err) {
      if (err instanceof NoHealthyRankError) {
        pending.push(f);
        return;
      }
      throw err;
    }
    const slot = o.cluster().slots[decision.rank];
    if (slot?.model == null) {
      throw new Error(`policy chose rank ${decision.rank}, which is not running`);
    }
    f.rank = decision.rank;
    f.reason = decision.reason;
    f.attempt = attempts++;
    f.admitMs = -1;
    f.ticket = decision;
    slot.flights.add(f);
    slot.requests++;
    let cachedAtFirst = 0;
    let firstMs = 0;
    slot.model.submit({
      id: f.attempt,
      inputIds: f.inputIds,
      maxNewTokens: f.req.outputTokens,
      outputIds: f.req.outputIds,
      onAdmit: (t) => {
        f.admitMs = t;
      },
      onFirstToken: (t, c) => {
        firstMs = t;
        cachedAtFirst = c;
      },
      onFinish: (t, info) => {
        slot.flights.delete(f);
        f.ticket?.done();
        o.onDone(
          {
            id: f.req.id,
            clientId: f.req.clientId,
            sessionKey: f.req.sessionKey,
            ...(f.req.tenant !== undefined ? { tenant: f.req.tenant } : {}),
            arrivalMs: f.arrivalMs,
            rank: f.rank,
            reason: f.reason,
            inputTokens: f.inputIds.length,
            cachedTokens: cachedAtFirst,
            outputTokens: info.outputTokens,
            queueMs: f.admitMs - f.arrivalMs,
            ttftMs: firstMs - f.arrivalMs,
            endMs: t,
            retries: f.retries,
          },
          f.req,
        );
      },
    });
  };

  return {
    send(req) {
      const inputIds = req.inputIds; // may be built on read (replay): read once
      dispatch({
        req,
        inputIds,
        arrivalMs: q.now(),
        rank: -1,
        reason: '',
        attempt: -1,
        admitMs: -1,
        retries: 0,
        ticket: null,
      });
    },
    redispatch(moved) {
      for (const f of moved) {
        f.retries++;
        dispatch(f);
      }
    },
    drainPending() {
      const waiting = pending.splice(0);
      for (const f of waiting) dispatch(f);
    },
  };
}

/**
 * The replicas' load polls. Each tick is an event, so a replica's correction is exactly as
 * old as its last poll; ticks stop while nothing is in flight (a poll then reads zeros) and
 * resume on the next dispatch at the replica's next tick, so a finished run's queue drains.
 */
class LoadPolls {
  /** Per replica, per rank: requests the rank reported beyond the replica's own, at its last poll. */
  private readonly external: number[][];
  private readonly running: boolean[];

  constructor(
    private readonly q: Scheduler,
    private readonly intervalMs: number,
    private readonly replicas: readonly { tracker: LoadTracker }[],
    private readonly slots: () => readonly { flights: { size: number } }[],
  ) {
    if (!Number.isFinite(intervalMs) || intervalMs < 0) {
      throw new RangeError(`loadPollMs must be a number >= 0, got ${intervalMs}`);
    }
    this.external = replicas.map(() => []);
    this.running = replicas.map(() => false);
  }

  wake(): void {
    if (this.intervalMs === 0) return;
    const now = this.q.now();
    const n = this.replicas.length;
    for (let j = 0; j < n; j++) {
      if (this.running[j]) continue;
      this.running[j] = true;
      const phase = (j * this.intervalMs) / n;
      const k = Math.max(0, Math.ceil((now - phase) / this.intervalMs));
      this.q.at(phase + k * this.intervalMs, () => this.poll(j));
    }
  }

  private poll(j: number): void {
    // Idle: this poll read zeros, and so would every poll until traffic comes back.
    if (this.read(j) > 0) this.q.at(this.q.now() + this.intervalMs, () => this.poll(j));
    else this.running[j] = false;
  }

  /** Replica j's poll: stores each rank's excess over its own count; returns the total reported. */
  private read(j: number): number {
    const slots = this.slots();
    const own = (this.replicas[j] as { tracker: LoadTracker }).tracker.ranks;
    const ext = this.external[j] as number[];
    let busy = 0;
    for (let r = 0; r < slots.length; r++) {
      const reported = slots[r]?.flights.size ?? 0;
      busy += reported;
      ext[r] = Math.max(0, reported - (own[r]?.inFlightRequests ?? 0));
    }
    ext.length = slots.length;
    return busy;
  }

  /** Replica j's rank states: its own in-flight counts plus its last poll's excess. */
  view(j: number): RankState[] | undefined {
    if (this.intervalMs === 0) this.read(j);
    const ext = this.external[j] as number[];
    const own = (this.replicas[j] as { tracker: LoadTracker }).tracker.ranks;
    if (!ext.some((x) => x > 0)) return undefined;
    return own.map((r) => {
      const add = ext[r.rank] ?? 0;
      return add > 0 ? { ...r, inFlightRequests: r.inFlightRequests + add } : r;
    });
  }
}
