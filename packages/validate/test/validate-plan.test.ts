import { describe, expect, it } from 'vitest';
import { parseValidateArgs } from '../src/options.ts';
import { restrictPlan, scalePlan } from '../src/plan.ts';
import { planSize } from '../src/runner.ts';
import type { PlanRequest, ValidatePlan } from '../src/types.ts';

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

describe('parseValidateArgs: the documented flags', () => {
  const methods = ['round_robin', 'prefix_match', 'cache_aware'];
  const base = ['--target', 'http://127.0.0.1:1', '--scenario', 'agentic'];

  it('reads --policy-label, --profile-file, --requests, --concurrency, --json and --html', () => {
    const o = parseValidateArgs(
      [
        ...base,
        '--policy-label',
        'my fleet',
        '--profile-file',
        'p.json',
        '--requests',
        '40',
        '--concurrency',
        '3',
        '--json',
        'r.json',
        '--html',
        'r.html',
      ],
      methods,
    );
    expect(o).toMatchObject({
      policyLabel: 'my fleet',
      profileFile: 'p.json',
      requests: 40,
      concurrency: 3,
      json: 'r.json',
      html: 'r.html',
    });
    // A free-text label does not choose the method: the target's reported one will.
    expect(o.policyChosen).toBe(false);
    expect(o.policy.method).toBe('prefix_match');
  });

  it('a label that names a method predicts with it; --policy wins over the label', () => {
    expect(parseValidateArgs([...base, '--policy-label', 'cache_aware'], methods)).toMatchObject({
      policy: { method: 'cache_aware' },
      policyChosen: true,
    });
    const both = parseValidateArgs(
      [...base, '--policy-label', 'cache_aware', '--policy', 'round_robin', '--profile', 'x'],
      methods,
    );
    expect(both).toMatchObject({ policy: { method: 'round_robin' }, policyLabel: 'cache_aware' });
    expect(() => parseValidateArgs([...base, '--profile', 'a', '--profile-file', 'b'])).toThrow(
      /--profile and --profile-file exclude each other/,
    );
    expect(() => parseValidateArgs([...base, '--concurrency', '0'])).toThrow(/--concurrency/);
  });
});
