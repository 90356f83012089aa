// The part of a run every host (colocated, PD) shares around its own dispatch: requests go to
// `send` when the arrivals say so, each completion is recorded in one place (requests in the
// system for Little's L, progress, the arrivals' next sends), and once the queue runs dry the
// requests sent and never completed are counted as failed.
import type { EventQueue } from '../engine/event-queue.ts';
import type { RequestRecord } from '../metrics/types.ts';
import type { WorkloadPlan, WorkloadRequest } from '../workloads/types.ts';
import { progressReporter, scheduleArrivals } from './arrivals.ts';

export interface DriveOptions {
  /** Client concurrency cap (benchmark clients' --max-concurrency); default none. */
  maxConcurrency?: number | undefined;
  onProgress?: ((fraction: number) => void) | undefined;
}

/** Where a driver keeps completed requests' records: an array, or columns (RecordColumns). */
export interface RecordSink<R> {
  readonly length: number;
  push(record: R): void;
}

export interface RequestDriver<R extends RequestRecord, S extends RecordSink<R> = R[]> {
  readonly records: S;
  /** A request finished: keep its record, and let the arrivals send what waited on it. */
  complete(req: WorkloadRequest, record: R): void;
  /** Runs the queue dry; returns the failed count. */
  run(): number;
  /** Requests in the system (sent, not completed), time-averaged over the run. */
  meanInSystem(): number;
}

/** Requests in the system (sent, not completed), integrated over time. */
class Occupancy {
  private n = 0;
  private last = 0;
  private area = 0;
  private first = Number.NaN;
  constructor(private readonly now: () => number) {}
  change(delta: number): void {
    const t = this.now();
    if (Number.isNaN(this.first)) this.first = t;
    this.area += this.n * (t - this.last);
    this.last = t;
    this.n += delta;
  }
  /** Time-average number in system over [first arrival, last change]. */
  mean(): number {
    const span = this.last - this.first;
    return span > 0 ? this.area / span : 0;
  }
}

/**
 * Schedules the plan's arrivals on `q` now (so a host schedules its cluster events after, as
 * before), sending each request to `send`.
 */
export function driveRequests<R extends RequestRecord, S extends RecordSink<R> = R[]>(
  plan: WorkloadPlan,
  q: EventQueue,
  send: (req: WorkloadRequest) => void,
  opts: DriveOptions,
  records: S = [] as unknown as S,
): RequestDriver<R, S> {
  const occupancy = new Occupancy(() => q.now());
  const arrivals = scheduleArrivals(
    plan,
    q,
    (req) => {
      occupancy.change(1);
      send(req);
    },
    { maxConcurrency: opts.maxConcurrency },
  );
  const progress = progressReporter(plan, q, arrivals, () => records.length, opts.onProgress);
  return {
    records,
    complete(req, record) {
      records.push(record);
      occupancy.change(-1);
      progress();
      arrivals.complete(req, record.endMs);
    },
    run() {
      q.run();
      // Closed-loop requests never sent (past durationMs) are not failures; sent (or held
      // back by the concurrency cap) and unfinished are, and so are open-loop requests
      // stranded behind one that never completed.
      const failed = arrivals.issued + arrivals.held + arrivals.stranded - records.length;
      progress();
      return failed;
    },
    meanInSystem: () => occupancy.mean(),
  };
}
