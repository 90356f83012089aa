// Sweeps run their cells on worker threads and can be split into shards run anywhere: the
// results must be the bytes one serial run writes.
import { mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { oddMethodsFirst } from '../src/cli/simulate.ts';
import type { CellJob } from '../src/parallel/cell.ts';
import { claimNext, claimRuns, closeClaims } from '../src/parallel/claims.ts';
import { runCells } from '../src/parallel/pool.ts';
import { runSimCli } from './helpers/cli.ts';

const dir = mkdtempSync(join(tmpdir(), 'kvroute-sim-shards-'));

const cli = (args: string[]) => runSimCli(args, dir);

const SWEEP = [
  'sweep',
  '--scenario',
  'seed-concurrent',
  '--ranks',
  '4',
  '--set',
  'requestsPerAgent=3',
  '--window',
  '64,256',
  '--prefix-length',
  '512,2048',
];
const read = (f: string) => readFileSync(join(dir, f), 'utf8');

describe('sweep on worker threads and in shards', () => {
  it('gives the same bytes serially, on 2 workers, and as 3 merged shards', async () => {
    expect((await cli([...SWEEP, '--jobs', '1', '--json', 'serial.json'])).code).toBe(0);
    const serialText = (await cli([...SWEEP, '--jobs', '1'])).stdout;
    expect(serialText).toContain('chosen');
    expect((await cli([...SWEEP, '--jobs', '2', '--json', 'parallel.json'])).code).toBe(0);
    expect(read('parallel.json')).toBe(read('serial.json'));

    for (const k of [3, 1, 2]) {
      const r = await cli([...SWEEP, '--jobs', '1', '--shard', `${k}/3`, '--json', `s${k}.json`]);
      expect(r.code, r.stderr).toBe(0);
    }
    const merged = await cli(['merge', 's2.json', 's3.json', 's1.json', '--json', 'merged.json']);
    expect(merged.code, merged.stderr).toBe(0);
    expect(read('merged.json')).toBe(read('serial.json'));
    expect(merged.stdout).toBe(serialText);
  }, 120_000);

  it('does the same over several methods, any option axes and load multipliers', async () => {
    const multi = [
      ...SWEEP.slice(0, -4),
      '--policy',
      'prefix_match,cache_aware,round_robin',
      '--window',
      '64,256',
      '--epsilon',
      '0.25,1',
      '--load',
      'rate:1,2',
      '--current',
      'cache_aware:window=128',
    ];
    expect((await cli([...multi, '--jobs', '1', '--json', 'm-serial.json'])).code).toBe(0);
    const serial = JSON.parse(read('m-serial.json'));
    expect(serial.format).toBe('kvroute-sim-sweep-load/v1');
    // 2 prefix_match + 4 cache_aware + 1 round_robin settings at each of 2 loads.
    expect(serial.points.map((p: { report: { grid: unknown[] } }) => p.report.grid.length)).toEqual(
      [7, 7],
    );
    expect(serial.points[1].report.current.options).toEqual({ window: 128 });
    expect((await cli([...multi, '--jobs', '2', '--json', 'm-parallel.json'])).code).toBe(0);
    expect(read('m-parallel.json')).toBe(read('m-serial.json'));
    for (const k of [1, 2]) {
      const r = await cli([...multi, '--jobs', '1', '--shard', `${k}/2`, '--json', `m${k}.json`]);
      expect(r.code, r.stderr).toBe(0);
    }
    const merged = await cli([
      'merge',
      'm2.json',
      'm1.json',
      '--json',
      'm-merged.json',
      '--out-config',
      'm.yaml',
    ]);
    expect(merged.code, merged.stderr).toBe(0);
    expect(read('m-merged.json')).toBe(read('m-serial.json'));
    expect(read('m.yaml')).toBe(serial.routerConfig);
  }, 300_000);

  it('refuses a missing shard, a shard given twice and a shard of another sweep', async () => {
    const missing = await cli(['merge', 's1.json', 's3.json']);
    expect(missing.code).toBe(2);
    expect(missing.stderr).toContain('missing shard 2/3');
    const twice = await cli(['merge', 's1.json', 's1.json', 's2.json', 's3.json']);
    expect(twice.code).toBe(2);
    expect(twice.stderr).toContain('given twice');
    const other = await cli([
      ...SWEEP.slice(0, -2),
      '--prefix-length',
      '1024',
      '--jobs',
      '1',
      '--shard',
      '2/3',
      '--json',
      'other.json',
    ]);
    expect(other.code).toBe(0);
    const mixed = await cli(['merge', 's1.json', 'other.json', 's3.json']);
    expect(mixed.code).toBe(2);
    expect(mixed.stderr).toContain('a different sweep');
    const bad = await cli([...SWEEP, '--shard', '4/3']);
    expect(bad.code).toBe(2);
    expect(bad.stderr).toContain('--shard: expected K/N');
  }, 120_000);
});

describe('what a new user trips on', () => {
  it('accepts and drops a leading -- (pnpm passes it through)', async () => {
    const r = await cli(['--', 'scenarios']);
    expect(r.code).toBe(0);
    expect(r.stdout).toContain('seed-sequential');
    const sub = await cli(['profiles', '--']);
    expect(sub.code).toBe(0);
    const flagged = await cli(['scenarios', '--', '--help']);
    expect(flagged.code).toBe(0);
  });

  it('--help gives every flag of run, sweep and replay a default (or says it is required)', async () => {
    for (const cmd of ['run', 'sweep', 'replay']) {
      const help = (await cli([cmd, '--help'])).stdout;
      const flags = help.split('\n  --').slice(1);
      expect(flags.length, cmd).toBeGreaterThan(10);
      for (const block of flags) {
        const text = block.split('\n\n')[0]!.split(/\n {2}-h/)[0]!;
        expect(text, `${cmd} --${text}`).toMatch(/default|required/);
      }
    }
  });

  it("replay's help and the scenario list point at the trace the package ships", async () => {
    const help = await cli(['replay', '--help']);
    expect(help.stdout).toContain('packages/sim/data/traces/mooncake-conversation.jsonl');
    expect(help.stdout).not.toContain('../shared');
    expect((await cli(['scenarios'])).stdout).not.toContain('../shared');
  });
});

describe("sweep's verdict", () => {
  it('names ranks that prefill nothing and compares with the recommended default', async () => {
    const r = await cli([
      'sweep',
      '--scenario',
      'seed-sequential',
      '--ranks',
      '4',
      '--set',
      'requests=6',
      '--window',
      '64,128',
      '--prefix-length',
      '1024',
      '--json',
      '-',
    ]);
    expect(r.code, r.stderr).toBe(0);
    const j = JSON.parse(r.stdout);
    expect(j.reference.policy).toBe('cache_aware');
    expect(j.reference.requests).toBe(6);
    // One shared prefix, sequential requests: prefix_match keeps all of them on one rank.
    const best = j.grid.find(
      (c: { window: number; prefixLength: number }) =>
        c.window === j.best.window && c.prefixLength === j.best.prefixLength,
    );
    const idle = best.result.perRank.filter(
      (x: { prefillTokens: number }) => x.prefillTokens === 0,
    );
    expect(idle.length).toBe(3);
    expect(j.reason).toContain('3 of 4 ranks prefill nothing');
    expect(j.reason).toMatch(
      /The recommended default, cache_aware with its default options, gets TTFT p99 \d+ ms/,
    );
  });
});

describe('the thread pool', () => {
  it('gives the serial results from worker threads alone, and from this thread with them', async () => {
    const jobs: CellJob[] = [64, 128, 256].map((window) => ({
      scenario: 'seed-concurrent',
      scenarioOptions: { requestsPerAgent: 2 },
      seed: 1,
      ranks: 4,
      profile: { name: 'h200-llama-3.1-8b' },
      policy: { method: 'prefix_match', window, prefixLength: 512 },
    }));
    const serial = await runCells(jobs, { workers: 1 });
    expect(serial[0]!.summary.requests).toBeGreaterThan(0);
    const threadsOnly = await runCells(jobs, { workers: 2, inThisThread: false });
    expect(JSON.stringify(threadsOnly)).toBe(JSON.stringify(serial));
    const mixed = await runCells(jobs, { workers: 2 });
    expect(JSON.stringify(mixed)).toBe(JSON.stringify(serial));
    // Any claim order, on threads or here: results still in job order.
    const reversed = await runCells(jobs, { workers: 2, order: [2, 1, 0] });
    expect(JSON.stringify(reversed)).toBe(JSON.stringify(serial));
    const reversedHere = await runCells(jobs, { workers: 1, order: [2, 1, 0] });
    expect(JSON.stringify(reversedHere)).toBe(JSON.stringify(serial));
  }, 120_000);

  it('takes jobs in the order given, and refuses an order that is not a permutation', async () => {
    const bad = (scenario: string): CellJob => ({
      scenario,
      scenarioOptions: {},
      seed: 1,
      profile: { name: 'h200-llama-3.1-8b' },
      policy: { method: 'round_robin' },
    });
    const jobs = [bad('first-by-index'), bad('first-by-order')];
    // The first job taken fails the run, so the error names which one ran first.
    await expect(runCells(jobs, { workers: 1 })).rejects.toThrow(/first-by-index/);
    await expect(runCells(jobs, { workers: 1, order: [1, 0] })).rejects.toThrow(/first-by-order/);
    await expect(
      runCells(jobs, { workers: 2, inThisThread: false, order: [1, 0] }),
    ).rejects.toThrow(/first-by-order|first-by-index/);
    for (const order of [[0], [0, 0], [0, 2], [1, 0.5], [0, 1, 2]]) {
      await expect(runCells(jobs, { workers: 1, order })).rejects.toThrow(
        'order must be a permutation of 0..1',
      );
    }
  }, 120_000);

  it("a sweep runs the cells of other methods than the grid's first", () => {
    const job = (method: string): CellJob => ({
      scenario: 'agentic',
      scenarioOptions: {},
      seed: 1,
      profile: { name: 'h200-llama-3.1-8b' },
      policy: { method },
    });
    const methods = ['prefix_match', 'prefix_match', 'cache_aware', 'prefix_match', 'round_robin'];
    expect(oddMethodsFirst(methods.map(job))).toEqual([2, 4, 0, 1, 3]);
    expect(oddMethodsFirst(['cache_aware', 'cache_aware'].map(job))).toEqual([0, 1]);
    expect(oddMethodsFirst([])).toEqual([]);
  });

  it('groups the grid by prefix length, index order within a group', () => {
    const job = (prefixLength: number, window: number): CellJob => ({
      scenario: 'agentic',
      scenarioOptions: {},
      seed: 1,
      profile: { name: 'h200-llama-3.1-8b' },
      policy: { method: 'prefix_match', prefixLength, window },
    });
    // Windows outermost (as --window listed before --prefix-length may give): 0..3.
    const jobs = [job(2048, 64), job(1024, 64), job(2048, 128), job(1024, 128)];
    jobs.push({ ...jobs[0]!, policy: { method: 'cache_aware' } });
    expect(oddMethodsFirst(jobs)).toEqual([4, 1, 3, 0, 2]);
  });

  it("gives each thread its own contiguous run of the order, then the others' runs", () => {
    const state = claimRuns(7, 3);
    // Runs of 3, 2 and 2 positions: [0, 3), [3, 5), [5, 7).
    expect(Array.from(state)).toEqual([0, 3, 3, 5, 5, 7]);
    expect([claimNext(state, 1), claimNext(state, 1), claimNext(state, 2)]).toEqual([3, 4, 5]);
    // Thread 1's run is used up: it goes on with thread 2's, then thread 0's.
    expect([claimNext(state, 1), claimNext(state, 1), claimNext(state, 0)]).toEqual([6, 0, 1]);
    expect([claimNext(state, 2), claimNext(state, 2), claimNext(state, 0)]).toEqual([2, -1, -1]);
    // More threads than positions: one run per position.
    expect(Array.from(claimRuns(2, 4))).toEqual([0, 1, 1, 2]);
    const closed = claimRuns(5, 2);
    expect(claimNext(closed, 0)).toBe(0);
    closeClaims(closed);
    expect([claimNext(closed, 0), claimNext(closed, 1)]).toEqual([-1, -1]);
  });

  it('rejects with the error of a job that failed on a worker thread', async () => {
    const bad: CellJob = {
      scenario: 'no-such-scenario',
      scenarioOptions: {},
      seed: 1,
      profile: { name: 'h200-llama-3.1-8b' },
      policy: { method: 'round_robin' },
    };
    const failure = (p: Promise<unknown>) =>
      p.then(
        () => new Error('expected a rejection') as Error & { code?: unknown },
        (e: unknown) => e as Error & { code?: unknown },
      );
    const fromThread = await failure(runCells([bad, bad], { workers: 2, inThisThread: false }));
    // Rebuilt from what crossed the channel (a plain Error with the name, code and message),
    // which also shows the job ran on a thread, not here.
    expect(fromThread).toBeInstanceOf(Error);
    expect(fromThread.constructor).toBe(Error);
    expect(fromThread.message).toMatch(/unknown scenario 'no-such-scenario'/);
    expect(fromThread.code).toBe('WORKLOAD_OPTION');
    const here = await failure(runCells([bad, bad], { workers: 1 }));
    expect(here.constructor).not.toBe(Error);
    expect(here.message).toBe(fromThread.message);
  }, 120_000);
});
