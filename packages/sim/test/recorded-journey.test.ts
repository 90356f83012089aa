// The journey "record my traffic, fit, replay --observed, sweep, apply, compare" on recordings
// shaped as the router writes them: worker groups (one per model, each on its own ranks with
// its own policy), rotated files, requests that failed live, rank changes, and a sweep whose
// best is worse than what runs now. The observations are the simulator's own, so a replay of
// the recorded setting reproduces them exactly where it is done right.
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { costModelFromSpec } from '../src/cost/cost-model.ts';
import type { RequestRecord } from '../src/metrics/types.ts';
import { replayObserved } from '../src/replay-observed.ts';
import { simulatePlan } from '../src/simulate.ts';
import { buildWorkload } from '../src/workloads/registry.ts';
import { runSimCli } from './helpers/cli.ts';
import { agentLines, BLOCK, recordingFixture } from './helpers/recorded.ts';

const {
  dir,
  profile: PROFILE,
  profileFile: PROFILE_FILE,
} = recordingFixture('kvroute-journey-', 'journey-test');
const cli = (args: string[]) => runSimCli(args, dir);
const model = () => costModelFromSpec(PROFILE);

interface Recorded {
  line: Record<string, unknown>;
  end: number;
  record: RequestRecord;
}

/** `base` "recorded" under `method` on `ranks` ranks (numbered from `offset`), with a switch. */
function recordUnder(
  base: Record<string, unknown>[],
  o: {
    method: string;
    ranks: number;
    offset?: number;
    model?: string;
    switchTo?: [number, string];
  },
): Recorded[] {
  const plain = join(dir, `plain-${o.model ?? 'one'}.jsonl`);
  writeFileSync(plain, base.map((l) => JSON.stringify(l)).join('\n'));
  const plan = buildWorkload('replay', { file: plain, blockTokens: BLOCK, ranks: o.ranks }, 1);
  const { records } = simulatePlan(plan, {
    policy: { method: o.method },
    profile: model(),
    seed: 1,
    ...(o.switchTo
      ? { policySwitches: [{ atMs: o.switchTo[0], policy: { method: o.switchTo[1] } }] }
      : {}),
  });
  return records.map((r) => ({
    record: r,
    end: r.endMs,
    line: {
      ...base[r.id]!,
      rank: r.rank + (o.offset ?? 0),
      reason: r.reason,
      cached_tokens: r.cachedTokens,
      ttft_ms: r.ttftMs,
      e2e_ms: r.endMs - r.arrivalMs,
      status: 200,
      key: `${o.model ?? ''}k${r.id % 5}`,
      ...(o.model !== undefined ? { model: o.model } : {}),
      stream: true,
    },
  }));
}

const START = {
  event: 'start',
  origin_unix_ms: 1_760_000_000_000,
  block_tokens: BLOCK,
  sample_rate: 1,
};

/** Lines in completion order (as the router writes them), events placed by their time. */
function write(file: string, head: object[], rows: Recorded[], events: object[] = []): void {
  const timed = [
    ...rows.map((r) => ({ at: r.end, text: JSON.stringify(r.line) })),
    ...events.map((e) => ({ at: (e as { timestamp: number }).timestamp, text: JSON.stringify(e) })),
  ].sort((a, b) => a.at - b.at);
  const text = [...head.map((h) => JSON.stringify(h)), ...timed.map((t) => t.text)].join('\n');
  writeFileSync(file, `${text}\n`);
}

