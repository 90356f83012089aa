// Traces the router records (docs/recorded-trace.md) read wherever Mooncake traces are:
// replay takes its block size, rank count and setting from the start line, keeps policy
// switches, and `replay --observed` compares a replay with the recorded observations. The
// observations here are the simulator's own, written in the recorded format: replaying them
// under the recorded setting and profile must reproduce them exactly.
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { type CostProfileSpec, costModelFromSpec } from '../src/cost/cost-model.ts';
import { getProfile } from '../src/cost/profiles.ts';
import { readObservations } from '../src/fit/observations.ts';
import { replayObserved } from '../src/replay-observed.ts';
import { simulatePlan } from '../src/simulate.ts';
import { buildWorkload } from '../src/workloads/registry.ts';
import { parseTrace } from '../src/workloads/trace-file.ts';
import { runSimCli } from './helpers/cli.ts';
import { agentLines, BLOCK, recordingFixture } from './helpers/recorded.ts';

const {
  dir,
  profile: PROFILE,
  profileFile: PROFILE_FILE,
} = recordingFixture('kvroute-recorded-', 'recorded-test');
/** Five agents, eight turns, 37 ms apart within a turn. */
const mooncakeLines = () => agentLines(0, 5, 8, 37);

/**
 * The traffic "recorded": replayed under `method` on 3 ranks (with a switch to `next` at
 * switchAt), each line given what the simulator observed, written in completion order.
 */
function writeRecorded(
  file: string,
  o: { method: string; next?: string; switchAt?: number; drop?: 'cached' | 'stream' },
) {
  const plain = join(dir, 'plain.jsonl');
  const base = mooncakeLines();
  writeFileSync(plain, base.map((l) => JSON.stringify(l)).join('\n'));
  const plan = buildWorkload('replay', { file: plain, blockTokens: BLOCK, ranks: 3 }, 1);
  const { records } = simulatePlan(plan, {
    policy: { method: o.method },
    profile: costModelFromSpec(PROFILE),
    seed: 1,
    ...(o.next !== undefined
      ? { policySwitches: [{ atMs: o.switchAt!, policy: { method: o.next } }] }
      : {}),
  });
  const done = [...records].sort((a, b) => a.endMs - b.endMs);
  const out: string[] = [
    JSON.stringify({
      event: 'start',
      origin_unix_ms: 1_760_000_000_000,
      block_tokens: BLOCK,
      sample_rate: 1,
      method: o.method,
      options: {},
      ranks: 3,
    }),
  ];
  for (const r of done) {
    const l = base[r.id]!;
    if (o.next !== undefined && r.arrivalMs >= o.switchAt! && out.length > 0) {
      // The switch line goes where the router wrote it: before the first later completion.
      if (!out.some((s) => s.includes('policy_switch'))) {
        out.push(
          JSON.stringify({
            event: 'policy_switch',
            timestamp: o.switchAt,
            method: o.next,
            options: {},
          }),
        );
      }
    }
    out.push(
      JSON.stringify({
        ...l,
        rank: r.rank,
        reason: r.reason,
        ...(o.drop === 'cached' && r.id % 2 === 0 ? {} : { cached_tokens: r.cachedTokens }),
        ttft_ms: r.ttftMs,
        e2e_ms: r.endMs - r.arrivalMs,
        status: 200,
        key: `k${r.id % 5}`,
        stream: !(o.drop === 'stream' && r.id % 3 === 0),
      }),
    );
    // Another kind of event a reader must step over.
    if (r.id === 7) out.push(JSON.stringify({ event: 'rotated', timestamp: r.endMs }));
  }
  writeFileSync(file, `${out.join('\n')}\n`);
  return { records, base };
}

const cli = (args: string[]) => runSimCli(args, dir);

