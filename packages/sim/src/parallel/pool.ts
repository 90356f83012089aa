// Runs grid cells on every core: this thread and worker_threads take cells in the claim
// order, each from its own contiguous run of it and then from the others' (claims.ts), and
// results come back in job order, so the output does not depend on scheduling. With one
// worker (or one job) everything runs in this thread; every thread runs a cell through the
// same CellContext.
import { existsSync } from 'node:fs';
import { createRequire } from 'node:module';
import { availableParallelism } from 'node:os';
import { pathToFileURL } from 'node:url';
import { Worker } from 'node:worker_threads';
import { CellContext, type CellJob, type CellResult } from './cell.ts';
import { claimNext, claimRuns, closeClaims } from './claims.ts';
import { CompareContext, type CompareJob, type CompareJobResult } from './compare-job.ts';

/** What a worker runs: sweep cells or the policy comparison's simulations. */
export interface JobKinds {
  cell: { job: CellJob; result: CellResult };
  compare: { job: CompareJob; result: CompareJobResult };
}
export type JobKind = keyof JobKinds;

/** The runner of each kind of job, one per thread (it caches plans and profiles). */
export function jobRunners(): {
  [K in JobKind]: (job: JobKinds[K]['job']) => JobKinds[K]['result'];
} {
  const cell = new CellContext();
  const compare = new CompareContext();
  return { cell: (job) => cell.run(job), compare: (job) => compare.run(job) };
}

export interface RunCellsOptions {
  /** Threads running jobs, this one included; default: one per core. 1 runs in this thread. */
  workers?: number;
  /**
   * This thread takes jobs too (default). false leaves them all to worker threads (tests of
   * the thread path, whose jobs and results cross a message channel).
   */
  inThisThread?: boolean;
  /** Called as each cell finishes, with how many have. */
  onDone?(done: number, total: number): void;
  /**
   * The order threads take jobs in (a permutation of the job indexes; default: index order).
   * Each thread starts on its own contiguous run of it, so jobs that share per-thread work
   * belong next to each other. Results still come back in job order, so the output does not
   * depend on it; putting the longest jobs first keeps one thread from running a long job
   * alone at the end.
   */
  order?: readonly number[];
}

const SMALL_GRID = 4;

export function defaultWorkers(): number {
  return Math.max(1, availableParallelism());
}

export function runCells(
  jobs: readonly CellJob[],
  opts: RunCellsOptions = {},
): Promise<CellResult[]> {
  return runJobs('cell', jobs, opts);
}

/** Runs jobs of one kind on worker threads (or here, with one worker); results in job order. */
export async function runJobs<K extends JobKind>(
  kind: K,
  jobs: readonly JobKinds[K]['job'][],
  opts: RunCellsOptions = {},
): Promise<JobKinds[K]['result'][]> {
  // Starting a worker (a thread plus the module graph) costs more than a small cell, so a
  // grid of a few cells runs here unless workers were asked for.
  const workers = Math.min(
    opts.workers ?? (jobs.length < SMALL_GRID ? 1 : defaultWorkers()),
    jobs.length,
  );
  const order = claimOrder(jobs.length, opts.order);
  if (workers <= 1) {
    const run = jobRunners()[kind] as (job: JobKinds[K]['job']) => JobKinds[K]['result'];
    const out: JobKinds[K]['result'][] = new Array(jobs.length);
    for (let k = 0; k < jobs.length; k++) {
      const index = order[k]!;
      out[index] = run(jobs[index]!);
      opts.onDone?.(k + 1, jobs.length);
      // Let a progress bar draw and signals arrive between cells.
      await new Promise((r) => setImmediate(r));
    }
    return out;
  }
  const results: (JobKinds[K]['result'] | undefined)[] = new Array(jobs.length);
  // Every thread claims its next job itself (claims.ts): a worker that waited for this thread
  // to hand it a job sat idle while this thread ran a cell of its own (two threads on a
  // 16-cell replay grid kept 1.56-1.68 cores busy that way, 1.80-1.82 with claiming).
  // This thread is one of the workers: it takes cells while the threads start (a thread has
  // to load the module graph first, which costs several small cells), so N jobs are this
  // thread and N - 1 worker threads; this thread's run is the first.
  const here = opts.inThisThread ?? true;
  const claim = claimRuns(jobs.length, workers);
  let done = 0;
  const pool = Array.from({ length: here ? workers - 1 : workers }, () => startWorker());
  const runHere = jobRunners()[kind] as (job: JobKinds[K]['job']) => JobKinds[K]['result'];
  let settled = false;
  try {
    await new Promise<void>((resolve, reject) => {
      const fail = (err: unknown) => {
        settled = true;
        // No thread claims another job.
        closeClaims(claim);
        reject(err);
      };
      const finished = () => {
        done++;
        opts.onDone?.(done, jobs.length);
        if (done === jobs.length) {
          settled = true;
          resolve();
        }
      };
      const local = () => {
        if (settled) return;
        const k = claimNext(claim, 0);
        if (k < 0) return;
        const index = order[k]!;
        try {
          results[index] = runHere(jobs[index]!);
        } catch (err) {
          fail(err);
          return;
        }
        finished();
        // Between cells, let the threads' results, a progress bar and signals through.
        setImmediate(local);
      };
      for (const [i, w] of pool.entries()) {
        w.on('message', (msg: { index: number; result?: unknown; error?: WorkerError }) => {
          if (settled) return;
          if (msg.error) {
            fail(toError(msg.error));
            return;
          }
          results[msg.index] = msg.result as JobKinds[K]['result'];
          finished();
        });
        w.on('error', fail);
        w.on('exit', (code) => {
          if (done < jobs.length) fail(new Error(`${kind} worker exited with code ${code}`));
        });
        const batch: WorkerBatch = { kind, jobs, order, claim, self: here ? i + 1 : i };
        w.postMessage(batch);
      }
      if (here) setImmediate(local);
    });
  } finally {
    settled = true;
    await Promise.all(pool.map((w) => w.terminate()));
  }
  return results as JobKinds[K]['result'][];
}