describe('a recording of a router with worker groups', () => {
  // Group "llama" on ranks 0-1 under prefix_match; group "qwen" on ranks 2-3 under
  // round_robin, which switches to total_requests at 1500 ms; llama does not switch.
  const llama = recordUnder(agentLines(1), { method: 'prefix_match', ranks: 2, model: 'llama' });
  const qwen = recordUnder(agentLines(2), {
    method: 'round_robin',
    ranks: 2,
    offset: 2,
    model: 'qwen',
    switchTo: [1500, 'total_requests'],
  });
  const file = join(dir, 'groups.jsonl');
  write(
    file,
    [
      {
        ...START,
        method: 'prefix_match',
        options: {},
        ranks: 4,
        groups: [
          { group: 'llama', method: 'prefix_match', options: {} },
          { group: 'qwen', method: 'round_robin', options: {} },
        ],
      },
    ],
    [...llama, ...qwen],
    [
      {
        event: 'policy_switch',
        timestamp: 1500,
        method: 'total_requests',
        options: {},
        group: 'qwen',
      },
    ],
  );

  it('replays one group on its own ranks, under its own policy and only its own switches', () => {
    for (const [name, rows] of [
      ['qwen', qwen],
      ['llama', llama],
    ] as const) {
      const plan = buildWorkload('replay', { file, group: name }, 1);
      expect(plan.ranks).toBe(2);
      expect(plan.requests).toHaveLength(rows.length);
      const r = replayObserved(plan, { profile: model(), seed: 1 });
      expect(r.rankAgreement, name).toEqual({ compared: rows.length, same: rows.length });
      const p50 = r.comparison.find((c) => c.key === 'ttftP50')!;
      expect(Math.abs(p50.relError), name).toBeLessThan(1e-9);
      expect(r.switches).toHaveLength(name === 'qwen' ? 1 : 0);
      expect(r.policy.method).toBe(name === 'qwen' ? 'round_robin' : 'prefix_match');
      expect(r.notes.join('\n')).toMatch(
        new RegExp(
          `worker group ${name}: 40 of 80 requests, on ranks ${name === 'qwen' ? '2,3' : '0,1'}`,
        ),
      );
    }
  });

  it("takes a group's ranks from the start line when the router wrote them, idle ones included", () => {
    const listed = join(dir, 'groups-ranks.jsonl');
    write(
      listed,
      [
        {
          ...START,
          method: 'prefix_match',
          options: {},
          ranks: 5,
          groups: [
            { group: 'llama', method: 'prefix_match', options: {}, ranks: [0, 1] },
            // Rank 4 is qwen's too, though none of its recorded requests went there.
            { group: 'qwen', method: 'round_robin', options: {}, ranks: [2, 3, 4] },
          ],
        },
      ],
      [...llama, ...qwen],
    );
    expect(buildWorkload('replay', { file: listed, group: 'qwen' }, 1).ranks).toBe(3);
    expect(buildWorkload('replay', { file: listed, group: 'llama' }, 1).ranks).toBe(2);
    // Without the list, only the ranks the group's lines went to are known.
    expect(buildWorkload('replay', { file, group: 'qwen' }, 1).ranks).toBe(2);
  });

  it('refuses to replay or sweep all groups as one, naming them', async () => {
    const a = await cli(['replay', '--trace', file, '--observed', '--profile-file', PROFILE_FILE]);
    expect(a.code).toBe(2);
    expect(a.stderr).toMatch(/2 worker groups \(llama, qwen\).*--group NAME/);
    const b = await cli(['sweep', '--trace', file, '--policy', 'round_robin', '--jobs', '1']);
    expect(b.code).toBe(2);
    expect(b.stderr).toMatch(/2 worker groups/);
    const c = await cli(['replay', '--trace', file, '--group', 'mistral']);
    expect(c.code).toBe(2);
    expect(c.stderr).toMatch(/no worker group "mistral" in the recording; its groups: llama, qwen/);
  });

  it('sweeps one group and writes a config that says it is that group’s', async () => {
    const out = await cli([
      'sweep',
      '--trace',
      file,
      '--group',
      'qwen',
      '--profile-file',
      PROFILE_FILE,
      '--policy',
      'round_robin',
      '--jobs',
      '1',
      '--out-config',
      'qwen.yaml',
    ]);
    expect(out.code, out.stderr).toBe(0);
    expect(out.stdout).toMatch(/on replay, 2 ranks/);
    // The recorded setting (with qwen's switch) reproduces qwen's observations.
    expect(out.stdout).toMatch(
      /Confidence: .*round_robin \(\+1 switch\), 40 requests\) .*\+?-?0\.0 pt/,
    );
    const yaml = readFileSync(join(dir, 'qwen.yaml'), 'utf8');
    expect(yaml).toMatch(/^# for worker group qwen only: put these keys in its entry of models:/m);
  });
});

