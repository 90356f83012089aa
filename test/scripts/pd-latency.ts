// Prints the router's added latency in PD mode (both styles) over the decode side's own TTFT,
// next to one loopback round trip: `pnpm --filter @kvroute/e2e pd-latency [N]`.

import { startPdCluster } from '../helpers/pd-cluster.ts';
import { formatAddedLatency, measureAddedLatency } from '../helpers/pd-latency.ts';

const n = Number(process.argv.slice(2).find((a) => a !== '--') ?? 200);
if (!Number.isInteger(n) || n < 1) throw new Error(`N must be a positive integer, got ${n}`);
for (const style of ['sglang', 'vllm'] as const) {
  const c = await startPdCluster({
    worker: { timeScale: 0.05, dpSize: 2 },
    routerArgs: ['--dp-aware', '--pd-style', style],
  });
  try {
    // Warm the connections and JIT first; then measure.
    await measureAddedLatency(c, 20, style);
    console.log(formatAddedLatency(await measureAddedLatency(c, n, style)));
  } finally {
    await c.close();
  }
}
