import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { describe, expect, it } from 'vitest';
import type { SendResult } from '../src/http-driver.ts';
import { loadRecord, openRecord, RECORD_FORMAT } from '../src/record.ts';
import { drivePlan, type Sender } from '../src/runner.ts';
import type { Observation, PlanRequest, ValidatePlan } from '../src/types.ts';

const r = (id: number, clientId: number, extra: Partial<PlanRequest> = {}): PlanRequest => ({
  id,
  clientId,
  inputIds: Uint32Array.of(id, id + 1, 7),
  outputTokens: 2,
  sessionKey: `c${clientId}`,
  ...extra,
});

/** A sender that answers after `ms` and logs starts and ends, with in-flight peak. */
function fakeSender(ms: number, fail?: (req: PlanRequest) => boolean) {
  const log: string[] = [];
  let inFlight = 0;
  let peak = 0;
  const sender: Sender = {
    async send(req, signal): Promise<SendResult> {
      const sentAt = performance.now();
      log.push(`start ${req.id}`);
      inFlight++;
      peak = Math.max(peak, inFlight);
      const aborted = await new Promise<boolean>((resolve) => {
        const t = setTimeout(() => resolve(false), ms);
        signal?.addEventListener('abort', () => {
          clearTimeout(t);
          resolve(true);
        });
      });
      inFlight--;
      log.push(`end ${req.id}`);
      const now = performance.now();
      if (aborted) return { status: 0, ok: false, error: 'aborted', sentAt, endAt: now };
      if (fail?.(req)) return { status: 500, ok: false, error: 'HTTP 500', sentAt, endAt: now };
      return {
        status: 200,
        ok: true,
        sentAt,
        firstContentAt: sentAt + ms / 2,
        endAt: now,
        promptTokens: req.inputIds.length,
        cachedTokens: 1,
        rank: req.clientId,
      };
    },
  };
  return { sender, log, peak: () => peak };
}

describe('drivePlan', () => {
  it('closed loop: each client sends in order, one at a time, clients in parallel', async () => {
    const plan: ValidatePlan = {
      scenario: 's',
      mode: 'closed',
      ranks: 2,
      clients: [
        [r(0, 0), r(1, 0, { thinkMs: 5 }), r(2, 0, { thinkMs: 5 })],
        [r(10, 1), r(11, 1, { thinkMs: 5 })],
      ],
      requests: [],
    };
    const f = fakeSender(10);
    const seen: number[] = [];
    const res = await drivePlan(plan, f.sender, { onResult: (o) => seen.push(o.id) });
    expect(res.interrupted).toBe(false);
    expect(res.unsent).toBe(0);
    expect(res.observations.map((o) => o.id).sort((a, b) => a - b)).toEqual([0, 1, 2, 10, 11]);
    // Within a client, a request starts only after the previous one ended.
    for (const [a, b] of [
      [0, 1],
      [1, 2],
      [10, 11],
    ] as const) {
      expect(f.log.indexOf(`start ${b}`)).toBeGreaterThan(f.log.indexOf(`end ${a}`));
    }
    expect(f.peak()).toBe(2);
    expect(seen).toHaveLength(5);
    const o = res.observations.find((x) => x.id === 1)!;
    expect(o).toMatchObject({
      ok: true,
      status: 200,
      clientId: 0,
      promptTokens: 3,
      cachedTokens: 1,
      rank: 0,
    });
    expect(o.ttftMs).toBeLessThanOrEqual(o.e2eMs);
  });

  it('open loop: requests leave in arrival order, never more than maxInFlight at once', async () => {
    const requests = Array.from({ length: 8 }, (_, i) => r(i, i, { arrivalMs: 0 }));
    const plan: ValidatePlan = { scenario: 's', mode: 'open', ranks: 2, clients: [], requests };
    const f = fakeSender(15);
    const res = await drivePlan(plan, f.sender, { maxInFlight: 3 });
    expect(f.peak()).toBe(3);
    expect(res.observations).toHaveLength(8);
    expect(res.delayedByConcurrency).toBeGreaterThan(0);
    const starts = f.log.filter((l) => l.startsWith('start')).map((l) => Number(l.split(' ')[1]));
    expect(starts).toEqual([0, 1, 2, 3, 4, 5, 6, 7]);
  });

  it('time scale stretches waits and shrinks observed times back into plan time', async () => {
    const plan: ValidatePlan = {
      scenario: 's',
      mode: 'open',
      ranks: 1,
      clients: [],
      requests: [r(0, 0, { arrivalMs: 0 }), r(1, 0, { arrivalMs: 10 })],
    };
    const f = fakeSender(20);
    const res = await drivePlan(plan, f.sender, { timeScale: 2 });
    const o1 = res.observations.find((o) => o.id === 1)!;
    // Sent no earlier than 10 plan ms = 20 wall ms; a 20 wall-ms reply is 10 plan ms.
    expect(o1.startMs).toBeGreaterThanOrEqual(10 - 1);
    expect(o1.e2eMs).toBeLessThan(res.wallMs);
    expect(res.wallMs).toBeGreaterThanOrEqual(20 + 20 - 2);
  });

  it('failures are observations, not exceptions', async () => {
    const plan: ValidatePlan = {
      scenario: 's',
      mode: 'closed',
      ranks: 1,
      clients: [[r(0, 0), r(1, 0)]],
      requests: [],
    };
    const f = fakeSender(1, (q) => q.id === 1);
    const res = await drivePlan(plan, f.sender);
    expect(res.observations.map((o) => [o.id, o.ok, o.status])).toEqual([
      [0, true, 200],
      [1, false, 500],
    ]);
  });

  it('abort stops sending, drops the cut-off requests and reports the rest', async () => {
    const plan: ValidatePlan = {
      scenario: 's',
      mode: 'closed',
      ranks: 1,
      clients: [Array.from({ length: 50 }, (_, i) => r(i, 0))],
      requests: [],
    };
    const f = fakeSender(10);
    const ac = new AbortController();
    setTimeout(() => ac.abort(), 45);
    const res = await drivePlan(plan, f.sender, { signal: ac.signal });
    expect(res.interrupted).toBe(true);
    expect(res.observations.length).toBeGreaterThan(0);
    expect(res.observations.length).toBeLessThan(50);
    expect(res.observations.every((o) => o.ok)).toBe(true);
    expect(res.unsent).toBe(50 - res.observations.length);
  });
});

