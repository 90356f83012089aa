// The worker side of runJobs: runs the jobs it is handed (sweep cells or comparison runs),
// one message per result.
import { parentPort } from 'node:worker_threads';
import { type JobKind, jobRunners } from './pool.ts';

const runners = jobRunners();
parentPort!.on('message', (msg: { index: number; kind: JobKind; job: never }) => {
  try {
    parentPort!.postMessage({ index: msg.index, result: runners[msg.kind](msg.job) });
  } catch (err) {
    const e = err as Error & { code?: unknown };
    parentPort!.postMessage({
      index: msg.index,
      error: { message: e.message, name: e.name, code: e.code, stack: e.stack },
    });
  }
});
