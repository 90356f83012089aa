// Three kvroute-router processes in front of four mock workers that publish KV events, a
// client spreading requests over the replicas: with events, the replicas keep one router's
// hit rate. The 97% target is a measured figure (98.5-99.9% in three runs, 96.8% once in a
// full CI run): which turn lands before its predecessor's events arrive is timing, so the
// test asserts a floor that timing cannot reach, and `pnpm --filter @kvroute/e2e replicas`
// prints the full comparison (learned vs events, 1 vs 3 replicas, TTFT) for the target.
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
  it('three replicas with events keep one router’s hit rate (>= 90% here; 97% is the measured target)', async () => {
    const single = await runReplicas(w, 1, 'learned');
    const events = await runReplicas(w, 3, 'events');
    const learned = await runReplicas(w, 3, 'learned');
    console.log(formatResults([single, learned, events] as RunResult[], single));
    expect(single.hitRate).toBeGreaterThan(0.5);
    expect(events.hitRate / single.hitRate).toBeGreaterThanOrEqual(0.9);
    // Every replica scored every rank from events (streams live all along).
    expect(events.fallbackScores).toBe(0);
    expect(events.eventScores).toBe(events.requests * w.workers.length);
    // The learned index's replica penalty depends on timing (which replica saw which turn
    // while loads moved): measured and printed, not asserted.
    expect(learned.requests).toBe(single.requests);
  }, 600_000);
});
