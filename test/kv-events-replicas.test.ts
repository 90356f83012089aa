// Three kvroute-router processes in front of four mock workers that publish KV events, a
// client spreading requests over the replicas: with events, the replicas keep one router's
// hit rate. Measured after cold misses were hashed alike on every replica and the block size
// was known up front: 100.0-104.2% of one router in five runs (96.0% before, when the
// replicas split a tenant's first turns over ranks and lost the records of what they sent
// before the first event), so the test asserts the 97% target itself.
// `pnpm --filter @kvroute/e2e replicas` prints the full comparison (learned vs events, 1 vs 3
// replicas, TTFT) and `replicas:trace` where each lost hit went.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  formatResults,
  type RunResult,
  runReplicas,
  startEventWorkers,
  type Workers,
} from './helpers/replicas.ts';

let w: Workers;
beforeAll(async () => {
  w = await startEventWorkers();
});
afterAll(async () => {
  await w?.close();
});

describe('router replicas with KV events', () => {
  it('three replicas with events keep >= 97% of one router’s hit rate', async () => {
    const single = await runReplicas(w, 1, 'learned');
    const events = await runReplicas(w, 3, 'events');
    const learned = await runReplicas(w, 3, 'learned');
    console.log(formatResults([single, learned, events] as RunResult[], single));
    expect(single.hitRate).toBeGreaterThan(0.5);
    expect(events.hitRate / single.hitRate).toBeGreaterThanOrEqual(0.97);
    // Every replica scored every rank from events (streams live all along).
    expect(events.fallbackScores).toBe(0);
    expect(events.eventScores).toBe(events.requests * w.workers.length);
    // The learned index's replica penalty depends on timing (which replica saw which turn
    // while loads moved): measured and printed, not asserted.
    expect(learned.requests).toBe(single.requests);
  }, 600_000);
});
