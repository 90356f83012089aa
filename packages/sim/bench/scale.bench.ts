// Simulator scaling in trace length: the Mooncake conversation trace once and N times over
// (default 10), on 1,024 ranks of h200-llama-3.1-8b, each run in its own process so peak RSS
// is that run's. Copy k of the trace starts when copy k-1 ends and its hash ids are shifted
// past the previous copy's (id 0, the shared system prompt, stays shared), so the longer trace
// is more conversations of the same service, not the same ones again. Prints wall and CPU
// seconds, peak RSS and the ratios to the 1x run against the targets (<= 1.1 x N time,
// <= 2x memory), plus the load average, since the machine may be shared. No assertions.
//
// The runs use the compiled package (dist/, built first if older than src/) under plain
// node, the form the kvroute-sim bin runs in; --source runs src/ under tsx instead, whose
// loader adds to both runs' memory and so makes the ratio look better than users see it.
//   pnpm --filter @kvroute/sim bench:scale [-- --factor 10] [--ranks 1024] [--policy round_robin] [--source]
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { checkBenchArgs } from '../../../scripts/bench-args.ts';
import { defaultTracePath } from '../src/workloads/replay.ts';
import { ensureBuilt } from './built.ts';

checkBenchArgs(
  `usage: pnpm --filter @kvroute/sim bench:scale [-- --factor N --ranks N --policy NAME]

The Mooncake trace once and --factor times over (default 10) on --ranks ranks (default 1,024)
with --policy (default round_robin), each in its own process: wall and CPU seconds, peak RSS
and the ratios to the 1x run, against the targets. The runs use the compiled dist/ (built
first if older than src/); --source runs src/ under tsx instead.`,
  { values: ['--factor', '--ranks', '--policy'], flags: ['--source'] },
);

const args = process.argv.slice(2);
const flag = (name: string, fallback: string) => {
  const i = args.indexOf(`--${name}`);
  return i >= 0 && args[i + 1] !== undefined ? args[i + 1]! : fallback;
};
const factor = Number(flag('factor', '10'));
const ranks = Number(flag('ranks', '1024'));
const policy = flag('policy', 'round_robin');

interface ChildResult {
  requests: number;
  wallS: number;
  cpuS: number;
  peakRssMiB: number;
  events: number;
}

/** The trace `times` times over, written as JSONL. */
function repeatTrace(source: string, times: number, out: string): void {
  const lines = readFileSync(source, 'utf8')
    .split('\n')
    .filter((l) => l.trim() !== '')
    .map((l) => JSON.parse(l) as { timestamp: number; hash_ids: number[] });
  let maxId = 0;
  for (const l of lines) for (const h of l.hash_ids) maxId = Math.max(maxId, h);
  const span = lines[lines.length - 1]!.timestamp + 1000;
  const text: string[] = [];
  for (let k = 0; k < times; k++) {
    for (const l of lines) {
      text.push(
        JSON.stringify({
          ...l,
          timestamp: l.timestamp + k * span,
          hash_ids: l.hash_ids.map((h) => (h === 0 ? 0 : h + k * (maxId + 1))),
        }),
      );
    }
  }
  writeFileSync(out, `${text.join('\n')}\n`);
}

const fromSource = args.includes('--source');
if (!fromSource) ensureBuilt();
const dir = mkdtempSync(join(tmpdir(), 'kvroute-scale-'));
const child = fileURLToPath(new URL('./scale-child.mjs', import.meta.url));
const runOne = (file: string): ChildResult => {
  const r = spawnSync(
    process.execPath,
    [
      ...(fromSource ? process.execArgv : []),
      child,
      file,
      String(ranks),
      policy,
      ...(fromSource ? ['--source'] : []),
    ],
    { encoding: 'utf8', maxBuffer: 1 << 24 },
  );
  if (r.status !== 0) {
    console.error(r.stderr);
    process.exit(1);
  }
  return JSON.parse(r.stdout.trim().split('\n').pop()!) as ChildResult;
};
try {
  const longer = join(dir, `trace-x${factor}.jsonl`);
  repeatTrace(defaultTracePath(), factor, longer);
  console.log(
    `Mooncake conversation trace x1 and x${factor}, ${ranks} ranks, ${policy}, h200-llama-3.1-8b, ${fromSource ? 'src/ under tsx' : 'compiled dist/ under plain node'}; load average before: ${loadavg()[0]!.toFixed(1)}`,
  );
  console.log('trace  requests   events   wall s    CPU s  peak RSS');
  const rows: [string, ChildResult][] = [
    ['x1', runOne(defaultTracePath())],
    [`x${factor}`, runOne(longer)],
  ];
  for (const [name, r] of rows) {
    console.log(
      [
        name.padEnd(5),
        String(r.requests).padStart(9),
        String(r.events).padStart(8),
        r.wallS.toFixed(1).padStart(8),
        r.cpuS.toFixed(1).padStart(8),
        `${r.peakRssMiB.toFixed(0)} MiB`.padStart(10),
      ].join(' '),
    );
  }
  const [a, b] = [rows[0]![1], rows[1]![1]];
  const cpuRatio = b.cpuS / a.cpuS;
  const wallRatio = b.wallS / a.wallS;
  const memRatio = b.peakRssMiB / a.peakRssMiB;
  const timeLimit = 1.1 * factor;
  console.log(
    `x${factor}/x1: CPU ${cpuRatio.toFixed(2)}x, wall ${wallRatio.toFixed(2)}x (target <= ${timeLimit.toFixed(0)}x: ${cpuRatio <= timeLimit ? 'met' : 'MISSED'} on CPU), memory ${memRatio.toFixed(2)}x (target <= 2x: ${memRatio <= 2 ? 'met' : 'MISSED'}); load average after: ${loadavg()[0]!.toFixed(1)}`,
  );
} finally {
  rmSync(dir, { recursive: true, force: true });
}
