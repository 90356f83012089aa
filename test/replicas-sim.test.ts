// The simulator's prediction of the router-replicas e2e against that e2e's recorded runs
// (fixtures/replicas-e2e.json, appended by `pnpm --filter @kvroute/e2e replicas -- --record
// test/fixtures/replicas-e2e.json`): same prompts, same ranks and cost profile, at the timing
// each setup measured. The e2e is timing-dependent, so the comparison is with its mean over
// the recorded runs; the simulator is deterministic, so this test is too.
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import {
  comparePredictions,
  e2ePlan,
  formatPredictions,
  type RecordedRun,
} from './helpers/replicas-sim.ts';

const runs = JSON.parse(
  readFileSync(new URL('./fixtures/replicas-e2e.json', import.meta.url), 'utf8'),
) as RecordedRun[];

describe('simulator vs the router-replicas e2e', () => {
  it('sends the e2e’s requests: same count, same token ids as the mock worker sees', () => {
    const plan = e2ePlan();
    const requests = plan.clients.flat();
    expect(requests.length).toBe(runs[0]?.rows[0]?.requests);
    // Turn 2 of a session extends turn 1's prompt (the cache can hit it).
    const [t1, t2] = plan.clients[0] as { inputIds: Uint32Array }[];
    expect(plan.clients).toHaveLength(24);
    expect(plan.activeClients).toBe(8);
    expect(t2?.inputIds.length).toBeGreaterThan(t1?.inputIds.length ?? 0);
  });

  it('predicts the hit rates within 3 points of the e2e mean', () => {
    const rows = comparePredictions(runs);
    console.log(`${runs.length} recorded e2e runs vs the simulator:\n${formatPredictions(runs)}`);
    const by = (replicas: number, source: string) => {
      const r = rows.find((x) => x.replicas === replicas && x.source === source);
      if (r === undefined) throw new Error(`no ${replicas} x ${source} comparison`);
      expect(r.sim.requests).toBe(runs[0]?.rows[0]?.requests);
      return r;
    };
    const one = by(1, 'learned');
    const events1 = by(1, 'events');
    const learned3 = by(3, 'learned');
    const events3 = by(3, 'events');
    for (const r of [one, events1, learned3, events3]) {
      expect(Math.abs(r.gapPt), `${r.replicas} x ${r.source}`).toBeLessThanOrEqual(3);
    }
    // The replica penalty and what events recover, as the e2e shows them.
    expect(learned3.sim.hitRate).toBeLessThan(one.sim.hitRate - 0.05);
    expect(events3.sim.hitRate).toBeGreaterThanOrEqual(0.97 * one.sim.hitRate);
  });
});
