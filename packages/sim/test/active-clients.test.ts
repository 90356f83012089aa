// Closed loop with a session queue (WorkloadPlan.activeClients): at most N clients run at
// once, the next starting when one finishes its last request, as a benchmark client taking
// sessions from a queue does.
import { describe, expect, it } from 'vitest';
import { getProfile } from '../src/cost/profiles.ts';
import { simulatePlan } from '../src/simulate.ts';
import type { WorkloadPlan, WorkloadRequest } from '../src/workloads/types.ts';

function plan(activeClients?: number): WorkloadPlan {
  let id = 0;
  const clients = Array.from({ length: 4 }, (_, c) =>
    c === 2
      ? [] // an empty client must not hold a slot
      : Array.from(
          { length: 3 },
          (): WorkloadRequest => ({
            id: id++,
            clientId: c,
            inputIds: Uint32Array.from({ length: 512 }, (_, i) => 1 + ((c * 1000 + i) % 29_000)),
            outputTokens: 8,
            thinkMs: 10,
            sessionKey: `s${c}`,
          }),
        ),
  );
  return {
    scenario: 'queue',
    mode: 'closed',
    ranks: 2,
    clients,
    requests: [],
    events: [],
    ...(activeClients !== undefined ? { activeClients } : {}),
  };
}

const run = (activeClients?: number) =>
  simulatePlan(plan(activeClients), {
    policy: { method: 'round_robin' },
    profile: getProfile('h200-llama-3.1-8b'),
    seed: 1,
  });

describe('activeClients', () => {
  it('runs one session at a time with 1, every request still served', () => {
    const { records, summary } = run(1);
    expect(summary.requests).toBe(9);
    expect(summary.failed).toBe(0);
    const byArrival = [...records].sort((a, b) => a.arrivalMs - b.arrivalMs);
    expect(byArrival.map((r) => r.clientId)).toEqual([0, 0, 0, 1, 1, 1, 3, 3, 3]);
    for (let i = 1; i < byArrival.length; i++) {
      // Never two in flight: each request starts after the previous one ended.
      expect(byArrival[i]!.arrivalMs).toBeGreaterThanOrEqual(byArrival[i - 1]!.endMs);
    }
  });

  it('runs every client at once by default, and rejects a bad count by name', () => {
    const all = run().records;
    expect(
      all
        .filter((r) => r.arrivalMs === 10)
        .map((r) => r.clientId)
        .sort(),
    ).toEqual([0, 1, 3]);
    expect(run(3).records).toEqual(all);
    expect(() => run(0)).toThrow(/activeClients must be an integer >= 1/);
  });
});
