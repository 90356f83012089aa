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
}

export function createRequestHost(o: RequestHostOptions): RequestHost {
  const { q, dispatcher, tracker } = o;
  const pending: Flight[] = [];
  let attempts = 0;
  let sent = 0;
  const replicas = o.replicas ?? [{ dispatcher, tracker }];

  const dispatch = (f: Flight) => {
    let decision: DispatchTicket;
    const replica = replicas[sent++ % replicas.length] as (typeof replicas)[number];
    if (replica.tracker !== tracker) {
      // A replica's own load view: its in-flight counts, the cluster's ranks and health.
      if (replica.tracker.ranks.length !== tracker.ranks.length) {
        replica.tracker.resize(tracker.ranks.length);
      }
      for (const r of tracker.ranks) replica.tracker.setHealthy(r.rank, r.healthy);
    }
    try {
      decision = replica.dispatcher.begin(
        { inputIds: f.inputIds, routingKey: f.req.routingKey, maxNewTokens: f.req.outputTokens },
        replica.tracker,
        o.kvIndex ? { nowMs: q.now(), kvIndex: o.kvIndex } : { nowMs: q.now() },
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