describe('recorded traces', () => {
  it('plain replay applies the recorded policy switches at their time and marks them; --ignore-recorded-switches does not', async () => {
    const file = join(dir, 'switch-plain.jsonl');
    writeRecorded(file, { method: 'round_robin', next: 'prefix_match', switchAt: 1600 });
    const html = join(dir, 'switch-plain.html');
    const r = await cli([
      'replay',
      file,
      '--policies',
      'round_robin',
      '--json',
      '-',
      '--html',
      html,
    ]);
    expect(r.code, r.stderr).toBe(0);
    const reasons = JSON.parse(r.stdout).policies[0].reasons as Record<string, number>;
    expect(Object.keys(reasons).sort()).toEqual(['prefix-hash', 'round-robin']);
    expect(readFileSync(html, 'utf8')).toContain('switch to prefix_match');
    const whole = await cli([
      'replay',
      file,
      '--policies',
      'round_robin',
      '--ignore-recorded-switches',
      '--json',
      '-',
    ]);
    expect(whole.code, whole.stderr).toBe(0);
    expect(Object.keys(JSON.parse(whole.stdout).policies[0].reasons)).toEqual(['round-robin']);
  });

  it('replay reads block size, ranks, setting and switches from the event lines, in arrival order', () => {
    const file = join(dir, 'switch.jsonl');
    writeRecorded(file, { method: 'round_robin', next: 'prefix_match', switchAt: 1600 });
    const plan = buildWorkload('replay', { file }, 1);
    expect(plan.ranks).toBe(3);
    expect(plan.options?.blockTokens).toBe(BLOCK);
    expect(plan.requests).toHaveLength(40);
    const times = plan.requests.map((r) => r.arrivalMs!);
    expect(times).toEqual([...times].sort((a, b) => a - b));
    expect(plan.recorded?.start.method).toBe('round_robin');
    expect(plan.recorded?.switches).toEqual([
      { timestamp: 1600, method: 'prefix_match', options: {} },
    ]);
    // One skipped event line (an unknown kind), nothing else.
    expect(plan.skippedLines).toBe(1);
    // --ranks and blockTokens given by the user win over the start line.
    const over = buildWorkload('replay', { file, ranks: 5 }, 1);
    expect(over.ranks).toBe(5);
  });

  it('names the file and line of a bad line', () => {
    const file = join(dir, 'bad.jsonl');
    const start = '{"event":"start","block_tokens":64,"ranks":2,"method":"round_robin"}';
    const ok = '{"timestamp":0,"input_length":100,"output_length":3,"hash_ids":[1,2]}';
    const cases: [string, RegExp][] = [
      [
        `${start}\n${ok}\n{"timestamp":1,"input_length":100,"output_length":3,"hash_ids":[1,2],"cached_tokens":500}`,
        /bad\.jsonl:3: cached_tokens must be an integer in \[0, input_length 100\]/,
      ],
      [
        `{"event":"start","block_tokens":0}\n${ok}`,
        /bad\.jsonl:1: start: block_tokens must be an integer >= 1/,
      ],
      [
        `${start}\n${ok}\n{"event":"start","block_tokens":512}`,
        /bad\.jsonl:3: start event with block_tokens 512.*concatenated/,
      ],
      [
        // Two router runs (a restart moved the first file aside): each counts from its origin.
        `{"event":"start","block_tokens":64,"origin_unix_ms":1000}\n${ok}\n{"event":"start","block_tokens":64,"origin_unix_ms":7500}\n${ok}`,
        /bad\.jsonl:3: start event with origin_unix_ms 7500, the recording began at 1000: files of two router runs were concatenated/,
      ],
      [
        `${start}\n${ok}\n{"event":"policy_switch","timestamp":5}`,
        /bad\.jsonl:3: policy_switch: method/,
      ],
      [
        `${start}\n${ok}\n{"timestamp":1,"input_length":100,"output_length":3,"hash_ids":[1,2],"ttft_ms":"x"}`,
        /bad\.jsonl:3: ttft_ms must be a number/,
      ],
      [`${ok}\n${start}`, /bad\.jsonl:2: a start event after request lines/],
    ];
    for (const [text, err] of cases) {
      writeFileSync(file, text);
      expect(() => buildWorkload('replay', { file }, 1)).toThrow(err);
    }
    // 100 tokens in blocks of 512 need one id; in blocks of 64 (the start line's), two.
    expect(() =>
      parseTrace(
        `{"event":"start","block_tokens":64}\n{"timestamp":0,"input_length":100,"output_length":1,"hash_ids":[1]}`,
        'x.jsonl',
      ),
    ).toThrow(/x\.jsonl:2: hash_ids has 1 ids, input_length 100 needs 2 \(blocks of 64 tokens\)/);
  });

  it('replay --observed reproduces its own observations: zero error, every rank agreed', async () => {
    const file = join(dir, 'self.jsonl');
    writeRecorded(file, { method: 'prefix_match', next: 'round_robin', switchAt: 1800 });
    const plan = buildWorkload('replay', { file }, 1);
    const r = replayObserved(plan, { profile: costModelFromSpec(PROFILE), seed: 1 });
    for (const row of r.comparison) {
      if (row.key === 'throughput' || row.key === 'errors') continue;
      expect(Math.abs(row.relError), row.key).toBeLessThan(1e-9);
    }
    expect(r.comparison.find((c) => c.key === 'hitRate')!.observed).toBeGreaterThan(0.3);
    expect(r.rankAgreement).toEqual({ compared: 40, same: 40 });
    expect(r.switches).toHaveLength(1);
    // Without the switch (another policy forced), the ranks part ways.
    const forced = replayObserved(plan, {
      profile: costModelFromSpec(PROFILE),
      seed: 1,
      policy: { method: 'prefix_match' },
    });
    expect(forced.rankAgreement.same).toBeLessThan(40);

    const out = await cli([
      'replay',
      '--trace',
      file,
      '--observed',
      '--profile-file',
      PROFILE_FILE,
      '--json',
      'obs.json',
    ]);
    expect(out.code, out.stderr).toBe(0);
    expect(out.stdout).toMatch(/setting replayed: prefix_match \(\+1 switch\)/);
    expect(out.stdout).toMatch(/TTFT p50 .* \+?0\.0%/);
    expect(out.stdout).toMatch(/rank agreement: 40 of 40 requests \(100\.0%\)/);
    expect(out.stdout).toMatch(/policy switch at 1800 ms: round_robin/);
    const json = JSON.parse(readFileSync(join(dir, 'obs.json'), 'utf8'));
    expect(json.format).toBe('kvroute-replay-observed/v1');
    expect(json.perRequest).toHaveLength(40);
  });

  it('leaves what the router did not observe out of both sides', () => {
    const file = join(dir, 'partial.jsonl');
    writeRecorded(file, { method: 'prefix_match', drop: 'cached' });
    const plan = buildWorkload('replay', { file }, 1);
    const r = replayObserved(plan, { profile: costModelFromSpec(PROFILE), seed: 1 });
    expect(r.compared.hitRate).toBe(20);
    expect(Math.abs(r.comparison.find((c) => c.key === 'hitRate')!.absError)).toBeLessThan(1e-9);
    expect(r.notes.join('\n')).toMatch(/hit rate over the 20 of 40 requests/);
    const file2 = join(dir, 'nostream.jsonl');
    writeRecorded(file2, { method: 'prefix_match', drop: 'stream' });
    const r2 = replayObserved(buildWorkload('replay', { file: file2 }, 1), {
      profile: costModelFromSpec(PROFILE),
      seed: 1,
    });
    expect(r2.compared.ttft).toBe(26);
    const obs = readObservations(file2);
    expect(obs.unobserved).toEqual({ cachedUnknown: 0, notStreamed: 14 });
    expect(obs.requests).toHaveLength(26);
  });

  it('explains what is wrong with --observed on a plain Mooncake trace or a bad flag mix', async () => {
    const plain = join(dir, 'plain-only.jsonl');
    writeFileSync(
      plain,
      mooncakeLines()
        .map((l) => JSON.stringify(l))
        .join('\n'),
    );
    const a = await cli(['replay', plain, '--observed', '--set', 'blockTokens=64']);
    expect(a.code).toBe(2);
    expect(a.stderr).toMatch(/not a recorded trace \(no start event line\)/);
    // Two files are read as one (rotated files): a plain trace twice goes back in time.
    const b = await cli(['replay', plain, '--trace', plain, '--set', 'blockTokens=64']);
    expect(b.code).toBe(2);
    expect(b.stderr).toMatch(/plain-only\.jsonl:1: timestamp 0 goes back in time/);
  });
});