describe('a recording in several files (rotated)', () => {
  it('replay and sweep read every --trace in order, as one recording', async () => {
    const rows = recordUnder(agentLines(3), { method: 'prefix_match', ranks: 3 });
    const head = { ...START, method: 'prefix_match', options: {}, ranks: 3 };
    const byEnd = [...rows].sort((a, b) => a.end - b.end);
    write(join(dir, 'rot.jsonl.000001'), [head], byEnd.slice(0, 25));
    write(join(dir, 'rot.jsonl'), [head], byEnd.slice(25));
    const args = ['--trace', 'rot.jsonl.000001', '--trace', 'rot.jsonl'];
    const a = await cli(['replay', ...args, '--observed', '--profile-file', PROFILE_FILE]);
    expect(a.code, a.stderr).toBe(0);
    expect(a.stdout).toMatch(/, 40 requests, 3 ranks/);
    expect(a.stdout).toMatch(/rank agreement: 40 of 40 requests/);
    const b = await cli([
      'sweep',
      ...args,
      '--profile-file',
      PROFILE_FILE,
      '--policy',
      'round_robin',
      '--jobs',
      '1',
    ]);
    expect(b.code, b.stderr).toBe(0);
    expect(b.stdout).toMatch(/Confidence: .*prefix_match, 40 requests\)/);
    // Files of two router runs are refused, as when concatenated.
    write(join(dir, 'other-run.jsonl'), [{ ...head, origin_unix_ms: 1 }], byEnd.slice(25));
    const c = await cli(['replay', '--trace', 'rot.jsonl.000001', '--trace', 'other-run.jsonl']);
    expect(c.code).toBe(2);
    expect(c.stderr).toMatch(/other-run\.jsonl:1: .*files of two router runs were concatenated/);
  });
});

