// Dispatch tickets: the one load-accounting rule, bounded and exact under any interleaving.
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import {
  createDispatcher,
  createLoadTracker,
  type DispatchTicket,
  MAX_REQUEST_TOKENS,
  methodNames,
  type RouteRequest,
  requestTokens,
} from '../src/index.ts';

const nasty = fc.oneof(
  fc.constant(Number.MAX_VALUE),
  fc.constant(Number.NaN),
  fc.constant(Number.POSITIVE_INFINITY),
  fc.constant(Number.NEGATIVE_INFINITY),
  fc.constant(-1),
  fc.constant(0),
  fc.constant(2 ** 53),
  fc.constant(MAX_REQUEST_TOKENS + 1),
  fc.double(),
  fc.integer({ min: 0, max: 200_000 }),
);

describe('requestTokens', () => {
  it('is input + max new tokens for ordinary requests', () => {
    expect(requestTokens(1000, 256)).toBe(1256);
    expect(requestTokens(7, undefined)).toBe(7);
  });

  it('is a whole number in [0, MAX_REQUEST_TOKENS] for any inputs', () => {
    fc.assert(
      fc.property(nasty, nasty, (a, b) => {
        const t = requestTokens(a, b);
        expect(Number.isInteger(t)).toBe(true);
        expect(t).toBeGreaterThanOrEqual(0);
        expect(t).toBeLessThanOrEqual(MAX_REQUEST_TOKENS);
      }),
    );
    expect(requestTokens(Number.NaN, -5)).toBe(0);
    expect(requestTokens(10, Number.MAX_VALUE)).toBe(MAX_REQUEST_TOKENS);
    expect(requestTokens(Number.POSITIVE_INFINITY, 1)).toBe(MAX_REQUEST_TOKENS);
  });
});

/** One shared huge prompt: methods hash at most a bounded prefix of it. */
const HUGE = new Uint32Array(5_000_000).fill(3);

describe.each(methodNames())('dispatch tickets: %s', (method) => {
  it('leave every total finite, and at 0 once all are done, under any interleaving', () => {
    const step = fc.oneof(
      fc.record({
        op: fc.constant('begin' as const),
        inputLength: fc.oneof(fc.integer({ min: 0, max: 3000 }), fc.constant(5_000_000)),
        maxNewTokens: nasty,
      }),
      fc.record({ op: fc.constant('done' as const), which: fc.nat(), twice: fc.boolean() }),
    );
    fc.assert(
      fc.property(fc.array(step, { maxLength: 60 }), fc.integer({ min: 1, max: 5 }), (steps, n) => {
        const dispatcher = createDispatcher({ method });
        const tracker = createLoadTracker(n);
        const open: DispatchTicket[] = [];
        for (const s of steps) {
          if (s.op === 'begin') {
            const request: RouteRequest = {
              inputIds: s.inputLength > 3000 ? HUGE : new Array(s.inputLength).fill(3),
              maxNewTokens: s.maxNewTokens,
            };
            open.push(dispatcher.begin(request, tracker, { nowMs: open.length }));
          } else if (open.length > 0) {
            const [ticket] = open.splice(s.which % open.length, 1);
            expect(ticket?.done()).toBe(true);
            if (s.twice) expect(ticket?.done('aborted')).toBe(false);
          }
          for (const r of tracker.ranks) {
            expect(Number.isFinite(r.inFlightTokens)).toBe(true);
            expect(r.inFlightTokens).toBeGreaterThanOrEqual(0);
            expect(r.inFlightRequests).toBeGreaterThanOrEqual(0);
          }
        }
        const total = tracker.ranks.reduce((a, r) => a + r.inFlightTokens, 0);
        expect(total).toBe(open.reduce((a, t) => a + t.tokens, 0));
        for (const t of open.splice(0)) t.done();
        for (const r of tracker.ranks) {
          expect(r.inFlightTokens).toBe(0);
          expect(r.inFlightRequests).toBe(0);
        }
      }),
      { numRuns: 60 },
    );
  });
});

describe('DispatchTicket', () => {
  it('carries the decision and the rule, and a second done is harmless', () => {
    const dispatcher = createDispatcher({ method: 'total_tokens' });
    const tracker = createLoadTracker(2);
    const t = dispatcher.begin({ inputIds: [1, 2, 3], maxNewTokens: 10 }, tracker);
    expect(t).toMatchObject({ rank: 0, reason: 'least-tokens', tokens: 13, open: true });
    expect(tracker.ranks[0]).toMatchObject({ inFlightRequests: 1, inFlightTokens: 13 });
    expect(t.done()).toBe(true);
    expect(t.open).toBe(false);
    expect(t.done()).toBe(false);
    expect(tracker.ranks[0]).toMatchObject({ inFlightRequests: 0, inFlightTokens: 0 });
    expect(() => t.done('weird' as never)).toThrow(
      /outcome must be one of completed, aborted, failed/,
    );
  });

  it('decides on a view but accounts on the tracker', () => {
    const dispatcher = createDispatcher({ method: 'total_tokens' });
    const tracker = createLoadTracker(3);
    const view = tracker.ranks.map((r) => (r.rank === 0 ? { ...r, healthy: false } : r));
    const t = dispatcher.begin({ inputIds: [1], maxNewTokens: 1 }, tracker, { view });
    expect(t.rank).toBe(1);
    expect(tracker.ranks[1]?.inFlightTokens).toBe(2);
    expect(() => dispatcher.begin({}, tracker, { view: view.slice(1) })).toThrow(/ctx.view has 2/);
    t.done();
  });

  it('ignores a ticket whose rank was removed, even if a rank of that number came back', () => {
    const dispatcher = createDispatcher({ method: 'round_robin' });
    const tracker = createLoadTracker(2);
    dispatcher.begin({}, tracker);
    const second = dispatcher.begin({ inputIds: [1, 2], maxNewTokens: 5 }, tracker);
    expect(second.rank).toBe(1);
    tracker.resize(1);
    tracker.resize(2);
    const fresh = dispatcher.begin({ routedRank: 1, maxNewTokens: 4 }, tracker);
    expect(second.done()).toBe(true);
    expect(tracker.ranks[1]).toMatchObject({ inFlightRequests: 1, inFlightTokens: 4 });
    fresh.done();
    expect(tracker.ranks[1]).toMatchObject({ inFlightRequests: 0, inFlightTokens: 0 });
  });
});
