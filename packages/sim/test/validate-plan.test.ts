import { describe, expect, it } from 'vitest';
import { restrictPlan, scalePlan } from '../src/validate/plan.ts';
import { planSize } from '../src/validate/runner.ts';
import type { PlanRequest, ValidatePlan } from '../src/validate/types.ts';

const r = (id: number, clientId: number, arrivalMs?: number): PlanRequest => ({
  id,
  clientId,
  inputIds: Uint32Array.of(id),
  outputTokens: 1,
  sessionKey: `c${clientId}`,
  ...(arrivalMs !== undefined ? { arrivalMs } : {}),
});

function closed(): ValidatePlan {
  const clients = [0, 1, 2].map((c) => [0, 1, 2, 3].map((k) => r(c * 10 + k, c)));
  return { scenario: 's', mode: 'closed', ranks: 4, clients, requests: clients.flat() };
}

describe('scalePlan', () => {
  it('closed loop: with equal think times --requests keeps whole rounds, each client in order', () => {
    const p = scalePlan(closed(), { requests: 7 });
    expect(p.clients.map((c) => c.map((q) => q.id))).toEqual([
      [0, 1, 2],
      [10, 11],
      [20, 21],
    ]);
    expect(planSize(p)).toBe(7);
    expect(p.requests.map((q) => q.id).sort((a, b) => a - b)).toEqual([0, 1, 2, 10, 11, 20, 21]);
  });
  it('closed loop: --requests follows nominal start times, so early sessions keep their turns', () => {
    const think = (id: number, clientId: number, thinkMs: number) => ({
      ...r(id, clientId),
      thinkMs,
    });
    const clients = [
      [think(0, 0, 0), think(1, 0, 10), think(2, 0, 10)],
      [think(10, 1, 100), think(11, 1, 10)],
      [think(20, 2, 15)],
    ];
    const plan: ValidatePlan = { scenario: 's', mode: 'closed', ranks: 2, clients, requests: [] };
    // Nominal starts: 0, 10, 20 | 100, 110 | 15.
    expect(scalePlan(plan, { requests: 3 }).clients.map((c) => c.map((q) => q.id))).toEqual([
      [0, 1],
      [20],
    ]);
    expect(scalePlan(plan, { requests: 5 }).clients.map((c) => c.map((q) => q.id))).toEqual([
      [0, 1, 2],
      [10],
      [20],
    ]);
  });
  it('closed loop: --concurrency keeps the first clients', () => {
    const p = scalePlan(closed(), { concurrency: 2, requests: 3 });
    expect(p.clients.map((c) => c.map((q) => q.id))).toEqual([[0, 1], [10]]);
  });
  it('open loop: --requests keeps the earliest arrivals; --concurrency cuts nothing', () => {
    const requests = [r(0, 0, 0), r(1, 1, 5), r(2, 2, 9)];
    const open: ValidatePlan = { scenario: 's', mode: 'open', ranks: 2, clients: [], requests };
    expect(scalePlan(open, { requests: 2 }).requests.map((q) => q.id)).toEqual([0, 1]);
    expect(planSize(scalePlan(open, { concurrency: 1 }))).toBe(3);
  });
  it('keeps fields it does not know (events, durations) for the simulator', () => {
    const p = scalePlan(
      { ...closed(), events: [], warmupMs: 5 } as ValidatePlan & { warmupMs: number },
      {
        requests: 1,
      },
    );
    expect(p.warmupMs).toBe(5);
  });
});

describe('restrictPlan', () => {
  it('keeps only the given ids and drops emptied clients', () => {
    const p = restrictPlan(closed(), new Set([0, 1, 20]));
    expect(p.clients.map((c) => c.map((q) => q.id))).toEqual([[0, 1], [20]]);
  });
});
