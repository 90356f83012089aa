// The simulated cluster: one slot per rank index, each holding a live RankModel or nothing
// (a dead rank), plus the requests in flight on it. Cluster events kill, revive and add
// ranks; requests in flight on a rank that goes away are handed back to the caller to be
// re-dispatched; a rank that (re)joins starts cold.
import type { DispatchTicket, LoadTracker } from '@kvroute/policy';
import type { CostModel } from '../cost/cost-model.ts';
import type { Scheduler } from '../engine/event-queue.ts';
import { KeptSet } from '../engine/kept-tables.ts';
import { DpAttentionGroup } from '../entities/dp-attention-group.ts';
import {
  RankModel,
  type RankModelOptions,
  type RankStats,
  type StepRecord,
} from '../entities/rank.ts';
import { round3 } from '../metrics/summary.ts';
import type { RankSummary } from '../metrics/types.ts';
import type { ClusterEvent, WorkloadRequest } from '../workloads/types.ts';

/** Rank-model settings a run may override (the profile gives the rest). */
export type RankOverrides = Partial<
  Pick<
    RankModelOptions,
    | 'kvCapacityTokens'
    | 'chunkedPrefillSize'
    | 'pageSize'
    | 'keys'
    | 'schedulePolicy'
    | 'coalesceDecode'
    | 'maxRunningRequests'
    | 'admission'
    | 'hostKv'
  >
> & {
  /** Lockstep ranks (DP attention); defaults to the profile's dpAttention. */
  dpAttention?: boolean;
};

/** One request between its arrival and its completion, across re-dispatches. */
export interface Flight {
  req: WorkloadRequest;
  inputIds: Uint32Array;
  arrivalMs: number;
  rank: number;
  reason: string;
  /** Id of the current attempt on its rank (unique over the run). */
  attempt: number;
  admitMs: number;
  retries: number;
  /** The open dispatch (holds the rank's load), or null before the first and between retries. */
  ticket: DispatchTicket | null;
}

export interface RankSlot {
  model: RankModel | null;
  requests: number;
  /** Counters of models this slot had before (restarts), added to the live one's. */
  past: RankStats | null;
  flights: KeptSet<Flight>;
}

function addStats(a: RankStats | null, b: RankStats): RankStats {
  if (a === null) return { ...b };
  const out = { ...a };
  for (const k of Object.keys(b) as (keyof RankStats)[]) out[k] += b[k];
  return out;
}

export function checkRanks(n: unknown, what: string): number {
  if (typeof n !== 'number' || !Number.isInteger(n) || n < 1) {
    throw new RangeError(`${what} must be an integer >= 1, got ${JSON.stringify(n)}`);
  }
  return n;
}

export interface ClusterHooks {
  /** Requests taken off a rank that went away, to be dispatched again. */
  redispatch(moved: Flight[]): void;
  /** Capacity came back (a rank joined or revived): retry what found no healthy rank. */
  drainPending(): void;
  onStep?(step: StepRecord): void;
  /** Every rank model as it is created (at start, on join or revival). */
  onModel?(rank: number, model: RankModel): void;
}

export class Cluster {
  readonly slots: RankSlot[] = [];
  private readonly group: DpAttentionGroup | null;
  private readonly rankOptions: Omit<RankOverrides, 'dpAttention'>;

  constructor(
    private readonly scheduler: Scheduler,
    private readonly profile: CostModel,
    overrides: RankOverrides,
    ranks: number,
    private readonly tracker: LoadTracker,
    private readonly hooks: ClusterHooks,
  ) {
    const { dpAttention = profile.dpAttention === true, ...rankOptions } = overrides;
    this.rankOptions = rankOptions;
    this.group = dpAttention ? new DpAttentionGroup(scheduler) : null;
    for (let i = 0; i < ranks; i++) this.addSlot();
  }

  private newModel(rank: number): RankModel {
    const opts = {
      ...this.rankOptions,
      rank,
      profile: this.profile,
      ...(this.hooks.onStep ? { onStep: this.hooks.onStep } : {}),
    };
    const model =
      this.group !== null
        ? this.group.add(opts)
        : new RankModel({ ...opts, scheduler: this.scheduler });
    this.hooks.onModel?.(rank, model);
    return model;
  }

  private addSlot(): void {
    const rank = this.slots.length;
    this.slots.push({
      model: this.newModel(rank),
      requests: 0,
      past: null,
      flights: new KeptSet(),
    });
  }

  /** Takes a rank's model away; returns the requests that were in flight on it. */
  private evacuate(slot: RankSlot): Flight[] {
    const model = slot.model;
    if (model === null) return [];
    slot.past = addStats(slot.past, model.stats());
    slot.model = null;
    this.group?.remove(model);
    const moved = slot.flights.drain();
    for (const f of moved) {
      model.abort(f.attempt);
      f.ticket?.done('aborted');
    }
    return moved;
  }

  apply(e: ClusterEvent): void {
    // The router's business (simulate.ts switches the dispatchers), not the ranks'.
    if (e.kind === 'policy-switch') return;
    const slots = this.slots;
    if (e.kind === 'set-ranks') {
      const n = checkRanks(e.ranks, `set-ranks event at ${e.atMs} ms: ranks`);
      if (n > slots.length) {
        this.tracker.resize(n);
        while (slots.length < n) this.addSlot();
        this.hooks.drainPending();
      } else {
        const removed = slots.splice(n);
        this.tracker.resize(n);
        const moved: Flight[] = [];
        for (const s of removed) moved.push(...this.evacuate(s));
        this.hooks.redispatch(moved);
      }
      return;
    }
    const r = e.rank;
    if (typeof r !== 'number' || !Number.isInteger(r) || r < 0 || r >= slots.length) {
      throw new RangeError(
        `${e.kind} event at ${e.atMs} ms: rank must be an integer in [0, ${slots.length}), got ${JSON.stringify(r)}`,
      );
    }
    const slot = slots[r]!;
    if (e.kind === 'rank-down') {
      if (slot.model === null) return;
      this.tracker.setHealthy(r, false);
      this.hooks.redispatch(this.evacuate(slot));
    } else if (e.kind === 'rank-up') {
      if (slot.model !== null) return;
      slot.model = this.newModel(r);
      this.tracker.setHealthy(r, true);
      this.hooks.drainPending();
    } else {
      throw new RangeError(`unknown cluster event kind '${String((e as ClusterEvent).kind)}'`);
    }
  }

  /** Schedules the plan's cluster events, in time order. */
  schedule(events: readonly ClusterEvent[]): void {
    const sorted = [...events].sort((a, b) => a.atMs - b.atMs);
    for (const e of sorted) this.scheduler.at(e.atMs, () => this.apply(e));
  }

  /** Per-rank counters, restarts included. */
  summaries(): { perRank: RankSummary[]; evictedNodes: number } {
    const perRank: RankSummary[] = [];
    let evictedNodes = 0;
    this.slots.forEach((slot, rank) => {
      let st = slot.past;
      if (slot.model) st = addStats(st, slot.model.stats());
      perRank.push({
        rank,
        requests: slot.requests,
        prefillTokens: st?.prefillTokens ?? 0,
        cachedTokens: st?.cachedTokens ?? 0,
        prefillBusyMs: round3(st?.prefillBusyMs ?? 0),
        decodeBusyMs: round3(st?.decodeBusyMs ?? 0),
        evictedTokens: st?.evictedTokens ?? 0,
      });
      evictedNodes += st?.evictedNodes ?? 0;
    });
    return { perRank, evictedNodes };
  }
}