describe('fit --trace', () => {
  it('fits the profile back from a recorded trace of lone requests and bursts', async () => {
    const plan = buildWorkload(
      'fit-probe',
      {
        singles: 20,
        maxTokens: 1500,
        bursts: '2,4',
        burstContextTokens: '256,1024',
        gapMs: 800,
        burstGapMs: 1500,
      },
      1,
    );
    const { records } = simulatePlan(plan, {
      policy: { method: 'round_robin' },
      profile: costModelFromSpec(PROFILE),
      seed: 1,
    });
    const lines = [
      JSON.stringify({ event: 'start', block_tokens: 512, ranks: 1, method: 'round_robin' }),
    ];
    for (const r of [...records].sort((a, b) => a.endMs - b.endMs)) {
      lines.push(
        JSON.stringify({
          timestamp: r.arrivalMs,
          input_length: r.inputTokens,
          output_length: r.outputTokens,
          hash_ids: Array.from(
            { length: Math.ceil(r.inputTokens / 512) },
            (_, i) => r.id * 100 + i,
          ),
          rank: r.rank,
          reason: r.reason,
          cached_tokens: r.cachedTokens,
          ttft_ms: r.ttftMs,
          e2e_ms: r.endMs - r.arrivalMs,
          status: 200,
          stream: true,
        }),
      );
    }
    // One answer not streamed: no TTFT of its own to fit, so left out, and counted as such.
    const last = JSON.parse(lines.at(-1)!) as Record<string, unknown>;
    lines.push(JSON.stringify({ ...last, stream: false }));
    writeFileSync(join(dir, 'probe.jsonl'), `${lines.join('\n')}\n`);
    const out = await cli([
      'fit',
      '--trace',
      'probe.jsonl',
      '--chunked-prefill-size',
      '512',
      '--out',
      'fitted.json',
    ]);
    expect(out.code, out.stderr).toBe(0);
    const fitted = JSON.parse(readFileSync(join(dir, 'fitted.json'), 'utf8')) as CostProfileSpec;
    expect(fitted.overheadMs).toBeCloseTo(PROFILE.overheadMs!, 3);
    expect(fitted.prefill.floorMs).toBeCloseTo(PROFILE.prefill.floorMs, 3);
    expect(fitted.prefill.perTokenMs).toBeCloseTo(PROFILE.prefill.perTokenMs, 5);
    expect(fitted.prefill.attnMsPerMTokenPairs).toBeCloseTo(
      PROFILE.prefill.attnMsPerMTokenPairs,
      3,
    );
    expect(Math.abs(fitted.decode.perSeqMs / PROFILE.decode.perSeqMs - 1)).toBeLessThan(0.05);
    expect(out.stdout).toMatch(/prefill \+ overhead: \d+ lone requests/);
    expect(out.stdout).toMatch(
      new RegExp(
        `^${lines.length - 2} requests used \\(0 failed or unmeasured and 1 not observed left out\\)$`,
        'm',
      ),
    );
    // Timings do not measure the KV pool: taken from the base profile, and said so.
    const base = getProfile('h200-llama-3.1-8b');
    expect(fitted.kvCapacityTokens).toBe(base.kvCapacityTokens);
    expect(out.stdout).toContain(
      `note: the profile's KV pool (kvCapacityTokens ${base.kvCapacityTokens} per rank) is --base-profile h200-llama-3.1-8b's, not measured: pass --kv-capacity`,
    );
    expect(out.stdout).not.toContain('chunkedPrefillSize');
    const told = await cli([
      'fit',
      '--trace',
      'probe.jsonl',
      '--chunked-prefill-size',
      '512',
      '--kv-capacity',
      '300000',
      '--out',
      'told.json',
    ]);
    expect(told.code, told.stderr).toBe(0);
    expect(told.stdout).not.toContain('KV pool');
    expect(JSON.parse(readFileSync(join(dir, 'told.json'), 'utf8')).kvCapacityTokens).toBe(300000);
  });
});

describe('sweep of a recorded trace', () => {
  it('states its confidence: predicted vs observed on the setting that was recorded', async () => {
    const file = join(dir, 'sweep-src.jsonl');
    writeRecorded(file, { method: 'prefix_match' });
    const out = await cli([
      'sweep',
      '--scenario',
      'replay',
      '--set',
      `file=${file}`,
      '--profile-file',
      PROFILE_FILE,
      '--policy',
      'prefix_match',
      '--window',
      '64',
      '--prefix-length',
      '256,512',
      '--jobs',
      '1',
      '--json',
      'sweep.json',
    ]);
    expect(out.code, out.stderr).toBe(0);
    // The observations are the simulator's own under the recorded setting: no error at all.
    expect(out.stdout).toMatch(
      /Confidence: on the setting the trace was recorded with \(prefix_match, 40 requests\) the prediction was off by \+?-?0\.0 pt hit rate, \+?-?0\.0% TTFT p50, \+?-?0\.0% TTFT p99\./,
    );
    const json = JSON.parse(readFileSync(join(dir, 'sweep.json'), 'utf8'));
    expect(json.confidence.requests).toBe(40);
    expect(Math.abs(json.confidence.ttftP99)).toBeLessThan(1e-9);
  });
});
