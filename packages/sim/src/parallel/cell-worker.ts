// The worker side of runJobs: given every job and a shared counter, it claims job indexes
// from the counter until none are left (so it never waits for the main thread to hand it
// one), and posts one message per result.
import { parentPort } from 'node:worker_threads';
import { jobRunners, type WorkerBatch } from './pool.ts';

const runners = jobRunners();
parentPort!.on('message', (batch: WorkerBatch) => {
  const run = runners[batch.kind] as (job: unknown) => unknown;
  for (;;) {
    const index = Atomics.add(batch.claim, 0, 1);
    if (index >= batch.jobs.length) return;
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
