import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { CliIo } from '@kvroute/sim/cli';
import { UsageError } from '@kvroute/sim/cli';
import type { CostModel } from '@kvroute/sim/model';
import { WorkloadOptionError } from '@kvroute/sim/model';
import { afterEach, describe, expect, it } from 'vitest';
import { runValidate } from '../src/command.ts';
import type { ValidateReport } from '../src/report.ts';
import type { SimBackend, SimPlan, SimulateOptions } from '../src/sim-backend.ts';
import type { OutcomeRecord, PlanRequest } from '../src/types.ts';
import { type FakeTarget, startFakeTarget } from './validate-fake-target.ts';

const PROFILE: CostModel = {
  name: 'fake-profile',
  description: '',
  kvCapacityTokens: 1234,
  chunkedPrefillSize: 512,
  prefillMs: () => 1,
  prefillBatchMs: () => 1,
  prefillFloorMs: () => 1,
  decodeStepMs: () => 1,
};

/** Two clients, three turns each, over one shared 8-token prefix. */
function fakePlan(): SimPlan {
  const prefix = [11, 12, 13, 14, 15, 16, 17, 18];
  const mk = (id: number, clientId: number, turn: number): PlanRequest => ({
    id,
    clientId,
    inputIds: Uint32Array.from([...prefix, 100 + id, 200 + turn]),
    outputTokens: 2,
    thinkMs: turn === 0 ? undefined : 5,
    sessionKey: `c${clientId}`,
    routingKey: `c${clientId}`,
  });
  const clients = [0, 1].map((c) => [0, 1, 2].map((t) => mk(c * 3 + t, c, t)));
  return {
    scenario: 'fake',
    mode: 'closed',
    ranks: 3,
    clients,
    requests: clients.flat(),
    events: [{ atMs: 1, kind: 'rank-down', rank: 0 }],
  };
}

function fakeBackend() {
  const calls: { plan: SimPlan; opts: SimulateOptions }[] = [];
  const backend: SimBackend = {
    methodNames: () => ['round_robin', 'prefix_match'],
    profileNames: () => ['fake-profile'],
    checkPolicy(c) {
      if (!['round_robin', 'prefix_match'].includes(c.method)) {
        throw Object.assign(new Error(`unknown method '${c.method}'`), { code: 'POLICY_CONFIG' });
      }
    },
    loadProfile(w) {
      if ('profile' in w && w.profile !== 'fake-profile') {
        throw new UsageError(`unknown profile '${w.profile}'`);
      }
      // What the simulator's loader throws for a file it cannot read: a plain Error.
      if ('profileFile' in w && w.profileFile.endsWith('missing.json')) {
        throw new Error(`cost profile ${w.profileFile}: cannot read`);
      }
      return PROFILE;
    },
    buildPlan: (scenario) => {
      if (scenario !== 'fake') throw new WorkloadOptionError(`unknown scenario '${scenario}'`);
      return fakePlan();
    },
    simulate(plan, opts) {
      calls.push({ plan, opts });
      // Every request after the first finds the 8-token prefix: the fake target does the same.
      const reqs = plan.clients.flat().sort((a, b) => a.id - b.id);
      return reqs.map(
        (r, i): OutcomeRecord => ({
          id: r.id,
          ok: true,
          startMs: i * 10,
          ttftMs: 5,
          endMs: i * 10 + 8,
          promptTokens: r.inputIds.length,
          cachedTokens: i === 0 ? 0 : 8,
          rank: r.clientId,
        }),
      );
    },
  };
  return { backend, calls };
}

function captureIo(dir: string, signal?: AbortSignal) {
  let stdout = '';
  let stderr = '';
  const io: CliIo & { signal?: AbortSignal } = {
    stdout: { write: (s: string) => (stdout += s) },
    stderr: { write: (s: string) => (stderr += s), isTTY: false },
    cwd: dir,
    ...(signal ? { signal } : {}),
  };
  return { io, out: () => stdout, err: () => stderr };
}

let target: FakeTarget | undefined;
afterEach(async () => {
  await target?.close();
  target = undefined;
});

