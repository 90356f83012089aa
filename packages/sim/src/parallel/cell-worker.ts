// The worker side of runJobs: given every job, their order and the shared claim state, it
// claims positions in that order (its own run first, claims.ts) until none are left, so it
// never waits for the main thread to hand it one, and posts one message per result.
import { parentPort } from 'node:worker_threads';
import { claimNext } from './claims.ts';
import { jobRunners, type WorkerBatch } from './pool.ts';

const runners = jobRunners();
parentPort!.on('message', (batch: WorkerBatch) => {
  const run = runners[batch.kind] as (job: unknown) => unknown;
  for (;;) {
    const k = claimNext(batch.claim, batch.self);
    if (k < 0) return;
    const index = batch.order[k]!;
    try {
      parentPort!.postMessage({ index, result: run(batch.jobs[index]) });
    } catch (err) {
      const e = err as Error & { code?: unknown };
      parentPort!.postMessage({
        index,
        error: { message: e.message, name: e.name, code: e.code, stack: e.stack },
      });
      return;
    }
  }
});
