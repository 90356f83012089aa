// Fault injection: one of four workers misbehaves in each of the ways real engines and
// networks do, under concurrent load, and every client must get a complete answer or an
// explicit error: none lost, no garbage with status 200; requests whose failure came before
// any byte reached the client succeed on another rank; the bad worker is ejected, and
// readmitted once it recovers. Sizes are small and bounded; the figures at scale are printed
// by `pnpm --filter @kvroute/router fault-bench`, not asserted here.
import type { FastifyInstance } from 'fastify';
import { afterEach, describe, expect, it } from 'vitest';
import { runLoad } from './helpers/fault-client.ts';
import {
  FAULT_MODES,
  type FaultyWorker,
  failsBeforeClientBytes,
  startFaultyWorker,
} from './helpers/faulty-worker.ts';
import { listenRouter, NO_ACTIVE_CHECKS } from './helpers/router.ts';

const cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  while (cleanups.length) await cleanups.pop()!();
});

async function fleet(): Promise<{ app: FastifyInstance; url: string; bad: FaultyWorker }> {
  const ws = await Promise.all([0, 1, 2, 3].map(() => startFaultyWorker('ok')));
  for (const w of ws) cleanups.push(() => w.close());
  const { app, url } = await listenRouter(
    [
      '--worker-urls',
      ...ws.map((w) => w.url),
      // Round robin gives the bad worker its quarter of the traffic whatever the timing, so
      // it always sees enough requests to be ejected; the failure model is the same for
      // every method, and the cache-aware default is exercised by fault-bench.
      '--load-balance-method',
      'round_robin',
      ...NO_ACTIVE_CHECKS,
      '--first-byte-timeout-ms',
      '300',
      '--prefill-tokens-per-sec',
      '1000000',
      '--decode-ms-per-token',
      '0',
      '--idle-timeout-ms',
      '300',
      '--outlier-base-ejection-ms',
      '400',
      // Deterministic here: the budget's own behaviour is tested below.
      '--retry-min-concurrency',
      '16',
      '--log-level',
      'silent',
    ],
    cleanups,
  );
  return { app, url, bad: ws[0]! };
}

describe('one of four workers misbehaves, 8 clients at once', () => {
  it.each(FAULT_MODES)(
    '%s: none lost, no garbage 200, retried where nothing was sent',
    async (mode) => {
      const { app, url, bad } = await fleet();
      bad.mode = mode;
      const outcomes = await runLoad(url, { total: 48, concurrency: 8, timeoutMs: 10_000 });
      expect(outcomes).toHaveLength(48);
      expect(outcomes.filter((o) => o.lost)).toEqual([]);
      expect(outcomes.filter((o) => o.garbage200)).toEqual([]);
      for (const stream of [false, true]) {
        const these = outcomes.filter((o) => o.stream === stream);
        if (failsBeforeClientBytes(mode, stream) || mode === 'slow-trickle') {
          // Failures preceded any client byte: every one was retried elsewhere and succeeded.
          expect(these.filter((o) => !o.ok)).toEqual([]);
        } else {
          // The stream had bytes: the failures that remain are explicit error events.
          expect(these.every((o) => o.ok || o.explicitError)).toBe(true);
        }
      }
      const worker = app.kvroute.table.worker(bad.url)!;
      if (mode === 'slow-trickle') {
        expect(app.kvroute.outlier.ejectionsTotal).toBe(0);
        return;
      }
      // Ejected (or, for a refused connection, marked down) after its failures ...
      expect(app.kvroute.outlier.ejectionsTotal).toBeGreaterThanOrEqual(1);
      const metrics = (await app.inject('/metrics')).body;
      expect(metrics).toMatch(/kvroute_router_upstream_failures_total\{rank="0"/);
      expect(metrics).toContain('# TYPE kvroute_router_ejections_total counter');
      const counted = /^kvroute_router_ejections_total (\d+)$/m.exec(metrics);
      expect(Number(counted?.[1])).toBe(app.kvroute.outlier.ejectionsTotal);
      expect(metrics).not.toContain(bad.url);
      // ... and readmitted once it recovers: the half-open probe passes, then a request proves it.
      bad.mode = 'ok';
      for (let i = 0; i < 200 && worker.ejected; i++) await new Promise((r) => setTimeout(r, 20));
      expect(worker.ejected).toBe(false);
      const before = bad.requests;
      const after = await runLoad(url, { total: 24, concurrency: 4 });
      // Served again: it takes requests, and they succeed. The fleet's 300 ms first-byte and
      // idle bounds are tight on purpose (the faults above are found fast); on a machine
      // whose test processes fill both cores, a healthy answer can miss them now and then,
      // which ends as a retry or an explicit error, never a loss: so at most a few misses.
      expect(after.filter((o) => o.lost || o.garbage200)).toEqual([]);
      expect(after.every((o) => o.ok || o.explicitError || o.status >= 500)).toBe(true);
      expect(after.filter((o) => o.ok).length).toBeGreaterThanOrEqual(after.length - 2);
      expect(bad.requests).toBeGreaterThan(before);
      expect(app.kvroute.table.tracker.ranks.every((r) => r.inFlightRequests === 0)).toBe(true);
    },
  );
});

describe('retry budget', () => {
  it('when every worker fails, retries stay within the budget instead of multiplying load', async () => {
    const ws = await Promise.all([0, 1, 2, 3].map(() => startFaultyWorker('status-500')));
    for (const w of ws) cleanups.push(() => w.close());
    const { url } = await listenRouter(
      [
        '--worker-urls',
        ...ws.map((w) => w.url),
        ...NO_ACTIVE_CHECKS,
        '--outlier-consecutive-failures',
        '0',
        '--retry-min-concurrency',
        '1',
        '--retry-budget-percent',
        '0',
        '--retry-backoff-base-ms',
        '20',
      ],
      cleanups,
    );
    const outcomes = await runLoad(url, { total: 32, concurrency: 16 });
    // The worker's own 500 when no retry was allowed; 502 if the slot went in between.
    expect(outcomes.every((o) => o.explicitError && [500, 502].includes(o.status))).toBe(true);
    expect(outcomes.filter((o) => o.status === 500).length).toBeGreaterThan(0);
    const attempts = ws.reduce((n, w) => n + w.requests, 0);
    // Unbudgeted, 32 requests x (1 + 2 retries) = 96 attempts; one retry slot allows far fewer.
    expect(attempts).toBeLessThan(96);
    expect(attempts).toBeGreaterThanOrEqual(32);
  });
});
