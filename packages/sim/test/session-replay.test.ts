// A recorded trace's sessions replay closed loop: live, an agent sends turn k+1 only once it
// has turn k's answer (plus think time), so a replay that sends it at its recorded time
// regardless of how fast the predicted system answers would pile up requests the live system
// never had in flight. And a session's turn shares its whole prompt with the next, not only
// its whole hash blocks.
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { type CostProfileSpec, costModelFromSpec } from '../src/cost/cost-model.ts';
import { replayObserved } from '../src/replay-observed.ts';
import { simulatePlan } from '../src/simulate.ts';
import { withRequestRate } from '../src/workloads/load.ts';
import { buildWorkload } from '../src/workloads/registry.ts';
import { parseTrace, sessionLinks, sessionTailIds } from '../src/workloads/trace-file.ts';
import { runSimCli } from './helpers/cli.ts';

const dir = mkdtempSync(join(tmpdir(), 'kvroute-session-replay-'));
const BLOCK = 64;
/** Slow: a 600-token prefill alone takes 20 + 600 * 1 = 620 ms, far over the recorded 100 ms. */
const SLOW: CostProfileSpec = {
  format: 'kvroute-cost-profile/v1',
  name: 'slow',
  description: '',
  prefill: { floorMs: 20, perTokenMs: 1, attnMsPerMTokenPairs: 0 },
  decode: { floorMs: 5, perSeqMs: 0, perKContextTokenMs: 0 },
  overheadMs: 0,
  kvCapacityTokens: 100_000,
  chunkedPrefillSize: 4096,
};
const PROFILE_FILE = join(dir, 'slow.json');
writeFileSync(PROFILE_FILE, JSON.stringify(SLOW));

const START = {
  event: 'start',
  origin_unix_ms: 1_760_000_000_000,
  block_tokens: BLOCK,
  sample_rate: 1,
  method: 'round_robin',
  options: {},
  ranks: 1,
};

function ids(n: number, from: number): number[] {
  return Array.from({ length: n }, (_, i) => from + i);
}

function write(name: string, lines: Record<string, unknown>[]): string {
  const file = join(dir, name);
  writeFileSync(file, `${lines.map((l) => JSON.stringify(l)).join('\n')}\n`);
  return file;
}

/** Two turns of one session: the second sent 200 ms after the first's recorded 100 ms answer. */
function twoTurns(key: string | undefined): Record<string, unknown>[] {
  const k = key !== undefined ? { key } : {};
  return [
    START,
    // Written at completion: the second turn's line may come first in the file.
    {
      timestamp: 300,
      input_length: 660,
      output_length: 4,
      hash_ids: [...ids(9, 1), 99, 98],
      e2e_ms: 100,
      status: 200,
      ...k,
    },
    {
      timestamp: 0,
      input_length: 600,
      output_length: 4,
      // Nine whole blocks and a partial one, whose id differs from the next turn's 10th block.
      hash_ids: [...ids(9, 1), 55],
      e2e_ms: 100,
      status: 200,
      ...k,
    },
  ];
}

const run = (file: string, extra: Record<string, unknown> = {}) => {
  const plan = buildWorkload('replay', { file, ...extra }, 1);
  const { records } = simulatePlan(plan, {
    policy: { method: 'round_robin' },
    profile: costModelFromSpec(SLOW),
    seed: 1,
  });
  return { plan, byId: new Map(records.map((r) => [r.id, r])) };
};