describe('kvroute-sim validate (fake target, fake simulator)', () => {
  it('sends the plan, simulates it, prints the comparison and writes JSON, HTML and a recording', async () => {
    target = await startFakeTarget({
      dpSize: 3,
      rankHeader: (b) => Number((b.input_ids as number[])[8]) % 3,
    });
    const dir = mkdtempSync(join(tmpdir(), 'kvroute-validate-cmd-'));
    const { backend, calls } = fakeBackend();
    const c = captureIo(dir);
    const code = await runValidate(
      [
        '--target',
        target.url,
        '--scenario',
        'fake',
        '--policy',
        'prefix_match',
        '--window',
        '4',
        '--profile',
        'fake-profile',
        '--json',
        'out.json',
        '--html',
        'out.html',
        '--record',
        'sent.jsonl',
      ],
      c.io,
      backend,
    );
    expect(c.err()).not.toContain('error');
    expect(code).toBe(0);
    expect(target.bodies).toHaveLength(6);
    // The simulator saw the same plan that was sent, without the cluster events, and the
    // rank model settings the target reported.
    expect(calls).toHaveLength(1);
    expect(calls[0]!.plan.events).toEqual([]);
    expect(calls[0]!.opts).toMatchObject({
      policy: { method: 'prefix_match', window: 4 },
      ranks: 3,
      rank: { kvCapacityTokens: 50_000, pageSize: 1, chunkedPrefillSize: 4096 },
    });
    const report = JSON.parse(readFileSync(join(dir, 'out.json'), 'utf8')) as ValidateReport;
    expect(report.format).toBe('kvroute-validate/v1');
    expect(report.requests).toEqual({ planned: 6, completed: 6, failed: 0 });
    // Fake target and fake prediction both cache the prefix for every request but the first
    // one the target sees; the two clients race, so the observed side may miss once more.
    expect(report.predicted.hitRate).toBeCloseTo(40 / 60, 10);
    expect(report.observed.cachedTokens).toBeGreaterThanOrEqual(32);
    expect(report.observed.cachedTokens).toBeLessThanOrEqual(40 + 2);
    expect(report.rankModel.kvCapacityTokens).toEqual({
      value: 50_000,
      source: 'target /get_server_info',
    });
    expect(report.perRequest).toHaveLength(6);
    expect(report.perRequest[0]!.predicted).toBeDefined();
    expect(report.rankAgreement.compared).toBe(6);
    expect(report.notes.join('\n')).toContain('ignored 1 cluster events');
    expect(c.out()).toMatch(/hit rate\s+66\.7%/);
    expect(c.out()).toMatch(/TTFT p50/);
    expect(c.out()).toContain('predicted (prefix_match (window=4))');
    expect(readFileSync(join(dir, 'out.html'), 'utf8')).toMatch(/<svg[\s\S]*TTFT/);
    const rec = readFileSync(join(dir, 'sent.jsonl'), 'utf8').trim().split('\n');
    expect(rec).toHaveLength(7);

    // Replaying the recording sends the same token content again.
    const first = target.bodies.map((b) => JSON.stringify(b.input_ids)).sort();
    const c2 = captureIo(dir);
    const code2 = await runValidate(
      [
        '--target',
        target.url,
        '--replay',
        'sent.jsonl',
        '--policy',
        'prefix_match',
        '--profile',
        'fake-profile',
        '--json',
        '-',
      ],
      c2.io,
      backend,
    );
    expect(code2).toBe(0);
    const again = target.bodies
      .slice(6)
      .map((b) => JSON.stringify(b.input_ids))
      .sort();
    expect(again).toEqual(first);
    const r2 = JSON.parse(c2.out()) as ValidateReport;
    expect(r2.replayOf).toBe('sent.jsonl');
    // The fake target remembers every prompt, so each replayed one is fully cached.
    expect(r2.observed.hitRate).toBe(1);
    expect(c2.err()).toMatch(/hit rate/);
  });

  it("--replay predicts with the recording's policy and profile and warns that caches may be warm", async () => {
    target = await startFakeTarget({ dpSize: 3 });
    const dir = mkdtempSync(join(tmpdir(), 'kvroute-validate-cmd-'));
    const { backend, calls } = fakeBackend();
    const c = captureIo(dir);
    const args = ['--target', target.url, '--scenario', 'fake', '--policy', 'prefix_match'];
    expect(
      await runValidate(
        [...args, '--window', '4', '--profile', 'fake-profile', '--record', 'sent.jsonl'],
        c.io,
        backend,
      ),
    ).toBe(0);
    const header = JSON.parse(readFileSync(join(dir, 'sent.jsonl'), 'utf8').split('\n')[0]!);
    expect(header.policy).toEqual({ method: 'prefix_match', window: 4 });
    expect(header.profile).toBe('fake-profile');

    // No --policy, no --profile: both come from the recording, not from defaults.
    const c2 = captureIo(dir);
    const code = await runValidate(
      ['--target', target.url, '--replay', 'sent.jsonl', '--json', '-'],
      c2.io,
      backend,
    );
    expect(code).toBe(0);
    expect(calls[1]!.opts).toMatchObject({ policy: { method: 'prefix_match', window: 4 } });
    const report = JSON.parse(c2.out()) as ValidateReport;
    expect(report.profile).toBe('fake-profile');
    expect(report.notes.join('\n')).toContain('the one the recording was predicted with');
    expect(c2.err()).toMatch(/warning: the target's caches may still be warm/);
  });

  it('--requests cuts the plan round by round for both sides', async () => {
    target = await startFakeTarget({ dpSize: 3 });
    const { backend, calls } = fakeBackend();
    const c = captureIo(mkdtempSync(join(tmpdir(), 'kvroute-validate-cmd-')));
    expect(
      await runValidate(
        [
          '--target',
          target.url,
          '--scenario',
          'fake',
          '--profile',
          'fake-profile',
          '--requests',
          '3',
          '--json',
          '-',
        ],
        c.io,
        backend,
      ),
    ).toBe(0);
    expect(target.bodies).toHaveLength(3);
    expect(calls[0]!.plan.clients.map((cl) => cl.map((r) => r.id))).toEqual([[0, 1], [3]]);
    expect(JSON.parse(c.out()).requests.planned).toBe(3);
  });

  it('takes the policy, profile and time scale the target reports when no flag gives them', async () => {
    target = await startFakeTarget({
      dpSize: 2,
      serverInfo: { load_balance_method: 'round_robin', profile: 'fake-profile', time_scale: 1 },
    });
    const { backend, calls } = fakeBackend();
    const c = captureIo(mkdtempSync(join(tmpdir(), 'kvroute-validate-cmd-')));
    expect(
      await runValidate(
        ['--target', target.url, '--scenario', 'fake', '--json', '-'],
        c.io,
        backend,
      ),
    ).toBe(0);
    expect(calls[0]!.opts.policy).toEqual({ method: 'round_robin' });
    expect(calls[0]!.opts.ranks).toBe(2);
    const report = JSON.parse(c.out()) as ValidateReport;
    expect(report.policy.label).toBe('round_robin');
    expect(report.notes).toContain(
      'policy round_robin: the load_balance_method the target reports',
    );
    expect(report.notes).toContain('profile fake-profile: the cost profile the target reports');
  });

  it("behind a kvroute-router, predicts with the router's ranks and policy, not one worker's", async () => {
    // What the router's /get_server_info answers: one worker's info plus kvroute_router.
    target = await startFakeTarget({
      dpSize: 1,
      serverInfo: {
        load_balance_method: 'round_robin',
        profile: 'fake-profile',
        kvroute_router: {
          ranks: 4,
          healthy_ranks: 4,
          dispatcher: { method: 'prefix_match', window: 64 },
        },
      },
    });
    const { backend, calls } = fakeBackend();
    const c = captureIo(mkdtempSync(join(tmpdir(), 'kvroute-validate-cmd-')));
    expect(
      await runValidate(
        ['--target', target.url, '--scenario', 'fake', '--json', '-'],
        c.io,
        backend,
      ),
    ).toBe(0);
    expect(calls[0]!.opts.ranks).toBe(4);
    expect(calls[0]!.opts.policy).toEqual({ method: 'prefix_match', window: 64 });
    const notes = (JSON.parse(c.out()) as ValidateReport).notes.join('\n');
    expect(notes).toContain('4 ranks: those the kvroute-router routes over');
    expect(notes).toContain("the kvroute-router's own");
  });

  it('--replay against a target that does not say its ranks reuses the recorded ranks and request shape', async () => {
    target = await startFakeTarget({ dpSize: 3 });
    const dir = mkdtempSync(join(tmpdir(), 'kvroute-validate-cmd-'));
    const { backend, calls } = fakeBackend();
    const args = ['--target', target.url, '--scenario', 'fake', '--profile', 'fake-profile'];
    expect(
      await runValidate(
        [...args, '--api', 'chat', '--record', 'sent.jsonl'],
        captureIo(dir).io,
        backend,
      ),
    ).toBe(0);
    await target.close();
    target = await startFakeTarget({});
    const c2 = captureIo(dir);
    expect(
      await runValidate(
        ['--target', target.url, '--replay', 'sent.jsonl', '--json', '-'],
        c2.io,
        backend,
      ),
    ).toBe(0);
    expect(calls[1]!.opts.ranks).toBe(3);
    const report = JSON.parse(c2.out()) as ValidateReport;
    expect(report.notes.join('\n')).toContain('3 ranks: those the recording was predicted with');
    expect(report.notes.join('\n')).toContain('api chat: the request shape the recording used');
    expect(target.paths.length).toBeGreaterThan(0);
    expect(new Set(target.paths)).toEqual(new Set(['/v1/chat/completions']));
  });

  it('without a policy from flags or target, predicts with prefix_match and says so', async () => {
    target = await startFakeTarget({});
    const { backend, calls } = fakeBackend();
    const c = captureIo(mkdtempSync(join(tmpdir(), 'kvroute-validate-cmd-')));
    expect(
      await runValidate(
        ['--target', target.url, '--scenario', 'fake', '--profile', 'fake-profile', '--json', '-'],
        c.io,
        backend,
      ),
    ).toBe(0);
    expect(calls[0]!.opts.policy.method).toBe('prefix_match');
    // No /get_server_info: the scenario's rank count and the profile's KV size are used.
    expect(calls[0]!.opts.ranks).toBe(3);
    expect(calls[0]!.opts.rank.kvCapacityTokens).toBe(1234);
    const notes = (JSON.parse(c.out()) as ValidateReport).notes.join('\n');
    expect(notes).toContain('pass --policy');
    expect(notes).toContain('did not report dp_size');
  });

  it('an unreachable target exits 1 naming the URL, before sending anything', async () => {
    target = await startFakeTarget();
    const url = target.url;
    await target.close();
    target = undefined;
    const { backend, calls } = fakeBackend();
    const c = captureIo(mkdtempSync(join(tmpdir(), 'kvroute-validate-cmd-')));
    const code = await runValidate(
      ['--target', url, '--scenario', 'fake', '--profile', 'fake-profile'],
      c.io,
      backend,
    );
    expect(code).toBe(1);
    expect(c.err()).toContain(`cannot reach ${url}/get_server_info`);
    expect(c.err()).toContain('nothing was sent');
    expect(calls).toHaveLength(0);
  });

  it('a target that fails every request exits 1 with its error, and still reports', async () => {
    target = await startFakeTarget({ failStatus: 400, dpSize: 1 });
    const { backend } = fakeBackend();
    const c = captureIo(mkdtempSync(join(tmpdir(), 'kvroute-validate-cmd-')));
    const code = await runValidate(
      ['--target', target.url, '--scenario', 'fake', '--profile', 'fake-profile', '--json', '-'],
      c.io,
      backend,
    );
    expect(code).toBe(1);
    expect(c.err()).toMatch(/no request succeeded .*HTTP 400 .*input too long/);
    const report = JSON.parse(c.out()) as ValidateReport;
    expect(report.observed.errors).toBe(6);
    expect(report.comparison.find((r) => r.key === 'errors')).toMatchObject({
      predicted: 0,
      observed: 6,
    });
  });

  it('bad input is a usage error naming the flag or name, and nothing is sent', async () => {
    target = await startFakeTarget({ dpSize: 1 });
    const { backend } = fakeBackend();
    const c = captureIo(tmpdir());
    const run = (args: string[]) => runValidate(args, c.io, backend);
    await expect(run(['--scenario', 'fake'])).rejects.toThrow(/--target URL is required/);
    await expect(run(['--target', target.url])).rejects.toThrow(/--scenario NAME or --replay FILE/);
    await expect(
      run(['--target', 'localhost:1', '--scenario', 'fake', '--profile', 'fake-profile']),
    ).rejects.toThrow(/--target/);
    await expect(
      run(['--target', target.url, '--scenario', 'nope', '--profile', 'fake-profile']),
    ).rejects.toThrow(/unknown scenario 'nope'/);
    await expect(
      run(['--target', target.url, '--scenario', 'fake', '--profile', 'zzz']),
    ).rejects.toThrow(/unknown profile 'zzz'/);
    await expect(
      run([
        '--target',
        target.url,
        '--scenario',
        'fake',
        '--profile',
        'fake-profile',
        '--policy',
        'nope',
      ]),
    ).rejects.toThrow(/unknown method 'nope'/);
    await expect(
      run(['--target', target.url, '--scenario', 'fake', '--requests', '0']),
    ).rejects.toThrow(/--requests must be a positive integer/);
    await expect(
      run(['--target', target.url, '--scenario', 'fake', '--api', 'grpc']),
    ).rejects.toThrow(/--api must be one of generate, completions, chat/);
    await expect(run(['--target', target.url, '--scenario', 'fake', '--bogus'])).rejects.toThrow(
      /bogus/,
    );
    await expect(
      run(['--target', target.url, '--replay', 'missing.jsonl', '--profile', 'fake-profile']),
    ).rejects.toThrow(/cannot read/);
    // A profile file that does not load is the user's input, not an internal error.
    const badFile = run([
      '--target',
      target.url,
      '--scenario',
      'fake',
      '--profile-file',
      'missing.json',
    ]);
    await expect(badFile).rejects.toThrow(UsageError);
    await expect(badFile).rejects.toThrow(
      /--profile-file missing.json: cost profile .*cannot read/,
    );
    // Reports that could not be written after the run are refused before it (a folder under
    // a file cannot be made).
    const dir = mkdtempSync(join(tmpdir(), 'kvroute-validate-out-'));
    writeFileSync(join(dir, 'a-file'), '');
    const under = join(dir, 'a-file', 'out');
    for (const flag of ['--json', '--html']) {
      await expect(
        run([
          '--target',
          target.url,
          '--scenario',
          'fake',
          '--profile',
          'fake-profile',
          flag,
          under,
        ]),
      ).rejects.toThrow(`${flag} ${under}: cannot write there`);
    }
    expect(target.bodies).toHaveLength(0);
  });

  it("a plan whose prompts the target's context cannot hold is refused before anything is sent", async () => {
    // The fake plan's prompts are 10 tokens: a context of 10 refuses all six.
    target = await startFakeTarget({ dpSize: 3, serverInfo: { context_length: 10 } });
    const { backend } = fakeBackend();
    const c = captureIo(tmpdir());
    await expect(
      runValidate(
        ['--target', target.url, '--scenario', 'fake', '--profile', 'fake-profile'],
        c.io,
        backend,
      ),
    ).rejects.toThrow(
      /6 of 6 planned prompts are at or over the target's context length \(10 tokens/,
    );
    expect(target.bodies).toHaveLength(0);
    // A context that holds them: the run goes ahead.
    await target.close();
    target = await startFakeTarget({ dpSize: 3, serverInfo: { context_length: 11 } });
    const ok = await runValidate(
      ['--target', target.url, '--scenario', 'fake', '--profile', 'fake-profile', '--json', '-'],
      captureIo(tmpdir()).io,
      backend,
    );
    expect(ok).toBe(0);
  });

  it('when some requests fail, the prediction covers the ones that succeeded, and says so', async () => {
    target = await startFakeTarget({ dpSize: 3, failStatus: 500, failFirst: 2 });
    const { backend, calls } = fakeBackend();
    const c = captureIo(mkdtempSync(join(tmpdir(), 'kvroute-validate-cmd-')));
    const code = await runValidate(
      ['--target', target.url, '--scenario', 'fake', '--profile', 'fake-profile', '--json', '-'],
      c.io,
      backend,
    );
    expect(code).toBe(0);
    const report = JSON.parse(c.out()) as ValidateReport;
    expect(report.requests.failed).toBe(2);
    expect(calls[0]!.plan.clients.flat()).toHaveLength(4);
    expect(report.notes.join('\n')).toContain(
      '2 of 6 requests failed: the prediction covers the 4 that succeeded',
    );
  });

  it('an interrupted run writes what completed and exits 130', async () => {
    target = await startFakeTarget({ dpSize: 3, firstChunkDelayMs: 200 });
    const dir = mkdtempSync(join(tmpdir(), 'kvroute-validate-cmd-'));
    const { backend, calls } = fakeBackend();
    const ac = new AbortController();
    const c = captureIo(dir, ac.signal);
    // Interrupt once the target has taken its third request (two completed, more to come).
    const poll = setInterval(() => {
      if (target!.bodies.length >= 3) {
        clearInterval(poll);
        ac.abort();
      }
    }, 2);
    const code = await runValidate(
      [
        '--target',
        target.url,
        '--scenario',
        'fake',
        '--profile',
        'fake-profile',
        '--json',
        'out.json',
        '--record',
        'sent.jsonl',
      ],
      c.io,
      backend,
    );
    expect(code).toBe(130);
    const report = JSON.parse(readFileSync(join(dir, 'out.json'), 'utf8')) as ValidateReport;
    expect(report.interrupted).toBe(true);
    const done = report.requests.completed;
    expect(done).toBeGreaterThan(0);
    expect(done).toBeLessThan(6);
    // The prediction covers exactly the completed requests.
    expect(calls[0]!.plan.clients.flat()).toHaveLength(done);
    expect(readFileSync(join(dir, 'sent.jsonl'), 'utf8').trim().split('\n')).toHaveLength(1 + done);
    expect(c.out()).toContain('note: interrupted');
  });
});

describe('kvroute-sim validate (fake target, the real simulator)', () => {
  it('builds the scenario with buildWorkload and predicts with simulatePlan', async () => {
    // The fake target caches every prompt's longest earlier prefix, like one radix cache
    // with room for everything: on one sequential client under prefix_match (all turns on
    // one rank) the simulator must predict exactly the same cached tokens.
    target = await startFakeTarget({
      dpSize: 2,
      serverInfo: { load_balance_method: 'prefix_match' },
    });
    const c = captureIo(mkdtempSync(join(tmpdir(), 'kvroute-validate-cmd-')));
    const code = await runValidate(
      [
        '--target',
        target.url,
        '--scenario',
        'seed-sequential',
        '--set',
        'requests=4',
        '--set',
        'prefixTokens=600',
        '--set',
        'thinkMinMs=0',
        '--set',
        'thinkMaxMs=10',
        '--set',
        'outputMaxTokens=70',
        '--profile',
        'h200-llama-3.2-1b',
        '--json',
        '-',
      ],
      c.io,
    );
    expect(code, c.err()).toBe(0);
    const report = JSON.parse(c.out()) as ValidateReport;
    expect(report.ranks).toBe(2);
    expect(report.profile).toBe('h200-llama-3.2-1b');
    expect(report.policy.config).toEqual({ method: 'prefix_match' });
    expect(report.predicted.ok).toBe(4);
    expect(report.observed.ok).toBe(4);
    expect(report.predicted.promptTokens).toBe(report.observed.promptTokens);
    expect(report.predicted.cachedTokens).toBe(report.observed.cachedTokens);
    expect(report.observed.cachedTokens).toBeGreaterThanOrEqual(3 * 600);
    // Every request went to the rank the simulator predicts; the bodies are the plan's.
    const ranks = new Set(report.perRequest.map((r) => r.predicted?.rank));
    expect(ranks.size).toBe(1);
    expect((target.bodies[0]!.input_ids as number[]).length).toBe(
      report.perRequest[0]!.inputTokens,
    );
  });
});
