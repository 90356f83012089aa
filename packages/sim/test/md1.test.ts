// An analytic check of the event engine and the rank's queue: one rank serving one request at
// a time, Poisson arrivals, every request the same fixed cost, is an M/D/1 queue, whose mean
// wait is known exactly (Pollaczek-Khinchine): Wq = rho * D / (2 * (1 - rho)).
import { describe, expect, it } from 'vitest';
import { costModelFromSpec } from '../src/cost/cost-model.ts';
import { simulatePlan } from '../src/simulate.ts';
import { stream } from '../src/workloads/random.ts';
import type { WorkloadPlan, WorkloadRequest } from '../src/workloads/types.ts';

const SERVICE_MS = 10;

// Every prefill step costs exactly SERVICE_MS whatever it holds; one output token, so a
// request is done when its prefill is.
const profile = costModelFromSpec({
  format: 'kvroute-cost-profile/v1',
  name: 'md1',
  description: 'fixed service time',
  prefill: { floorMs: SERVICE_MS, perTokenMs: 0, attnMsPerMTokenPairs: 0 },
  decode: { floorMs: 1, perSeqMs: 0, perKContextTokenMs: 0 },
  kvCapacityTokens: 1_000_000,
  chunkedPrefillSize: 8192,
});

function poissonPlan(rho: number, n: number, seed: string): WorkloadPlan {
  const rand = stream(seed, 'arrivals');
  const meanGap = SERVICE_MS / rho;
  const ids = Uint32Array.from([7, 8]); // the same prompt: the cache stays one node
  const requests: WorkloadRequest[] = [];
  let t = 0;
  for (let i = 0; i < n; i++) {
    t += -Math.log(1 - rand()) * meanGap;
    requests.push({
      id: i,
      clientId: 0,
      inputIds: ids,
      outputTokens: 1,
      arrivalMs: t,
      sessionKey: 's',
    });
  }
  return { scenario: 'md1', mode: 'open', ranks: 1, clients: [], requests, events: [] };
}

describe('M/D/1: one rank, one request at a time, Poisson arrivals, fixed service time', () => {
  // Enough requests that the sample mean is within about 1% at rho 0.9 (the wait's
  // autocorrelation grows like 1/(1-rho)^2); fixed seed, so the test is deterministic.
  const N = 300_000;
  for (const rho of [0.5, 0.8, 0.9]) {
    it(`mean wait within 3% of Pollaczek-Khinchine at utilisation ${rho}`, () => {
      const plan = poissonPlan(rho, N, `md1-${rho}`);
      const { records } = simulatePlan(plan, {
        policy: { method: 'round_robin' },
        profile,
        seed: 1,
        rank: { maxRunningRequests: 1 },
      });
      expect(records.length).toBe(N);
      const wait = records.reduce((a, r) => a + r.queueMs, 0) / N;
      const expected = (rho * SERVICE_MS) / (2 * (1 - rho));
      const err = (wait - expected) / expected;
      console.log(
        `M/D/1 rho=${rho}: mean wait ${wait.toFixed(3)} ms, P-K ${expected.toFixed(3)} ms, error ${(err * 100).toFixed(2)}%`,
      );
      expect(Math.abs(err)).toBeLessThan(0.03);
      // Service is exactly SERVICE_MS: TTFT = wait + service for every request.
      for (let i = 0; i < N; i += 997) {
        expect(records[i]!.ttftMs - records[i]!.queueMs).toBeCloseTo(SERVICE_MS, 6);
      }
      // 300,000 requests take 10-30 s on a shared 2-core machine: a limit, not a speed check.
    }, 180_000);
  }
});
