// The worker side of runCells: runs the jobs it is handed, one message per result.
import { parentPort } from 'node:worker_threads';
import { CellContext, type CellJob } from './cell.ts';

const context = new CellContext();
parentPort!.on('message', (msg: { index: number; job: CellJob }) => {
  try {
    parentPort!.postMessage({ index: msg.index, result: context.run(msg.job) });
  } catch (err) {
    const e = err as Error & { code?: unknown };
    parentPort!.postMessage({
      index: msg.index,
      error: { message: e.message, name: e.name, code: e.code, stack: e.stack },
    });
  }
});