describe('closed-loop session replay', () => {
  it('links each turn to the answer it waited for, with the recorded think gap', () => {
    const t = parseTrace(
      twoTurns('s1')
        .map((l) => JSON.stringify(l))
        .join('\n'),
      'mem',
    );
    expect(sessionLinks(t.lines)).toEqual([undefined, { prev: 0, gapMs: 200 }]);
    // No key, no session: nothing to wait for.
    const anon = parseTrace(
      twoTurns(undefined)
        .map((l) => JSON.stringify(l))
        .join('\n'),
      'mem',
    );
    expect(sessionLinks(anon.lines)).toEqual([undefined, undefined]);
  });

  it('a first turn predicted slower than recorded delays the second turn by as much', () => {
    const file = write('two.jsonl', twoTurns('s1'));
    const { plan, byId } = run(file);
    expect(plan.requests[1]!.after).toEqual({ id: 0, gapMs: 200 });
    expect(plan.recorded!.closedLoop).toBe(1);
    const first = byId.get(0)!;
    const second = byId.get(1)!;
    // Predicted: the first turn ends far later than the recorded 100 ms ...
    expect(first.endMs).toBeGreaterThan(600);
    // ... and the second is sent its think gap after that end, not at its recorded 300 ms.
    expect(second.arrivalMs).toBeCloseTo(first.endMs + 200, 9);

    // Forced open loop: sent at its timestamp, while the first is still running.
    const open = run(file, { openLoop: true });
    expect(open.plan.requests[1]!.after).toBeUndefined();
    expect(open.plan.recorded!.closedLoop).toBe(0);
    expect(open.byId.get(1)!.arrivalMs).toBe(300);
    expect(open.byId.get(0)!.endMs).toBeGreaterThan(300);
  });

  it('a gap of a speedup-times faster replay shrinks with the arrivals', () => {
    const file = write('two-fast.jsonl', twoTurns('s1'));
    const { plan, byId } = run(file, { speedup: 4 });
    expect(plan.requests[1]!.after).toEqual({ id: 0, gapMs: 50 });
    expect(byId.get(1)!.arrivalMs).toBeCloseTo(byId.get(0)!.endMs + 50, 9);
  });

  it('leaves traces without sessions open loop, exactly as before', () => {
    const file = write('anon.jsonl', twoTurns(undefined));
    const a = run(file);
    const b = run(file, { openLoop: true });
    expect(a.plan.requests.every((r) => r.after === undefined)).toBe(true);
    expect(a.byId.get(1)!.arrivalMs).toBe(300);
    expect([...a.byId.values()]).toEqual([...b.byId.values()]);
    // A plain Mooncake file (no start line, no observations) too.
    const plain = write(
      'plain.jsonl',
      twoTurns(undefined)
        .slice(1)
        .reverse()
        .map(({ e2e_ms: _e, status: _s, ...l }) => l),
    );
    const p = run(plain, { blockTokens: BLOCK, ranks: 1 });
    expect(p.plan.requests.every((r) => r.after === undefined)).toBe(true);
    expect(p.byId.get(1)!.arrivalMs).toBe(300);
  });

  it('does not chain requests of one key that ran at the same time', () => {
    const lines = twoTurns('s1');
    // The second sent at 50 ms, before the first's answer (100 ms): concurrent, not a turn.
    (lines[1] as { timestamp: number }).timestamp = 50;
    const t = parseTrace(lines.map((l) => JSON.stringify(l)).join('\n'), 'mem');
    expect(sessionLinks(t.lines)).toEqual([undefined, undefined]);
  });

  it('follows the latest answer that had arrived, and several turns may wait on one answer', () => {
    const line = (timestamp: number, e2e: number) => ({
      timestamp,
      input_length: 10,
      output_length: 1,
      hash_ids: [timestamp],
      e2e_ms: e2e,
      key: 'k',
    });
    const fan = [line(0, 500), line(10, 50), line(100, 10), line(100, 10), line(600, 1)];
    const file = write('fan.jsonl', [START, ...fan]);
    const t = parseTrace(readFileSync(file, 'utf8'), file);
    expect(sessionLinks(t.lines)).toEqual([
      undefined,
      undefined,
      // 10 + 50 ended before 100; 0 + 500 had not.
      { prev: 1, gapMs: 40 },
      { prev: 1, gapMs: 40 },
      // By 600 the 500 ms one (ended at 500) is the latest answer in.
      { prev: 0, gapMs: 100 },
    ]);
    const plan = buildWorkload('replay', { file }, 1);
    const { records, summary } = simulatePlan(plan, {
      policy: { method: 'round_robin' },
      profile: costModelFromSpec(SLOW),
      seed: 1,
    });
    expect(records).toHaveLength(5);
    expect(summary.failed).toBe(0);
  });

  it("a turn's partial last block is the head of the next turn's block there", () => {
    const file = write('tail.jsonl', twoTurns('s1'));
    const t = parseTrace(readFileSync(file, 'utf8'), file);
    const links = sessionLinks(t.lines);
    // The next turn's 10th block (id 99) is whole: the first turn's partial one is its head.
    expect(sessionTailIds(t.lines, links, BLOCK)).toEqual([99, undefined]);
    const { plan, byId } = run(file);
    const a = plan.requests[0]!.inputIds;
    const b = plan.requests[1]!.inputIds;
    expect(Array.from(b.subarray(0, a.length))).toEqual(Array.from(a));
    // So the worker's whole-prompt reuse is predicted, not only the nine whole blocks.
    expect(byId.get(1)!.cachedTokens).toBe(600);

    // A follower that does not extend it (another whole block differs) infers nothing.
    const lines = twoTurns('s1');
    (lines[1] as { hash_ids: number[] }).hash_ids[8] = 77;
    const u = parseTrace(lines.map((l) => JSON.stringify(l)).join('\n'), 'mem');
    expect(sessionTailIds(u.lines, sessionLinks(u.lines), BLOCK)).toEqual([undefined, undefined]);
  });

  it('chains tails through turns that stay inside one block', () => {
    const line = (timestamp: number, len: number, last: number) => ({
      timestamp,
      input_length: len,
      output_length: 1,
      hash_ids: [1, last],
      e2e_ms: 10,
      key: 'k',
    });
    // Turns of 70, 90 and 128 tokens: the second block partial, partial, then whole (id 30).
    const t = parseTrace(
      [START, line(0, 70, 10), line(100, 90, 20), line(200, 128, 30)]
        .map((l) => JSON.stringify(l))
        .join('\n'),
      'mem',
    );
    expect(sessionTailIds(t.lines, sessionLinks(t.lines), BLOCK)).toEqual([30, 30, undefined]);
  });

  it('a turn whose previous turn was cut from the plan is sent at its own time', () => {
    const file = write('cut.jsonl', twoTurns('s1'));
    const plan = buildWorkload('replay', { file }, 1);
    const cut = { ...plan, requests: plan.requests.slice(1) };
    const { records, summary } = simulatePlan(cut, {
      policy: { method: 'round_robin' },
      profile: costModelFromSpec(SLOW),
      seed: 1,
    });
    expect(summary.failed).toBe(0);
    expect(records.map((r) => [r.id, r.arrivalMs])).toEqual([[1, 300]]);
  });

  it('a request-rate transform sends every request open loop', () => {
    const file = write('two-rate.jsonl', twoTurns('s1'));
    const plan = buildWorkload('replay', { file }, 1);
    const paced = withRequestRate(plan, 10, 1);
    expect(paced.requests.every((r) => r.after === undefined)).toBe(true);
  });

  it('replay --observed says how many requests replayed closed loop', () => {
    const file = write('obs.jsonl', twoTurns('s1'));
    const plan = buildWorkload('replay', { file }, 1);
    const r = replayObserved(plan, { profile: costModelFromSpec(SLOW), seed: 1 });
    expect(r.notes.join('\n')).toMatch(/1 of 2 requests replayed closed loop/);
  });
});

