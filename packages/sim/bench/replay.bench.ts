// Benchmark: replay the whole Mooncake conversation trace on 16 ranks of
// h200-llama-3.1-8b, once per policy, each in its own process so peak RSS is that policy's.
// Prints wall time, simulated seconds per wall second, events per second and peak RSS, and
// whether the targets (<= 10 s wall, >= 350x real time, <= 2 GiB) hold. No assertions: timing
// depends on the machine; the figures are for the README.
//   pnpm --filter @kvroute/sim bench [-- --policies prefix_match,round_robin --limit N]
import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { checkBenchArgs } from '../../../scripts/bench-args.ts';
import { getProfile } from '../src/cost/profiles.ts';
import { simulatePlan } from '../src/simulate.ts';
import { buildWorkload } from '../src/workloads/registry.ts';

checkBenchArgs(
  `usage: pnpm --filter @kvroute/sim bench [-- --policies LIST --limit N]

Replays the Mooncake conversation trace on 16 ranks once per policy (default
prefix_match,round_robin), each in its own process: wall time, simulated seconds per wall
second, events per second, peak RSS, against the targets. --limit N: only the first N requests.`,
  { values: ['--policies', '--limit', '--child'], flags: [] },
);

const args = process.argv.slice(2);
const flag = (name: string) => {
  const i = args.indexOf(`--${name}`);
  return i >= 0 ? args[i + 1] : undefined;
};
const limit = Number(flag('limit') ?? 0);

if (flag('child') !== undefined) {
  const policy = flag('child')!;
  const t0 = performance.now();
  const plan = buildWorkload('replay', { limit }, 1);
  const t1 = performance.now();
  const run = simulatePlan(plan, {
    policy: { method: policy },
    ranks: 16,
    profile: getProfile('h200-llama-3.1-8b'),
    seed: 1,
  });
  const t2 = performance.now();
  const s = run.summary;
  const out = {
    policy,
    requests: s.requests,
    loadS: (t1 - t0) / 1000,
    simS: (t2 - t1) / 1000,
    simulatedS: s.durationMs / 1000,
    events: s.events,
    peakRssMiB: process.resourceUsage().maxRSS / 1024,
    hitRate: s.hitRate,
    ttftP50: s.ttftMs.p50,
    ttftP99: s.ttftMs.p99,
  };
  console.log(JSON.stringify(out));
} else {
  const policies = (flag('policies') ?? 'prefix_match,round_robin').split(',');
  const self = fileURLToPath(import.meta.url);
  console.log(
    `Mooncake conversation replay, 16 ranks, h200-llama-3.1-8b${limit ? `, first ${limit} requests` : ''}`,
  );
  console.log(
    'policy        requests  wall s  sim s/wall s  events/s   peak RSS  hit rate  TTFT p50/p99 ms   targets',
  );
  for (const policy of policies) {
    const r = spawnSync(
      process.execPath,
      [...process.execArgv, self, '--child', policy, '--limit', String(limit)],
      {
        encoding: 'utf8',
        maxBuffer: 1 << 24,
      },
    );
    if (r.status !== 0) {
      console.error(r.stderr);
      process.exit(1);
    }
    const o = JSON.parse(r.stdout.trim().split('\n').pop()!);
    const wall = o.loadS + o.simS;
    const speed = o.simulatedS / wall;
    const ok = wall <= 10 && speed >= 350 && o.peakRssMiB <= 2048;
    console.log(
      [
        o.policy.padEnd(13),
        String(o.requests).padStart(8),
        wall.toFixed(2).padStart(7),
        speed.toFixed(0).padStart(13),
        (o.events / o.simS).toFixed(0).padStart(9),
        `${o.peakRssMiB.toFixed(0)} MiB`.padStart(10),
        o.hitRate.toFixed(3).padStart(9),
        `${o.ttftP50.toFixed(0)}/${o.ttftP99.toFixed(0)}`.padStart(16),
        ok ? '  met' : '  MISSED (<=10 s, >=350x, <=2 GiB)',
      ].join(' '),
    );
  }
}