describe('record and replay', () => {
  const dir = mkdtempSync(join(tmpdir(), 'kvroute-validate-'));
  const header = {
    format: RECORD_FORMAT,
    scenario: 'seed-sequential',
    mode: 'closed',
    ranks: 4,
    seed: 7,
  } as const;

  it('round-trips a closed-loop run into the same plan, even when written out of order', () => {
    const plan: ValidatePlan = {
      scenario: 'seed-sequential',
      mode: 'closed',
      ranks: 4,
      clients: [[r(0, 0, { routingKey: 'k0', tenant: 't' }), r(1, 0, { thinkMs: 250 })], [r(5, 1)]],
      requests: [],
    };
    const path = join(dir, 'closed.jsonl');
    const w = openRecord(path, header, plan);
    const obs = (req: PlanRequest): Observation => ({
      id: req.id,
      clientId: req.clientId,
      status: 200,
      ok: true,
      startMs: req.id,
      ttftMs: 3,
      e2eMs: 9,
      promptTokens: 3,
      cachedTokens: 2,
    });
    for (const req of [plan.clients[1]![0]!, plan.clients[0]![0]!, plan.clients[0]![1]!])
      w.write(req, obs(req));
    w.close();
    const lines = readFileSync(path, 'utf8').trim().split('\n');
    expect(lines).toHaveLength(4);
    expect(JSON.parse(lines[0]!)).toMatchObject(header);
    expect(JSON.parse(lines[1]!)).toMatchObject({
      id: 5,
      clientId: 1,
      seq: 0,
      inputIds: [5, 6, 7],
      observed: { ok: true, cachedTokens: 2 },
    });

    const back = loadRecord(path);
    expect(back.header.seed).toBe(7);
    expect(back.plan.mode).toBe('closed');
    expect(back.plan.ranks).toBe(4);
    expect(back.plan.clients.map((c) => c.map((q) => q.id))).toEqual([[0, 1], [5]]);
    const q0 = back.plan.clients[0]![0]!;
    expect(Array.from(q0.inputIds)).toEqual([0, 1, 7]);
    expect(q0).toMatchObject({ routingKey: 'k0', tenant: 't', outputTokens: 2, sessionKey: 'c0' });
    expect(back.plan.clients[0]![1]!.thinkMs).toBe(250);
  });

  it('open-loop recordings come back sorted by arrival', () => {
    const reqs = [
      r(2, 2, { arrivalMs: 30 }),
      r(0, 0, { arrivalMs: 0 }),
      r(1, 1, { arrivalMs: 10 }),
    ];
    const plan: ValidatePlan = {
      scenario: 'agentic',
      mode: 'open',
      ranks: 2,
      clients: [],
      requests: reqs,
    };
    const path = join(dir, 'open.jsonl');
    const w = openRecord(path, { ...header, scenario: 'agentic', mode: 'open' }, plan);
    for (const q of reqs)
      w.write(q, { id: q.id, clientId: q.clientId, status: 200, ok: true, startMs: 0, e2eMs: 1 });
    w.close();
    expect(loadRecord(path).plan.requests.map((q) => q.id)).toEqual([0, 1, 2]);
  });

  it('names the file and line of a malformed recording', () => {
    const path = join(dir, 'bad.jsonl');
    writeFileSync(path, `${JSON.stringify(header)}\n{"type":"request","id":1}\n`);
    expect(() => loadRecord(path)).toThrow(`${path}:2: clientId must be a non-negative integer`);
    writeFileSync(path, `${JSON.stringify(header)}\nnot json\n`);
    expect(() => loadRecord(path)).toThrow(`${path}:2: not valid JSON`);
    writeFileSync(path, '{"format":"something-else"}\n');
    expect(() => loadRecord(path)).toThrow(`${path}:1: not a validate recording`);
    expect(() => loadRecord(join(dir, 'missing.jsonl'))).toThrow(/--replay: cannot read/);
    const line = {
      type: 'request',
      id: 1,
      clientId: 0,
      seq: 0,
      inputIds: [1, -2],
      outputTokens: 1,
      sessionKey: 's',
      observed: {},
    };
    writeFileSync(path, `${JSON.stringify(header)}\n${JSON.stringify(line)}\n`);
    expect(() => loadRecord(path)).toThrow(
      `${path}:2: inputIds must be an array of integers in [0, 2^32)`,
    );
  });
});