/**
 * What a worker is given: every job, the order jobs are taken in, the claim state all threads
 * claim positions in that order from (claims.ts), and which run is its own.
 */
export interface WorkerBatch {
  kind: JobKind;
  jobs: readonly unknown[];
  order: readonly number[];
  claim: Int32Array;
  self: number;
}

/** `order` checked to be a permutation of 0..n-1 (index order when absent). */
function claimOrder(n: number, order: readonly number[] | undefined): readonly number[] {
  if (order === undefined) return Array.from({ length: n }, (_, i) => i);
  const seen = new Uint8Array(n);
  const once = (i: number) => Number.isInteger(i) && i >= 0 && i < n && seen[i]!++ === 0;
  if (order.length !== n || !order.every(once)) {
    throw new RangeError(`runJobs: order must be a permutation of 0..${n - 1}`);
  }
  return order;
}

interface WorkerError {
  message: string;
  name: string;
  code?: unknown;
  stack?: string;
}

/** Rebuilt with its name and code, so the CLI still tells bad input (exit 2) from a bug. */
function toError(e: WorkerError): Error {
  const err = new Error(e.message) as Error & { code?: unknown };
  err.name = e.name;
  if (e.code !== undefined) err.code = e.code;
  if (e.stack) err.stack = e.stack;
  return err;
}

function startWorker(): Worker {
  const here = import.meta.url;
  if (!here.endsWith('.ts')) return new Worker(new URL('./cell-worker.js', here));
  // Running from TypeScript source (tsx, vitest): a worker thread starts without the
  // parent's loader, so register tsx's there before loading the worker module.
  const tsxApi = tsxEsmApi(here);
  const entry = new URL('./cell-worker.ts', here).href;
  // Workspace packages resolve to their TypeScript source too (the `@kvroute/source` export
  // condition, as the bins and tests use), never to a possibly stale dist/.
  const hook =
    'export async function resolve(s, c, next) {' +
    " return next(s, { ...c, conditions: ['@kvroute/source', ...c.conditions] }); }";
  const code = [
    `const { register } = await import('node:module');`,
    `const tsx = await import(${JSON.stringify(tsxApi)});`,
    `(tsx.register ?? tsx.default.register)();`,
    `register(${JSON.stringify(`data:text/javascript,${encodeURIComponent(hook)}`)});`,
    `await import(${JSON.stringify(entry)});`,
  ].join('\n');
  return new Worker(new URL(`data:text/javascript,${encodeURIComponent(code)}`));
}

/** tsx's ESM register API, resolved from this file (the ESM entry: its CJS twin cannot
 * register ESM hooks when imported). */
function tsxEsmApi(from: string): string {
  const resolveEsm = (import.meta as { resolve?: (s: string) => string }).resolve;
  if (typeof resolveEsm === 'function') return resolveEsm('tsx/esm/api');
  const cjs = createRequire(from).resolve('tsx/esm/api');
  const esm = cjs.replace(/\.cjs$/, '.mjs');
  return pathToFileURL(existsSync(esm) ? esm : cjs).href;
}
