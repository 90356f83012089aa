// Sweep throughput on worker threads: a 16-cell sweep (4 windows x 4 prefix lengths of
// prefix_match on the agentic scenario, 16 ranks) with --jobs 1 and with --jobs 2, and a
// 1,000-cell sweep (40 windows x 25 prefix lengths on seed-sequential) on every core.
//
// Every run is a fresh `kvroute-sim sweep` process from the compiled dist/ (built first if
// missing or older than the source), so no run inherits another's warm JIT, and the job
// counts alternate over rounds so a change in the machine's load hits both alike. Prints each
// run's wall time and how many cores it kept busy (CPU time / wall time: V8's compiler and
// GC threads keep part of a second core busy even at --jobs 1, which bounds what a second
// thread can add), the medians and their ratio, and the load average, since the machine may
// be shared. No assertions. Where `taskset` exists, each round also runs --jobs 1 pinned to
// one core, and the target (>= 1.7x) is judged on two cores against that one: an unpinned
// --jobs 1 already uses part of the second core. Without taskset, against unpinned --jobs 1.
// --trace adds the same 16 cells on the Mooncake trace (cells of about a second; at most two
// rounds, about two minutes).
//   pnpm --filter @kvroute/sim bench:sweep [-- --rounds 3] [--skip-1000] [--trace]
import { spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { availableParallelism, loadavg } from 'node:os';
import { join } from 'node:path';
import { checkBenchArgs } from '../../../scripts/bench-args.ts';
import { ensureBuilt, packageRoot } from './built.ts';

checkBenchArgs(
  `usage: pnpm --filter @kvroute/sim bench:sweep [-- --rounds N --skip-1000 --trace]

A 16-cell sweep with --jobs 1, --jobs 2 and on one pinned core, in rotating rounds (default
3), and a 1,000-cell sweep on every core (--skip-1000 leaves it out); --trace adds the 16
cells on the Mooncake trace.`,
  { values: ['--rounds'], flags: ['--skip-1000', '--trace'] },
);

const args = process.argv.slice(2).filter((a) => a !== '--');
const flag = (name: string, fallback: string) => {
  const i = args.indexOf(`--${name}`);
  return i >= 0 && args[i + 1] !== undefined ? args[i + 1]! : fallback;
};
const rounds = Number(flag('rounds', '3'));
if (!Number.isInteger(rounds) || rounds < 1) {
  console.error(`--rounds must be a positive integer, got ${flag('rounds', '3')}`);
  process.exit(2);
}

ensureBuilt();
const cli = join(packageRoot, 'dist', 'cli.js');

interface Run {
  wallS: number;
  cpuS: number;
}

const taskset = ['/usr/bin/taskset', '/bin/taskset'].find((p) => existsSync(p));

/**
 * One sweep in a fresh process: wall time, and CPU time of it and its threads. `pinned` runs
 * it on one core (taskset -c 0).
 */
function sweep(grid: string[], jobs: number, pinned = false): Promise<Run> {
  return new Promise((resolve, reject) => {
    // The child reports its own CPU time (all threads) on exit, on fd 3.
    const report =
      "import { writeSync } from 'node:fs'; process.on('exit', () => { " +
      'const u = process.cpuUsage(); ' +
      'writeSync(3, JSON.stringify({ cpu: (u.user + u.system) / 1e6 })); });';
    const t0 = performance.now();
    const node = [
      process.execPath,
      '--import',
      `data:text/javascript,${encodeURIComponent(report)}`,
      cli,
      'sweep',
      ...grid,
      '--jobs',
      String(jobs),
      '--json',
      '-',
    ];
    const [cmd, ...argv] = pinned && taskset !== undefined ? [taskset, '-c', '0', ...node] : node;
    const child = spawn(cmd!, argv, { stdio: ['ignore', 'ignore', 'pipe', 'pipe'] });
    let err = '';
    let out = '';
    child.stderr!.on('data', (d) => {
      err += d;
    });
    child.stdio[3]!.on('data', (d) => {
      out += d;
    });
    child.on('error', reject);
    child.on('close', (code) => {
      const wallS = (performance.now() - t0) / 1000;
      if (code !== 0) {
        reject(new Error(`sweep --jobs ${jobs} exited ${code}: ${err.slice(-2000)}`));
        return;
      }
      resolve({ wallS, cpuS: (JSON.parse(out) as { cpu: number }).cpu });
    });
  });
}

const load = () => loadavg()[0]!.toFixed(1);
const median = (xs: number[]) => {
  const s = [...xs].sort((a, b) => a - b);
  const m = s.length >> 1;
  return s.length % 2 === 1 ? s[m]! : (s[m - 1]! + s[m]!) / 2;
};
const range = (n: number, from: number, step: number) =>
  Array.from({ length: n }, (_, i) => from + i * step).join(',');
const show = (r: Run) => `${r.wallS.toFixed(2)} s (${(r.cpuS / r.wallS).toFixed(2)} cores busy)`;

/**
 * Runs a grid with --jobs 1, --jobs 2 and (with taskset) --jobs 1 on one core, in rotating
 * order; prints each run and the medians.
 */
async function compareJobs(name: string, grid: string[], n: number): Promise<void> {
  const one: Run[] = [];
  const two: Run[] = [];
  const pin: Run[] = [];
  const kinds = taskset !== undefined ? ['1', '2', 'pin'] : ['1', '2'];
  for (let r = 0; r < n; r++) {
    const order = kinds.map((_, i) => kinds[(i + r) % kinds.length]!);
    const got: string[] = [];
    for (const kind of order) {
      const run = await sweep(grid, kind === '2' ? 2 : 1, kind === 'pin');
      (kind === '1' ? one : kind === '2' ? two : pin).push(run);
      got.push(`${kind === 'pin' ? '--jobs 1 on one core' : `--jobs ${kind}`} ${show(run)}`);
    }
    console.log(`  round ${r + 1}: ${got.join(', ')}; load ${load()}`);
  }
  const m1 = median(one.map((r) => r.wallS));
  const m2 = median(two.map((r) => r.wallS));
  const busy1 = median(one.map((r) => r.cpuS / r.wallS));
  const verdict = (x: number) => `(target >= 1.7x: ${x >= 1.7 ? 'met' : 'MISSED'})`;
  console.log(
    `${name}, fresh processes, median of ${n}: --jobs 1 ${m1.toFixed(2)} s, --jobs 2 ${m2.toFixed(2)} s: ${(m1 / m2).toFixed(2)}x; --jobs 1 alone keeps ${busy1.toFixed(2)} cores busy (V8's GC and compiler threads)`,
  );
  if (pin.length > 0) {
    // The target compares two cores with one: --jobs 1 confined to one core is that "one".
    const mp = median(pin.map((r) => r.wallS));
    console.log(
      `  two cores (--jobs 2) against one core (--jobs 1 pinned by taskset, ${mp.toFixed(2)} s): ${(mp / m2).toFixed(2)}x ${verdict(mp / m2)}`,
    );
  } else {
    console.log(`  (no taskset: judged against unpinned --jobs 1) ${verdict(m1 / m2)}`);
  }
}

const window4 = ['--window', '64,128,256,512', '--prefix-length', '1024,2048,4096,8192'];
console.log(`cores: ${availableParallelism()}; load average before: ${load()}`);
await compareJobs(
  '16-cell sweep (agentic, prefix_match)',
  ['--scenario', 'agentic', ...window4],
  rounds,
);
if (args.includes('--trace')) {
  // The same 16 cells on the Mooncake trace: cells of about a second each.
  await compareJobs(
    '16-cell sweep (Mooncake trace replay, prefix_match)',
    ['--scenario', 'replay', ...window4],
    Math.min(rounds, 2),
  );
}
if (!args.includes('--skip-1000')) {
  // 40 windows x 25 prefix lengths, every prefix length >= every window: 1,000 cells.
  const grid1000 = [
    '--scenario',
    'seed-sequential',
    '--window',
    range(40, 8, 8),
    '--prefix-length',
    range(25, 512, 256),
  ];
  const lb = load();
  const all = await sweep(grid1000, availableParallelism());
  console.log(
    `1,000-cell sweep (seed-sequential, prefix_match) on ${availableParallelism()} threads: ${show(all)} wall (load ${lb} -> ${load()})`,
  );
}