describe('sweep --current better than every swept setting', () => {
  it('says so in the verdict, on top of the written config and on stderr', async () => {
    // Recorded under round_robin; prefix_match with a prefix length of one block sends every
    // request (they share the system prompt) to one rank: a far worse TTFT p50.
    const rows = recordUnder(agentLines(4, 12, 6), { method: 'round_robin', ranks: 4 });
    const file = join(dir, 'worse.jsonl');
    write(file, [{ ...START, method: 'round_robin', options: {}, ranks: 4 }], rows);
    const out = await cli([
      'sweep',
      '--trace',
      file,
      '--profile-file',
      PROFILE_FILE,
      '--policy',
      'prefix_match',
      '--window',
      '64',
      '--prefix-length',
      '64',
      '--objective',
      'ttft-p50',
      '--current',
      'round_robin',
      '--jobs',
      '1',
      '--out-config',
      'worse.yaml',
    ]);
    expect(out.code, out.stderr).toBe(0);
    expect(out.stdout).toMatch(/Warning: switching from the current setting \(round_robin/);
    expect(out.stdout).not.toMatch(/, so nothing is traded away/);
    const yaml = readFileSync(join(dir, 'worse.yaml'), 'utf8');
    expect(yaml).toMatch(
      /^# WARNING: switching from the current setting .* is predicted to make TTFT p50 worse/m,
    );
    expect(out.stderr).toMatch(/^warning: switching from the current setting/m);
  });
});

describe('replay --observed on requests that failed live', () => {
  it('leaves them out of both columns and says how many', async () => {
    const rows = recordUnder(agentLines(5), { method: 'prefix_match', ranks: 3 });
    // A client that left (499) and a worker error (500): the simulation completes them.
    rows.forEach((r, i) => {
      if (i % 8 === 3) r.line.status = i % 16 === 3 ? 499 : 500;
    });
    const file = join(dir, 'failed.jsonl');
    write(file, [{ ...START, method: 'prefix_match', options: {}, ranks: 3 }], rows);
    const r = replayObserved(buildWorkload('replay', { file }, 1), { profile: model(), seed: 1 });
    const row = (k: string) => r.comparison.find((c) => c.key === k)!;
    // The rest is the simulator's own observation: exact on both sides, throughput included.
    expect(Math.abs(row('throughput').relError)).toBeLessThan(1e-9);
    expect(Math.abs(row('ttftP99').relError)).toBeLessThan(1e-9);
    expect(Math.abs(row('e2eP50').relError)).toBeLessThan(1e-9);
    expect(row('errors').predicted).toBe(0);
    expect(r.compared).toMatchObject({ requests: 35, failedLive: 5 });
    expect(r.notes.join('\n')).toMatch(/5 of 40 request\(s\) failed or were abandoned live/);
    const out = await cli([
      'replay',
      '--trace',
      file,
      '--observed',
      '--profile-file',
      PROFILE_FILE,
    ]);
    expect(out.stdout).toMatch(
      /35 requests that succeeded live \(5 failed or abandoned left out\)/,
    );
  });
});

describe('fit on the router’s request lines', () => {
  /** The fit-probe scenario on one rank, as the router records it. */
  function loneLines(): Record<string, unknown>[] {
    const plan = buildWorkload('fit-probe', { singles: 16, maxTokens: 1500, gapMs: 800 }, 1);
    const { records } = simulatePlan(plan, {
      policy: { method: 'round_robin' },
      profile: model(),
      seed: 1,
    });
    return [...records]
      .sort((a, b) => a.endMs - b.endMs)
      .map((r) => ({
        timestamp: r.arrivalMs,
        input_length: r.inputTokens,
        output_length: r.outputTokens,
        hash_ids: Array.from({ length: Math.ceil(r.inputTokens / 512) }, (_, i) => r.id * 100 + i),
        rank: r.rank,
        reason: r.reason,
        cached_tokens: r.cachedTokens,
        ttft_ms: r.ttftMs,
        e2e_ms: r.endMs - r.arrivalMs,
        status: 200,
        stream: true,
      }));
  }

  it('without the start line, leaves out what it leaves out with it', async () => {
    const lines = loneLines();
    const t = (lines.at(-1)!.timestamp as number) + 2000;
    // What the router also writes: a 500 in 3 ms, a 499 without ttft_ms, a non-streamed
    // answer (its first byte is the whole response), one without a cached-token count.
    const extra = [
      { ...lines[0]!, timestamp: t, status: 500, ttft_ms: 3, e2e_ms: 3.2 },
      { ...lines[1]!, timestamp: t + 900, status: 499, ttft_ms: undefined, e2e_ms: 40 },
      { ...lines[2]!, timestamp: t + 1800, stream: false, ttft_ms: 900, e2e_ms: 900 },
      { ...lines[3]!, timestamp: t + 2700, cached_tokens: undefined },
    ];
    const all = [...lines, ...extra].map((l) => JSON.stringify(l));
    const start = JSON.stringify({ event: 'start', block_tokens: 512, ranks: 1 });
    writeFileSync(join(dir, 'with-start.jsonl'), `${[start, ...all].join('\n')}\n`);
    writeFileSync(join(dir, 'no-start.jsonl'), `${all.join('\n')}\n`);
    const fit = (f: string) =>
      cli(['fit', '--trace', f, '--chunked-prefill-size', '512', '--out', `${f}.json`]);
    const a = await fit('with-start.jsonl');
    const b = await fit('no-start.jsonl');
    expect(a.code, a.stderr).toBe(0);
    expect(b.code, b.stderr).toBe(0);
    expect(b.stdout).toMatch(
      new RegExp(
        `^${lines.length} requests used \\(2 failed or unmeasured and 2 not observed left out\\)$`,
        'm',
      ),
    );
    expect(readFileSync(join(dir, 'no-start.jsonl.json'), 'utf8')).toBe(
      readFileSync(join(dir, 'with-start.jsonl.json'), 'utf8').replace('with-start', 'no-start'),
    );
  });

  it('on a recording with no request lines says so', async () => {
    writeFileSync(join(dir, 'empty.jsonl'), `${JSON.stringify({ ...START, ranks: 1 })}\n`);
    writeFileSync(join(dir, 'zero.jsonl'), '');
    for (const f of ['empty.jsonl', 'zero.jsonl']) {
      const out = await cli(['fit', '--trace', f, '--out', 'x.json']);
      expect(out.code).toBe(2);
      expect(out.stderr).toMatch(new RegExp(`${f}: the trace has no request lines`));
    }
  });
});

describe('a recording whose ranks changed', () => {
  it('warns when request lines name ranks beyond the start line’s, with a count', async () => {
    const rows = recordUnder(agentLines(6), { method: 'round_robin', ranks: 3 });
    // A fourth rank was added while recording: the start line still says 3.
    rows.forEach((r, i) => {
      if (i >= 30) r.line.rank = 3;
    });
    const file = join(dir, 'grown.jsonl');
    write(file, [{ ...START, method: 'round_robin', options: {}, ranks: 3 }], rows);
    for (const args of [['--observed'], ['--policies', 'round_robin']]) {
      const out = await cli(['replay', '--trace', file, '--profile-file', PROFILE_FILE, ...args]);
      expect(out.code, out.stderr).toBe(0);
      expect(out.stderr).toMatch(
        /^warning: 10 request line\(s\) name a rank up to 3, beyond the 3 rank\(s\) replayed .*--ranks 4/m,
      );
    }
    const fine = await cli(['replay', '--trace', file, '--ranks', '4', '--observed']);
    expect(fine.stderr).not.toMatch(/warning/);
  });

  it("replays the rank changes a router recorded: the count, and removed workers' ranks", async () => {
    const rows = recordUnder(agentLines(8), { method: 'round_robin', ranks: 3 });
    rows.forEach((r, i) => {
      if (i >= 30) r.line.rank = 3;
    });
    const file = join(dir, 'ranks-events.jsonl');
    // Rank 1's worker was gone when the file opened and came back (a new worker in its
    // place) at 1 s; a fourth rank came at 1.2 s; rank 0's worker left at 2 s.
    write(file, [{ ...START, method: 'round_robin', options: {}, ranks: 3, down: [1] }], rows, [
      { event: 'ranks', timestamp: 1000, ranks: 3, down: [] },
      { event: 'ranks', timestamp: 1200, ranks: 4, down: [] },
      { event: 'ranks', timestamp: 2000, ranks: 4, down: [0] },
    ]);
    const plan = buildWorkload('replay', { file }, 1);
    expect(plan.ranks).toBe(3);
    expect(plan.events).toEqual([
      { atMs: 0, kind: 'rank-down', rank: 1 },
      { atMs: 1000, kind: 'rank-up', rank: 1 },
      { atMs: 1200, kind: 'set-ranks', ranks: 4 },
      { atMs: 2000, kind: 'rank-down', rank: 0 },
    ]);
    expect(plan.warnings ?? []).toEqual([]);
    // At twice the speed, at half the times.
    const fast = buildWorkload('replay', { file, speedup: 2 }, 1);
    expect(fast.events.map((e) => e.atMs)).toEqual([0, 500, 600, 1000]);
    // The replay runs them: no request goes to rank 1 before 1 s, or to rank 0 after 2 s.
    const out = await cli([
      'replay',
      '--trace',
      file,
      '--profile-file',
      PROFILE_FILE,
      '--observed',
    ]);
    expect(out.code, out.stderr).toBe(0);
    expect(out.stderr).not.toMatch(/warning/);
    const { records } = simulatePlan(plan, {
      policy: { method: 'round_robin' },
      profile: model(),
      seed: 1,
    });
    for (const r of records) {
      if (r.arrivalMs < 1000) expect(r.rank, `request ${r.id}`).not.toBe(1);
      if (r.arrivalMs > 2000) expect(r.rank, `request ${r.id}`).not.toBe(0);
    }
    // --ranks sets the count: the changes are not followed, and that is said.
    const fixed = buildWorkload('replay', { file, ranks: 4 }, 1);
    expect(fixed.events).toEqual([]);
    expect(fixed.warnings?.join('\n')).toMatch(
      /3 rank change\(s\) recorded .* not replayed with --ranks/,
    );
  });
});

describe('the sweep’s predictions and its Confidence line', () => {
  it('say which requests each covers', async () => {
    const rows = recordUnder(agentLines(7), { method: 'prefix_match', ranks: 3 });
    rows.forEach((r, i) => {
      if (i % 4 === 0) r.line.stream = false;
    });
    const file = join(dir, 'mixed-stream.jsonl');
    write(file, [{ ...START, method: 'prefix_match', options: {}, ranks: 3 }], rows);
    const out = await cli([
      'sweep',
      '--trace',
      file,
      '--profile-file',
      PROFILE_FILE,
      '--policy',
      'round_robin',
      '--jobs',
      '1',
    ]);
    expect(out.code, out.stderr).toBe(0);
    expect(out.stdout).toMatch(
      /These errors are over what the router measured \(hit rate: 40 requests whose worker reported cached tokens; TTFT: 30 streamed requests\).*over all 40 requests/,
    );
    expect(out.stdout).toMatch(
      /^# predicted: .* over every request \(a non-streamed one's first token too/m,
    );
  });
});
