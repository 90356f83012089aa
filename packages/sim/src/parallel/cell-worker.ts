// The worker side of runJobs: given every job, their order and a shared counter, it claims
// positions in that order from the counter until none are left (so it never waits for the
// main thread to hand it one), and posts one message per result.
import { parentPort } from 'node:worker_threads';
import { jobRunners, type WorkerBatch } from './pool.ts';

const runners = jobRunners();
parentPort!.on('message', (batch: WorkerBatch) => {
  const run = runners[batch.kind] as (job: unknown) => unknown;
  for (;;) {
    const k = Atomics.add(batch.claim, 0, 1);
    if (k >= batch.jobs.length) return;
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