describe('sweep --trace', () => {
  const cli = (args: string[]) => runSimCli(args, dir);
  const grid = [
    '--policy',
    'round_robin,total_tokens',
    '--jobs',
    '1',
    '--profile-file',
    'slow.json',
  ];

  it('is --scenario replay --set file=FILE, closed loop unless --open-loop', async () => {
    write('sweep.jsonl', twoTurns('s1'));
    const a = await cli(['sweep', '--trace', 'sweep.jsonl', ...grid, '--json', 'a.json']);
    expect(a.code, a.stderr).toBe(0);
    const b = await cli([
      'sweep',
      '--scenario',
      'replay',
      '--set',
      'file=sweep.jsonl',
      ...grid,
      '--json',
      'b.json',
    ]);
    expect(b.code, b.stderr).toBe(0);
    const read = (f: string) => JSON.parse(readFileSync(join(dir, f), 'utf8'));
    expect(read('a.json').grid).toEqual(read('b.json').grid);
    expect(a.stdout).toMatch(
      /Confidence: on the setting the trace was recorded with \(round_robin/,
    );
    const c = await cli([
      'sweep',
      '--trace',
      'sweep.jsonl',
      '--open-loop',
      ...grid,
      '--json',
      'c.json',
    ]);
    expect(c.code, c.stderr).toBe(0);
    // Open loop the second turn queues behind the slow first one: TTFT p99 is not the same.
    expect(read('c.json').grid[0].result.ttftMs.p99).not.toBe(
      read('a.json').grid[0].result.ttftMs.p99,
    );
  });

  it('refuses --trace with another scenario, a second trace, or --open-loop without a trace', async () => {
    write('sweep2.jsonl', twoTurns('s1'));
    const a = await cli(['sweep', '--trace', 'sweep2.jsonl', '--scenario', 'agentic', ...grid]);
    expect(a.code).not.toBe(0);
    expect(a.stderr).toMatch(/--trace sweeps on a trace/);
    const b = await cli(['sweep', '--trace', 'sweep2.jsonl', '--set', 'file=x.jsonl', ...grid]);
    expect(b.stderr).toMatch(/give the trace once/);
    const c = await cli(['sweep', '--scenario', 'agentic', '--open-loop', ...grid]);
    expect(c.stderr).toMatch(/--open-loop applies to a trace/);
  });
});
