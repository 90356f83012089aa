// Prints the router-replica comparison: hit rate and TTFT for one router and for three
// replicas, with the learned index and with KV events, on four mock workers, and beside it
// the simulator's prediction of the same workload at the timing this run measured.
// Run: pnpm --filter @kvroute/e2e replicas [-- --record FILE]
//   --record FILE  append this run's rows to FILE (a JSON array of runs), e.g.
//                  fixtures/replicas-e2e.json, which replicas-sim.test.ts compares with
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { resolve } from 'node:path';
import { parseArgs } from 'node:util';
import {
  DEFAULT_WORKLOAD,
  formatResults,
  type RunResult,
  runReplicas,
  startEventWorkers,
} from '../helpers/replicas.ts';
import { formatPredictions, type RecordedRun } from '../helpers/replicas-sim.ts';

const { values } = parseArgs({
  args: process.argv.slice(2).filter((a, i) => !(i === 0 && a === '--')),
  options: { record: { type: 'string' } },
});

const w = await startEventWorkers();
let rows: RunResult[] = [];
try {
  for (const [replicas, source] of [
    [1, 'learned'],
    [1, 'events'],
    [3, 'learned'],
    [3, 'events'],
  ] as const) {
    rows.push(await runReplicas(w, replicas, source));
  }
} finally {
  await w.close();
}
const base = rows[0] as RunResult;
const wl = DEFAULT_WORKLOAD;
console.log(
  `router replicas: 4 mock workers (h200-llama-3.1-8b, time scale ${w.timeScale}), cache_aware; ${wl.tenants} tenants x ${wl.sessionsPerTenant} sessions x ${wl.turns} turns, ${wl.concurrency} sessions at once, requests spread round-robin over the replicas`,
);
console.log(formatResults(rows, base));
const events3 = rows[3] as RunResult;
const learned3 = rows[2] as RunResult;
console.log(
  `events, 3 replicas: ${((100 * events3.hitRate) / base.hitRate).toFixed(1)}% of one router's hit rate (target >= 97%); learned index replica penalty: ${(100 * (base.hitRate - learned3.hitRate)).toFixed(1)} pt (${((100 * learned3.hitRate) / base.hitRate).toFixed(1)}% of one router)`,
);
const run: RecordedRun = { timeScale: w.timeScale, rows };
console.log('\nsimulator prediction at this run’s measured timing:');
console.log(formatPredictions([run]));
if (values.record !== undefined) {
  const file = resolve(process.env.INIT_CWD ?? process.cwd(), values.record);
  const runs: RecordedRun[] = existsSync(file) ? JSON.parse(readFileSync(file, 'utf8')) : [];
  rows = rows.map((r) => ({ ...r, hitRate: Math.round(r.hitRate * 1e6) / 1e6 }));
  runs.push({ recordedAt: new Date().toISOString(), timeScale: w.timeScale, rows });
  writeFileSync(file, `${JSON.stringify(runs, null, 2)}\n`);
  console.log(`recorded run ${runs.length} in ${file}`);
}
