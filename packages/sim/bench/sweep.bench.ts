// Sweep throughput on worker threads: a 16-cell sweep (4 windows x 4 prefix lengths of
// prefix_match on the agentic scenario, 16 ranks) with 1 worker and with 2, and a 1,000-cell
// sweep (40 windows x 25 prefix lengths on seed-sequential) on every core. Prints wall times,
// the speed-up (target >= 1.7x on 2 cores) and the load average before and after each run,
// since the machine may be shared. No assertions.
//   pnpm --filter @kvroute/sim bench:sweep [-- --skip-1000]
import { availableParallelism, loadavg } from 'node:os';
import { runCli } from '../src/cli/main.ts';

const quiet = { write: () => true };
async function sweep(args: string[], jobs: number): Promise<number> {
  const t0 = performance.now();
  const code = await runCli(['sweep', ...args, '--jobs', String(jobs), '--json', '-'], {
    stdout: quiet,
    stderr: { write: (s: string) => process.stderr.write(s) },
    cwd: process.cwd(),
  });
  if (code !== 0) throw new Error(`sweep exited ${code}`);
  return (performance.now() - t0) / 1000;
}
const load = () => loadavg()[0]!.toFixed(1);
const range = (n: number, from: number, step: number) =>
  Array.from({ length: n }, (_, i) => from + i * step).join(',');

const grid16 = [
  '--scenario',
  'agentic',
  '--window',
  '64,128,256,512',
  '--prefix-length',
  '1024,2048,4096,8192',
];
console.log(`cores: ${availableParallelism()}`);
const l0 = load();
const one = await sweep(grid16, 1);
const l1 = load();
const two = await sweep(grid16, 2);
const l2 = load();
const speedup = one / two;
console.log(
  `16-cell sweep (agentic, prefix_match): 1 worker ${one.toFixed(1)} s (load ${l0} -> ${l1}), 2 workers ${two.toFixed(1)} s (load ${l1} -> ${l2}): ${speedup.toFixed(2)}x (target >= 1.7x: ${speedup >= 1.7 ? 'met' : 'MISSED'})`,
);
if (!process.argv.includes('--skip-1000')) {
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
    `1,000-cell sweep (seed-sequential, prefix_match) on ${availableParallelism()} workers: ${all.toFixed(1)} s wall (load ${lb} -> ${load()})`,
  );
}
