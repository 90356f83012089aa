// The prefill/decode-disaggregated layout: the decode server entity, the PD host, the layout
// comparison and its CLI.
import { mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { kvTransferMs, profileKvBytesPerToken } from '../src/cost/kv-transfer.ts';
import { getProfile } from '../src/cost/profiles.ts';
import { EventQueue } from '../src/engine/event-queue.ts';
import { compareLayouts, replyShare } from '../src/pd/compare-layouts.ts';
import { DecodeRankModel } from '../src/pd/decode-rank.ts';
import { simulatePd } from '../src/pd/simulate-pd.ts';
import { buildWorkload } from '../src/workloads/registry.ts';
import type { WorkloadPlan, WorkloadRequest } from '../src/workloads/types.ts';
import { runSimCli } from './helpers/cli.ts';

const profile = getProfile('h200-llama-3.1-8b');

function burst(n: number, len: number, out: number, shared = 0): WorkloadPlan {
  const requests: WorkloadRequest[] = [];
  for (let i = 0; i < n; i++) {
    requests.push({
      id: i,
      clientId: i,
      inputIds: Uint32Array.from({ length: len }, (_, j) =>
        j < shared ? 1 + j : 1 + ((i * len + j) % 29_999),
      ),
      outputTokens: out,
      arrivalMs: i * 50,
      sessionKey: `s${i}`,
    });
  }
  return { scenario: 'burst', mode: 'open', ranks: 2, clients: [], requests, events: [] };
}

describe('DecodeRankModel', () => {
  it('grants KV room in arrival order, holds the rest until a request finishes, and emits the first token at the next step boundary', () => {
    const q = new EventQueue();
    // Room for two requests of 100 input + 10 output at a time.
    const rank = new DecodeRankModel({ rank: 0, profile, scheduler: q, kvCapacityTokens: 220 });
    const log: string[] = [];
    const first: number[] = [];
    const ends: number[] = [];
    for (const id of [0, 1, 2]) {
      rank.reserve({
        id,
        inputTokens: 100,
        maxNewTokens: 10,
        onReserved: (t) => {
          log.push(`reserved ${id} at ${t}`);
          // The KV arrives 5 ms after the room is granted.
          q.at(t + 5, () => rank.arrive(id));
        },
        onFirstToken: (t) => first.push(t),
        onFinish: (t, info) => {
          expect(info.outputTokens).toBe(10);
          ends.push(t);
        },
      });
    }
    expect(log).toEqual(['reserved 0 at 0', 'reserved 1 at 0']);
    expect(rank.load()).toEqual({ runningRequests: 0, waitingRequests: 1, usedTokens: 220 });
    q.run();
    // Both joined together at 5 ms; nine decode steps of a batch of two later they finished
    // and request 2 got its room.
    expect(first.slice(0, 2)).toEqual([5, 5]);
    let t = 5;
    for (let j = 0; j < 9; j++) t += profile.decodeStepMs(2, 2 * 101 + 2 * j);
    expect(ends[0]).toBeCloseTo(t, 9);
    expect(log[2]).toBe(`reserved 2 at ${ends[0]}`);
    expect(first[2]).toBeCloseTo(ends[0]! + 5, 9);
    expect(rank.stats()).toMatchObject({ requests: 3, finished: 3, peakReservedTokens: 220 });
  });

  it('takes a request in at the next step boundary of a running batch, not mid-step', () => {
    const q = new EventQueue();
    const rank = new DecodeRankModel({ rank: 0, profile, scheduler: q });
    let firstB = -1;
    rank.reserve({
      id: 'a',
      inputTokens: 50,
      maxNewTokens: 100,
      onReserved: () => rank.arrive('a'),
      onFirstToken: () => {},
      onFinish: () => {},
    });
    const step = profile.decodeStepMs(1, 51);
    q.at(step * 2.5, () =>
      rank.reserve({
        id: 'b',
        inputTokens: 50,
        maxNewTokens: 5,
        onReserved: () => rank.arrive('b'),
        onFirstToken: (t) => {
          firstB = t;
        },
        onFinish: () => {},
      }),
    );
    q.run();
    // 'a' had finished three steps (one token each after its first) when 'b' was taken in.
    let boundary = 0;
    for (let j = 0; j < 3; j++) boundary += profile.decodeStepMs(1, 51 + j);
    expect(firstB).toBeCloseTo(boundary, 9);
  });

  it('refuses a request larger than the pool and KV for a request not waiting for it', () => {
    const q = new EventQueue();
    const rank = new DecodeRankModel({ rank: 3, profile, scheduler: q, kvCapacityTokens: 100 });
    const noop = { onReserved: () => {}, onFirstToken: () => {}, onFinish: () => {} };
    expect(() => rank.reserve({ id: 1, inputTokens: 95, maxNewTokens: 10, ...noop })).toThrow(
      /decode rank 3: request 1 needs 105 KV tokens/,
    );
    expect(() => rank.arrive(7)).toThrow(/KV arrived for request 7, which is not waiting/);
  });
});

describe('simulatePd', () => {
  const base = {
    prefillPolicy: { method: 'cache_aware' },
    decodePolicy: { method: 'total_tokens' },
    prefillRanks: 2,
    decodeRanks: 2,
    profile,
    seed: 1,
    link: { gbps: 100, setupMs: 2 },
  };

  it('charges prefill, the whole-prompt transfer and the decode join in every TTFT', () => {
    const plan = burst(12, 3000, 20, 2000);
    const run = simulatePd(plan, base);
    expect(run.summary.requests).toBe(12);
    expect(run.summary.failed).toBe(0);
    const bytes = profileKvBytesPerToken(profile);
    for (const r of run.records) {
      const transfer = kvTransferMs(r.inputTokens, bytes, base.link);
      // The transfer moves every prompt token, cached or not.
      expect(r.transferMs).toBeGreaterThanOrEqual(transfer - 1e-9);
      const floor =
        profile.prefillFloorMs(r.inputTokens - r.cachedTokens, r.cachedTokens) + transfer;
      expect(r.ttftMs).toBeGreaterThanOrEqual(floor - 1e-6);
      expect(r.prefillDoneMs + r.transferMs).toBeLessThanOrEqual(r.arrivalMs + r.ttftMs + 1e-9);
      expect(r.decodeRank).toBeGreaterThanOrEqual(0);
      expect(r.itlMs).toBeGreaterThan(0);
    }
    // The shared 2000-token prefix is found on the prefill side once it is there.
    expect(run.summary.hitRate).toBeGreaterThan(0.5);
    expect(run.pd.decodePerRank.map((d) => d.requests).reduce((a, b) => a + b, 0)).toBe(12);
    expect(run.pd.gpus).toBe(4);
  });

  it('is deterministic', () => {
    const plan = buildWorkload('agentic', { sessions: 10, sessionsPerS: 2, turnsMax: 4 }, 3);
    const a = simulatePd(plan, base);
    const b = simulatePd(plan, base);
    expect(JSON.stringify(a.records)).toBe(JSON.stringify(b.records));
    expect(a.pd).toEqual(b.pd);
  });

  it('queues for decode KV when the decode side is full, and still completes everything', () => {
    const plan = burst(16, 2000, 200);
    const roomy = simulatePd(plan, base);
    const tight = simulatePd(plan, { ...base, decodeKvCapacityTokens: 4500 });
    expect(tight.summary.requests).toBe(16);
    expect(tight.pd.decodeWaitMs.p90).toBeGreaterThan(0);
    expect(roomy.pd.decodeWaitMs.p90).toBe(0);
    expect(tight.summary.ttftMs.p90).toBeGreaterThan(roomy.summary.ttftMs.p90);
    for (const d of tight.pd.decodePerRank) expect(d.peakReservedTokens).toBeLessThanOrEqual(4500);
  });

  it('a slower link adds the difference in transfer time to TTFT', () => {
    const plan = burst(4, 4000, 4);
    const fast = simulatePd(plan, { ...base, link: { gbps: 400, setupMs: 0 } });
    const slow = simulatePd(plan, { ...base, link: { gbps: 50, setupMs: 0 } });
    const bytes = profileKvBytesPerToken(profile);
    const extra =
      kvTransferMs(4000, bytes, { gbps: 50, setupMs: 0 }) -
      kvTransferMs(4000, bytes, { gbps: 400, setupMs: 0 });
    // Requests 50 ms apart never share a link here, so the difference is exact.
    expect(slow.records[0]!.ttftMs - fast.records[0]!.ttftMs).toBeCloseTo(extra, 6);
  });

  it('refuses what it does not model, naming it', () => {
    const plan = buildWorkload('rank-failure', { sessions: 4, ranks: 4 }, 1);
    expect(() => simulatePd(plan, base)).toThrow(/does not model cluster events/);
    expect(() => simulatePd(burst(1, 10, 1), { ...base, prefillRanks: 0 })).toThrow(
      /prefill ranks must be an integer >= 1/,
    );
    expect(() => simulatePd(burst(1, 10, 1), { ...base, link: { gbps: -1 } })).toThrow(/gbps/);
    const { memory: _m, ...bare } = profile;
    expect(() => simulatePd(burst(1, 10, 1), { ...base, profile: bare })).toThrow(
      /has no memory model/,
    );
  });
});

describe('compareLayouts', () => {
  it('runs colocated at the same GPU count and at the prefill GPU count, then each split', () => {
    const plan = buildWorkload('agentic', { sessions: 8, sessionsPerS: 2, turnsMax: 3 }, 2);
    const c = compareLayouts(plan, {
      profile,
      seed: 1,
      prefillPolicy: { method: 'cache_aware' },
      decodePolicy: { method: 'total_tokens' },
      splits: [[2, 2]],
    });
    expect(c.rows.map((r) => r.label)).toEqual(['colocated x4', 'colocated x2', 'pd 2:2']);
    expect(c.rows.map((r) => r.gpus)).toEqual([4, 2, 4]);
    for (const r of c.rows) {
      expect(r.failed).toBe(0);
      expect(r.itlMs.p50).toBeGreaterThan(0);
      expect(r.ttftSamples.length).toBe(r.requests);
    }
    expect(c.targets).toEqual([
      {
        split: [2, 2],
        pdHitRate: c.rows[2]!.hitRate,
        colocatedHitRate: c.rows[1]!.hitRate,
        met: c.rows[2]!.hitRate >= c.rows[1]!.hitRate,
        replyShare: expect.any(Number),
      },
    ]);
  });
});

describe('kvroute-sim run --layout pd', () => {
  const dir = mkdtempSync(join(tmpdir(), 'kvroute-sim-pd-'));
  const cli = (args: string[]) => runSimCli(args, dir);
  const SMALL = ['--scenario', 'agentic', '--set', 'sessions=6', '--set', 'turnsMax=3'];

  it('prints one row per layout and the hit-rate target line, and writes markdown and HTML', async () => {
    const r = await cli([
      'run',
      ...SMALL,
      '--ranks',
      '4',
      '--layout',
      'pd',
      '--prefill-ranks',
      '1',
      '--decode-ranks',
      '3',
      '--link-gbps',
      '200',
      '--prefill-policy',
      'cache_aware',
      '--decode-policy',
      'round_robin',
      '--md',
      'pd.md',
      '--html',
      'pd.html',
    ]);
    expect(r.code).toBe(0);
    const rows = r.stdout.split('\n').filter((l) => /^(colocated|pd) /.test(l));
    expect(rows.map((l) => l.split(/\s{2,}/)[0])).toEqual([
      'colocated x4',
      'colocated x1',
      'pd 1:3',
    ]);
    expect(r.stdout).toContain('cache_aware / round_robin');
    expect(r.stdout).toMatch(/hit-rate target, pd 1:3: prefill side .* (met|MISSED)/);
    expect(r.stdout).toContain('link 200 Gb/s + 1 ms setup');
    const md = readFileSync(join(dir, 'pd.md'), 'utf8');
    expect(md).toContain('| pd 1:3 | 4 | cache_aware / round_robin |');
    const html = readFileSync(join(dir, 'pd.html'), 'utf8');
    expect(html).toContain('<svg');
    expect(html).toContain('Per-request mean inter-token latency');
    expect(html).not.toContain('<script');
  });

  it('writes the JSON layout report to stdout with --json -, and the same bytes twice', async () => {
    const args = ['run', ...SMALL, '--ranks', '2', '--layout', 'pd', '--json', '-'];
    const a = await cli(args);
    const b = await cli(args);
    expect(a.code).toBe(0);
    expect(a.stdout).toBe(b.stdout);
    const report = JSON.parse(a.stdout);
    expect(report.format).toBe('kvroute-sim-layouts/v1');
    expect(report.rows.map((x: { label: string }) => x.label)).toEqual([
      'colocated x2',
      'colocated x1',
      'pd 1:1',
    ]);
    expect(report.rows[2]).toHaveProperty('transferMs.p50');
    expect(report.rows[2]).not.toHaveProperty('ttftSamples');
  });

  it('exits 2 naming the bad flag', async () => {
    const bad = async (args: string[], message: RegExp) => {
      const r = await cli(['run', ...SMALL, ...args]);
      expect(r.code).toBe(2);
      expect(r.stderr).toMatch(message);
    };
    await bad(['--layout', 'split'], /unknown layout 'split'; valid layouts: colocated, pd/);
    await bad(['--prefill-ranks', '2'], /--prefill-ranks needs --layout pd/);
    await bad(['--layout', 'pd', '--link-gbps', '0'], /--link-gbps must be a positive number/);
    await bad(
      ['--layout', 'pd', '--prefill-policy', 'nope'],
      /--prefill-policy: unknown policy 'nope'/,
    );
    await bad(
      ['--layout', 'pd', '--policies', 'round_robin'],
      /--prefill-policy and --decode-policy instead/,
    );
    await bad(['--layout', 'pd', '--link-setup-ms=-1'], /--link-setup-ms must be a number >= 0/);
    await bad(['--layout', 'pd', '--replicas', '2'], /--replicas is not modelled with --layout pd/);
    await bad(
      ['--layout', 'pd', '--switch-policy', '1000=round_robin'],
      /--switch-policy is not modelled with --layout pd/,
    );
    await bad(['--layout', 'pd', '--ranks', '1'], /the pd layout needs at least 2 ranks, got 1/);
    await bad(
      ['--layout', 'pd', '--ranks', '4', '--prefill-ranks', '1', '--decode-ranks', '2'],
      /--prefill-ranks 1 \+ --decode-ranks 2 must equal --ranks 4/,
    );
    await bad(['--layout', 'pd', '--ranks', '4', '--decode-ranks', '4'], /leaves no prefill rank/);
    await bad(['--layout', 'pd', '--decode-offload'], /--decode-offload needs --kv-store-gbps/);
    await bad(['--decode-offload'], /--decode-offload needs --layout pd/);
    await bad(
      ['--layout', 'pd', '--local-prefill-tokens', '512'],
      /needs the cache_aware decode method/,
    );
  });
});

describe('hit-rate target: cache-aware prefill against colocated cache_aware on as many prefill GPUs', () => {
  const opts = {
    profile,
    seed: 1,
    prefillPolicy: { method: 'cache_aware' },
    decodePolicy: { method: 'total_tokens' },
    splits: [[2, 2]] as [number, number][],
  };

  it('keeps at least the colocated hit rate where no reply is reused (single-turn shared prefixes)', () => {
    const plan = buildWorkload('shared-prefix', { groups: 16, promptsPerGroup: 8 }, 1);
    const [t] = compareLayouts(plan, opts).targets;
    expect(t!.replyShare).toBe(0);
    expect(t!.pdHitRate).toBeGreaterThan(0.5);
    expect(t!.pdHitRate).toBeGreaterThanOrEqual(t!.colocatedHitRate);
    expect(t!.met).toBe(true);
  });

  it('on agentic sessions, trails colocated by no more than the previous replies the prefill side never sees', () => {
    // Colocated serving caches each reply where it was generated and the next turn hits it;
    // a prefill server never generates the reply, so those tokens are a miss there whatever
    // the routing. The routing itself must lose nothing beyond them (0.2 pt for timing).
    const plan = buildWorkload('agentic', { sessions: 30, sessionsPerS: 2 }, 5);
    const [t] = compareLayouts(plan, opts).targets;
    expect(t!.replyShare).toBeGreaterThan(0.005);
    expect(t!.pdHitRate).toBeGreaterThanOrEqual(t!.colocatedHitRate - t!.replyShare - 0.002);
  });

  it('with the decode side offloading replies to a store the prefill ranks share, reaches the colocated hit rate', () => {
    // The same sessions three ways: no store, a store the prefill ranks write prompts to (no
    // reply reaches it), and decode offload on top (replies reach it). Only the last recovers
    // the replies; the store alone changes nothing here, as this workload is not short of KV.
    const plan = buildWorkload('agentic', { sessions: 30, sessionsPerS: 2 }, 5);
    const base = compareLayouts(plan, opts).targets[0]!;
    const run = (decodeOffload: boolean) =>
      simulatePd(plan, {
        ...opts,
        prefillRanks: 2,
        decodeRanks: 2,
        kvStore: { gbps: 200, decodeOffload },
      });
    const promptsOnly = run(false);
    const offload = run(true);
    expect(promptsOnly.summary.hitRate).toBeCloseTo(base.pdHitRate, 3);
    expect(promptsOnly.pd.kvStore?.loadedTokens).toBe(0);
    expect(offload.summary.hitRate).toBeGreaterThanOrEqual(base.colocatedHitRate);
    expect(offload.summary.hitRate - base.pdHitRate).toBeGreaterThan(base.replyShare * 0.5);
    expect(offload.pd.kvStore?.loadedTokens).toBeGreaterThan(0);
    expect(offload.pd.kvStore?.decodeOffload).toBe(true);
  });

  it('prefilling on the decode rank (conditional disaggregation) when all of a prompt may go local is colocated on the decode ranks', () => {
    const plan = buildWorkload('agentic', { sessions: 12, sessionsPerS: 2, turnsMax: 4 }, 5);
    const local = simulatePd(plan, {
      ...opts,
      decodePolicy: { method: 'cache_aware' },
      prefillRanks: 2,
      decodeRanks: 2,
      localPrefillTokens: 1_000_000,
    });
    expect(local.pd.localRequests).toBe(local.records.length);
    expect(local.records.every((r) => r.local && r.rank === -1 && r.transferMs === 0)).toBe(true);
    const colocated = compareLayouts(plan, { ...opts, colocatedRanks: [2] }).rows[0]!;
    expect(local.summary.hitRate).toBeCloseTo(colocated.hitRate, 6);
    // A threshold of one token keeps (nearly) everything disaggregated.
    const remote = simulatePd(plan, {
      ...opts,
      decodePolicy: { method: 'cache_aware' },
      prefillRanks: 2,
      decodeRanks: 2,
      localPrefillTokens: 1,
    });
    expect(remote.pd.localRequests).toBeLessThan(remote.records.length / 10);
    expect(() =>
      simulatePd(plan, { ...opts, prefillRanks: 2, decodeRanks: 2, localPrefillTokens: 100 }),
    ).toThrow(/needs the cache_aware decode method/);
  });

  it('counts reply tokens that a next turn repeats right after the previous prompt', () => {
    const plan = buildWorkload('agentic', { sessions: 5 }, 2);
    let input = 0;
    let reply = 0;
    for (const list of plan.clients) {
      list.forEach((r, i) => {
        input += r.inputIds.length;
        if (i > 0) reply += list[i - 1]!.outputTokens;
      });
    }
    expect(replyShare(plan)).toBeCloseTo(reply / input, 9);
    expect(replyShare(burst(3, 10, 2))).toBe(0);
  });
});

describe('kvroute-sim sweep --layout pd', () => {
  const dir = mkdtempSync(join(tmpdir(), 'kvroute-sim-pd-sweep-'));
  const cli = (args: string[]) => runSimCli(args, dir);
  const SMALL = [
    '--scenario',
    'agentic',
    '--set',
    'sessions=5',
    '--set',
    'turnsMin=1',
    '--set',
    'turnsMax=2',
  ];

  it('runs every split of the GPUs and colocated on as many, and names the best split', async () => {
    const r = await cli([
      'sweep',
      ...SMALL,
      '--layout',
      'pd',
      '--gpus',
      '4',
      '--json',
      'sweep.json',
    ]);
    expect(r.code).toBe(0);
    const rows = r.stdout.split('\n').filter((l) => /^(colocated|pd) /.test(l));
    expect(rows.map((l) => l.split(/\s{2,}/)[0])).toEqual([
      'colocated x4',
      'pd 1:3',
      'pd 2:2',
      'pd 3:1',
    ]);
    expect(r.stdout).toMatch(/best split for ttft-p99: pd \d:\d \(.* ms\); colocated x4: .* ms/);
    const report = JSON.parse(readFileSync(join(dir, 'sweep.json'), 'utf8'));
    expect(report.command).toBe('sweep');
    expect(report.best.objective).toBe('ttft-p99');
    const pd = report.rows.filter((x: { layout: string }) => x.layout === 'pd');
    const min = Math.min(...pd.map((x: { ttftMs: { p99: number } }) => x.ttftMs.p99));
    expect(report.best.value).toBe(min);
  });

  it('takes the split as --pd-ratio or as --prefill-ranks in the sweep axis syntax, and another objective', async () => {
    const a = await cli([
      'sweep',
      ...SMALL,
      '--layout',
      'pd',
      '--gpus',
      '8',
      '--pd-ratio',
      '1:3,1:1',
      '--objective',
      'hit-rate',
    ]);
    expect(a.code).toBe(0);
    expect(
      a.stdout
        .split('\n')
        .filter((l) => /^pd /.test(l))
        .map((l) => l.split(/\s{2,}/)[0]),
    ).toEqual(['pd 2:6', 'pd 4:4']);
    expect(a.stdout).toMatch(/best split for hit-rate: pd [24]:[64] \(\d+\.\d%\)/);
    const b = await cli([
      'sweep',
      ...SMALL,
      '--layout',
      'pd',
      '--gpus',
      '8',
      '--prefill-ranks',
      '2..6:2',
    ]);
    expect(b.code).toBe(0);
    expect(
      b.stdout
        .split('\n')
        .filter((l) => /^pd /.test(l))
        .map((l) => l.split(/\s{2,}/)[0]),
    ).toEqual(['pd 2:6', 'pd 4:4', 'pd 6:2']);
  });

  it('exits 2 naming the bad flag', async () => {
    const bad = async (args: string[], message: RegExp) => {
      const r = await cli(['sweep', ...SMALL, '--layout', 'pd', ...args]);
      expect(r.code).toBe(2);
      expect(r.stderr).toMatch(message);
    };
    await bad(
      ['--gpus', '8', '--pd-ratio', '1:2'],
      /--pd-ratio 1:2 does not split 8 GPUs into whole ranks/,
    );
    await bad(
      ['--gpus', '4', '--prefill-ranks', '4'],
      /--prefill-ranks 4 leaves no decode rank of 4 GPUs/,
    );
    await bad(['--gpus', '4', '--jobs', '2'], /--jobs is not available with --layout pd/);
    await bad(
      ['--gpus', '4', '--objective', 'fast'],
      /unknown objective 'fast' for --layout pd; valid objectives: ttft-p99/,
    );
    await bad(
      ['--gpus', '4', '--pd-ratio', '1:1', '--prefill-ranks', '2'],
      /either --pd-ratio or --prefill-ranks/,
    );
  });
});
