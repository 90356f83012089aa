// Prints the router-replica comparison: hit rate and TTFT for one router and for three
// replicas, with the learned index and with KV events, on four mock workers.
// Run: pnpm --filter @kvroute/e2e replicas
import {
  DEFAULT_WORKLOAD,
  formatResults,
  type RunResult,
  runReplicas,
  startEventWorkers,
} from '../helpers/replicas.ts';

const w = await startEventWorkers();
try {
  const rows: RunResult[] = [];
  for (const [replicas, source] of [
    [1, 'learned'],
    [1, 'events'],
    [3, 'learned'],
    [3, 'events'],
  ] as const) {
    rows.push(await runReplicas(w, replicas, source));
  }
  const base = rows[0] as RunResult;
  const wl = DEFAULT_WORKLOAD;
  console.log(
    `router replicas: 4 mock workers (h200-llama-3.1-8b, time scale 0.02), cache_aware; ${wl.tenants} tenants x ${wl.sessionsPerTenant} sessions x ${wl.turns} turns, ${wl.concurrency} sessions at once, requests spread round-robin over the replicas`,
  );
  console.log(formatResults(rows, base));
  const events3 = rows[3] as RunResult;
  const learned3 = rows[2] as RunResult;
  console.log(
    `events, 3 replicas: ${((100 * events3.hitRate) / base.hitRate).toFixed(1)}% of one router's hit rate (target >= 97%); learned index replica penalty: ${(100 * (base.hitRate - learned3.hitRate)).toFixed(1)} pt (${((100 * learned3.hitRate) / base.hitRate).toFixed(1)}% of one router)`,
  );
} finally {
  await w.close();
}
