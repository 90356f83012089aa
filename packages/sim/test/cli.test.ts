// The CLI end to end, in-process through runCli (fast) and, for stdout purity and exit
// codes as a shell sees them, as a child process through tsx. Workloads are kept small.
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { methodNames } from '@kvroute/policy';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { commands } from '../src/cli/registry.ts';
import { oneBigCacheBound } from '../src/compare/bound.ts';
import { getProfile, profileNames } from '../src/cost/profiles.ts';
import { buildWorkload, scenarioNames } from '../src/workloads/registry.ts';
import { type CaptureOptions, runSimCli } from './helpers/cli.ts';

const pkgDir = join(dirname(fileURLToPath(import.meta.url)), '..');
let dir = '';

beforeAll(() => {
  dir = mkdtempSync(join(tmpdir(), 'kvroute-sim-cli-'));
});
afterAll(() => {
  // Leave the temp dir: it is small and helps when a test fails.
});

const cli = (args: string[], opts: CaptureOptions = {}) => runSimCli(args, dir, opts);

// 6 requests on 4 ranks: enough for a cold miss, a hit and a round-robin wrap.
const SMALL = ['--scenario', 'seed-sequential', '--ranks', '4', '--set', 'requests=6'];

describe('run', () => {
  it("--switch-policy switches every policy's router at that time and marks it in the HTML report", async () => {
    const html = join(dir, 'switch.html');
    const r = await cli([
      'run',
      ...SMALL,
      '--policies',
      'round_robin',
      '--switch-policy',
      '0.5s=prefix_match:window=8',
      '--html',
      html,
      '--json',
      '-',
    ]);
    expect(r.stderr).toBe(`wrote HTML to ${html}\n`);
    expect(r.code).toBe(0);
    const report = JSON.parse(r.stdout);
    // The six requests arrive one after another; those sent after 0.5 s are prefix-hashed.
    expect(Object.keys(report.policies[0].reasons).sort()).toEqual(['prefix-hash', 'round-robin']);
    expect(readFileSync(html, 'utf8')).toContain('switch to prefix_match window=8');
    for (const [arg, message] of [
      ['prefix_match', /expected AT=POLICY/],
      ['soon=prefix_match', /expected AT=POLICY/],
      ['5s=nope', /nope/],
    ] as const) {
      const bad = await cli(['run', ...SMALL, '--switch-policy', arg]);
      expect(bad.code).toBe(2);
      expect(bad.stderr).toMatch(message);
    }
  });

  it('prints one comparison row per policy and nothing on stderr', async () => {
    const r = await cli(['run', ...SMALL, '--policies', 'round_robin,total_tokens,prefix_match']);
    expect(r.stderr).toBe('');
    expect(r.code).toBe(0);
    expect(r.stdout).toContain(
      'scenario seed-sequential, 4 ranks, profile seed-qwen3-moe-dp16, seed 1',
    );
    const rows = r.stdout
      .split('\n')
      .filter((l) => /^(round_robin|total_tokens|prefix_match)\s/.test(l));
    expect(rows.map((l) => l.split(/\s+/)[0])).toEqual([
      'round_robin',
      'total_tokens',
      'prefix_match',
    ]);
    // prefix_match keeps the one prefix on one rank: 5 of 6 requests hit.
    const hit = (name: string) =>
      Number(
        rows
          .find((l) => l.startsWith(name))!
          .split(/\s+/)[1]!
          .replace('%', ''),
      );
    expect(hit('prefix_match')).toBeGreaterThan(hit('round_robin'));
  });

  it('writes only JSON to stdout with --json -, with the documented keys', async () => {
    const r = await cli([
      'run',
      ...SMALL,
      '--policies',
      'round_robin,prefix_match',
      '--window',
      '128',
      '--json',
      '-',
    ]);
    expect(r.code).toBe(0);
    expect(r.stderr).toBe('');
    const j = JSON.parse(r.stdout);
    expect(j).toMatchObject({
      scenario: 'seed-sequential',
      ranks: 4,
      profile: 'seed-qwen3-moe-dp16',
      seed: 1,
    });
    expect(j.scenarioOptions.requests).toBe(6);
    expect(j.policies.map((p: { policy: string }) => p.policy)).toEqual([
      'round_robin',
      'prefix_match',
    ]);
    const [rr, pm] = j.policies;
    // round_robin does not read --window, so its options do not claim one.
    expect(rr.options).toEqual({});
    expect(pm.options).toEqual({ window: 128 });
    for (const p of j.policies) {
      expect(p.requests).toBe(6);
      expect(p.hitRate).toBeGreaterThanOrEqual(0);
      expect(p.hitRate).toBeLessThanOrEqual(1);
      expect(Object.keys(p.ttftMs)).toEqual(['p50', 'p90', 'p99', 'mean']);
      for (const k of [
        'coldTtftMs',
        'steadyTtftMs',
        'throughputRps',
        'imbalance',
        'perRank',
        'queueingMs',
        'evictions',
      ]) {
        expect(p).toHaveProperty(k);
      }
      expect(p.perRank).toHaveLength(4);
    }
    expect(pm.hitRate).toBeGreaterThan(rr.hitRate);
  });

  it('gives byte-identical JSON for the same arguments and seed, different JSON for another seed', async () => {
    const args = ['run', ...SMALL, '--policies', 'round_robin,prefix_match', '--json', '-'];
    const a = await cli([...args, '--seed', '7']);
    const b = await cli([...args, '--seed', '7']);
    const c = await cli([...args, '--seed', '8']);
    expect(a.stdout).toBe(b.stdout);
    expect(JSON.parse(a.stdout).seed).toBe(7);
    expect(c.stdout).not.toBe(a.stdout);
  });

  it('writes CSV and a self-contained HTML report to files, with no chart warnings', async () => {
    // Vega-Lite reports spec problems (conflicting legends, dropped encodings) on console.warn.
    const warn = vi.spyOn(console, 'warn');
    const r = await cli([
      'run',
      ...SMALL,
      '--policies',
      'round_robin,prefix_match',
      '--csv',
      'out/r.csv',
      '--html',
      'out/r.html',
    ]);
    expect(r.code).toBe(0);
    expect(r.stderr).toContain(`wrote CSV to ${join(dir, 'out/r.csv')}`);
    const csv = readFileSync(join(dir, 'out/r.csv'), 'utf8').trimEnd().split('\n');
    expect(csv).toHaveLength(3);
    expect(csv[1]).toMatch(/^seed-sequential,4,seed-qwen3-moe-dp16,1,round_robin,/);
    const html = readFileSync(join(dir, 'out/r.html'), 'utf8');
    // TTFT distribution, TTFT per request, hit rate, hit rate vs p99, per-rank load.
    expect(html.match(/<svg/g)?.length).toBe(5);
    expect(html).toContain('TTFT of each request, in arrival order');
    expect(html).toContain('Hit rate vs TTFT p99 per policy (red: the one-big-cache bound)');
    expect(html).not.toMatch(/<script/i);
    expect(html).not.toMatch(/\b(src|href)\s*=\s*["']?https?:/i);
    expect(warn.mock.calls).toEqual([]);
    warn.mockRestore();
  });

  it("draws the one-big-cache bound with the KV pool the run used, not the profile's", async () => {
    const html = join(dir, 'bound.html');
    const args = ['--scenario', 'agentic', '--set', 'sessions=6', '--ranks', '2'];
    const r = await cli([
      'run',
      ...args,
      '--policies',
      'cache_aware',
      '--kv-capacity',
      '30000',
      '--html',
      html,
      '--json',
      '-',
    ]);
    expect(r.code).toBe(0);
    const report = JSON.parse(r.stdout);
    expect(report.engine.kvCapacityTokens).toBe(30_000);
    const plan = buildWorkload('agentic', { sessions: 6, ranks: 2 }, 1);
    const label = (capacity: number) =>
      `bound ${(oneBigCacheBound(plan, capacity * 2).hitRate * 100).toFixed(1)}%`;
    const page = readFileSync(html, 'utf8');
    expect(page).toContain(label(30_000));
    // The profile's own pool gives another bound, so the check above tells them apart.
    expect(label(getProfile('h200-llama-3.1-8b').kvCapacityTokens)).not.toBe(label(30_000));
    expect(page).not.toContain(label(getProfile('h200-llama-3.1-8b').kvCapacityTokens));
  });

  it('applies per-policy options and routing-key affinity', async () => {
    const r = await cli([
      'run',
      ...SMALL,
      '--policies',
      'prefix_match:window=64:prefixLength=1024',
      '--affinity',
      'routing_key',
      '--json',
      '-',
    ]);
    expect(r.code).toBe(0);
    expect(JSON.parse(r.stdout).policies[0].options).toEqual({
      window: 64,
      prefixLength: 1024,
      affinity: { kind: 'routing_key' },
    });
  });
});

describe('determinism', () => {
  it('gives byte-identical JSON for the same arguments and seed: every issue scenario, replay and sweep', async () => {
    const small: Record<string, string[]> = {
      'seed-sequential': ['requests=5', 'accumulate=true'],
      'seed-concurrent': ['requestsPerAgent=4'],
      agentic: ['sessions=6'],
      'shared-prefix': ['groups=3', 'promptsPerGroup=2'],
      replay: ['limit=40'],
    };
    const runs = Object.entries(small).map(([scenario, sets]) => [
      'run',
      '--scenario',
      scenario,
      '--ranks',
      '4',
      ...sets.flatMap((s) => ['--set', s]),
      '--policies',
      'round_robin,total_tokens,prefix_match',
      '--affinity',
      'routing_key',
      '--seed',
      'det',
    ]);
    const sweep = ['sweep', ...SMALL, '--window', '64,256', '--prefix-length', '1024'];
    for (const args of [...runs, sweep]) {
      const a = await cli([...args, '--json', '-']);
      const b = await cli([...args, '--json', '-']);
      expect(a.code, args.join(' ')).toBe(0);
      expect(a.stdout.length).toBeGreaterThan(100);
      expect(b.stdout, args.join(' ')).toBe(a.stdout);
    }
    // The seed matters: another one gives another workload and other numbers.
    const other = await cli([...runs[2]!.slice(0, -1), 'det2', '--json', '-']);
    expect(other.stdout).not.toBe((await cli([...runs[2]!, '--json', '-'])).stdout);
  });
});

describe('a profile too small for the workload', () => {
  it('is bad input (exit 2) naming the request size and the pool, not an internal error', async () => {
    const tiny = {
      format: 'kvroute-cost-profile/v1',
      name: 'tiny',
      description: 'a 10,000-token KV pool',
      prefill: { floorMs: 10, perTokenMs: 0.01, attnMsPerMTokenPairs: 0.5 },
      decode: { floorMs: 8, perSeqMs: 0.05, perKContextTokenMs: 0.001 },
      kvCapacityTokens: 10_000,
      chunkedPrefillSize: 8192,
    };
    writeFileSync(join(dir, 'tiny.json'), JSON.stringify(tiny));
    const r = await cli(['run', ...SMALL, '--profile-file', 'tiny.json']);
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(/needs \d+ KV tokens .*more than the pool's 10000/);
    expect(r.stderr).not.toContain('internal error');
    expect(r.stdout).toBe('');
  });
});

describe('scenario options that contradict each other', () => {
  it('a warm-up past the duration is bad input (exit 2), not an internal error', async () => {
    const r = await cli(['run', '--scenario', 'seed-concurrent', '--set', 'warmupMs=2000000']);
    expect(r.code).toBe(2);
    expect(r.stderr).toContain(
      'seed-concurrent: warmupMs (2000000) must be < durationMs (1200000)',
    );
    expect(r.stderr).not.toContain('internal error');
  });
});

describe('affinity table options', () => {
  it('sets maxEntries and ttlMs from --affinity, and the policy rejects bad ones (exit 2)', async () => {
    // accumulate=true: one agent session, so every request carries the same routing key.
    const args = ['run', ...SMALL, '--set', 'accumulate=true', '--policies', 'round_robin'];
    const r = await cli([...args, '--affinity', 'routing_key:maxEntries=2:ttlMs=0', '--json', '-']);
    expect(r.code).toBe(0);
    const p = JSON.parse(r.stdout).policies[0];
    expect(p.options).toEqual({ affinity: { kind: 'routing_key', maxEntries: 2, ttlMs: 0 } });
    // The table holds the one key, so every request after the first is an affinity hit.
    expect(p.reasons.affinity).toBe(5);

    const zero = await cli([...args, '--affinity', 'routing_key:maxEntries=0']);
    expect(zero.code).toBe(2);
    expect(zero.stderr).toMatch(/maxEntries must be an integer >= 1, got 0/);
    const unknown = await cli([...args, '--affinity', 'routing_key:size=5']);
    expect(unknown.code).toBe(2);
    expect(unknown.stderr).toMatch(
      /unknown affinity option 'size'; valid options: kind, maxEntries, ttlMs/,
    );
  });
});

describe('profile file', () => {
  it('runs with a kvroute-cost-profile/v1 file and names it in the report', async () => {
    const profile = {
      format: 'kvroute-cost-profile/v1',
      name: 'test-gpu',
      description: 'a test profile',
      prefill: { floorMs: 10, perTokenMs: 0.01, attnMsPerMTokenPairs: 0.5 },
      decode: { floorMs: 8, perSeqMs: 0.05, perKContextTokenMs: 0.001 },
      kvCapacityTokens: 500000,
      chunkedPrefillSize: 8192,
    };
    writeFileSync(join(dir, 'profile.json'), JSON.stringify(profile));
    const r = await cli([
      'run',
      ...SMALL,
      '--policies',
      'round_robin',
      '--profile-file',
      'profile.json',
      '--json',
      '-',
    ]);
    expect(r.code).toBe(0);
    const j = JSON.parse(r.stdout);
    expect(j.profile).toBe('test-gpu');
    // A cold ~22,700-token prompt prefilled in three 8,192-token chunks under this profile's
    // formula takes about 430 ms (the seed profile would take 7.4 s).
    expect(j.policies[0].coldTtftMs.p50).toBeGreaterThan(400);
    expect(j.policies[0].coldTtftMs.p50).toBeLessThan(600);

    writeFileSync(join(dir, 'bad-profile.json'), JSON.stringify({ ...profile, format: 'v0' }));
    const bad = await cli(['run', ...SMALL, '--profile-file', 'bad-profile.json']);
    expect(bad.code).toBe(2);
    expect(bad.stderr).toMatch(
      /--profile-file: .*bad-profile\.json.*format must be 'kvroute-cost-profile\/v1'/,
    );
  });
});

describe('bad input exits 2 with a message naming the problem', () => {
  beforeAll(() => {
    const profile = {
      format: 'kvroute-cost-profile/v1',
      name: 'no-memory',
      description: 'a profile without a memory model',
      prefill: { floorMs: 10, perTokenMs: 0.01, attnMsPerMTokenPairs: 0.5 },
      decode: { floorMs: 8, perSeqMs: 0.05, perKContextTokenMs: 0.001 },
      kvCapacityTokens: 500000,
      chunkedPrefillSize: 8192,
    };
    writeFileSync(join(dir, 'no-memory.json'), JSON.stringify(profile));
    writeFileSync(
      join(dir, 'negative.json'),
      JSON.stringify({ ...profile, prefill: { ...profile.prefill, perTokenMs: -1 } }),
    );
    writeFileSync(join(dir, 'empty.jsonl'), '');
    writeFileSync(
      join(dir, 'events-only.jsonl'),
      '{"event":"start","block_tokens":16}\nnot json\n',
    );
    writeFileSync(
      join(dir, 'overflow.jsonl'),
      '{"timestamp": 1e400, "input_length": 16, "output_length": 1, "hash_ids": [1]}\n',
    );
  });
  const TINY_AGENTIC = ['--scenario', 'agentic', '--set', 'sessions=2'];
  const PD_SWEEP = ['sweep', ...SMALL, '--layout', 'pd', '--pd-ratio', '1:1'];
  const cases: [string, string[], RegExp][] = [
    [
      'a memory fraction that leaves no KV pool',
      ['run', ...TINY_AGENTIC, '--mem-fraction', '0.01'],
      /^kvroute-sim run: error: --mem-fraction 0\.01 leaves no KV pool with profile 'h200-llama-3\.1-8b': nothing left for KV \(141\.0 GB x 0\.01 - 16\.1 GB weights/,
    ],
    [
      'a memory fraction on a profile without a memory model',
      ['run', ...SMALL, '--profile-file', 'no-memory.json', '--mem-fraction', '0.5'],
      /--mem-fraction re-derives the KV pool from the profile's memory model, and profile 'no-memory' has none: give the pool with --kv-capacity instead/,
    ],
    [
      'a host tier without a rate on a profile without a memory model',
      ['run', ...SMALL, '--profile-file', 'no-memory.json', '--host-kv-tokens', '1000'],
      /--host-kv-tokens: profile 'no-memory' has no memory model .*--host-kv-tokens-per-ms/,
    ],
    [
      'a negative cost coefficient',
      ['run', ...SMALL, '--profile-file', 'negative.json'],
      /--profile-file: cost profile .*negative\.json prefill: perTokenMs must be a finite number >= 0, got -1/,
    ],
    [
      'an empty trace',
      ['replay', 'empty.jsonl', '--policies', 'round_robin', '--json', '-'],
      /empty\.jsonl: the trace has no request lines$/m,
    ],
    [
      'a trace whose lines are all skipped',
      ['replay', 'events-only.jsonl', '--skip-invalid'],
      /events-only\.jsonl: the trace has no request lines \(1 line skipped\)/,
    ],
    [
      'sweep on an empty trace',
      ['sweep', '--trace', 'empty.jsonl'],
      /empty\.jsonl: the trace has no request lines/,
    ],
    [
      'a trace timestamp out of range',
      ['replay', 'overflow.jsonl'],
      /overflow\.jsonl:1: timestamp must be a number >= 0, got a number out of range \(parsed as Infinity\)/,
    ],
    [
      'a session rate of 0',
      ['run', ...TINY_AGENTIC, '--set', 'sessionsPerS=0'],
      /agentic: sessionsPerS must be a number > 0, got 0/,
    ],
    [
      'a request rate of 0',
      ['run', '--scenario', 'hot-prefix', '--set', 'ratePerS=0'],
      /hot-prefix: ratePerS must be a number > 0, got 0/,
    ],
    [
      'a replay speed-up of 0 as a scenario option',
      ['run', '--scenario', 'replay', '--set', 'speedup=0'],
      /replay: speedup must be a number > 0, got 0/,
    ],
    [
      'sweep --layout pd with one option value',
      [...PD_SWEEP, '--window', '64'],
      /--window: method option axes are not available with --layout pd \(the split is the axis\)/,
    ],
    [
      'sweep --layout pd with an option list',
      [...PD_SWEEP, '--window', '8,16'],
      /--window: method option axes are not available with --layout pd/,
    ],
    [
      'sweep --layout pd with a real-valued option list',
      [...PD_SWEEP, '--epsilon', '0.1,0.5'],
      /--epsilon: method option axes are not available with --layout pd/,
    ],
    [
      'sweep --layout pd with --option',
      [...PD_SWEEP, '--option', 'epsilon=0.1,0.5'],
      /--option epsilon=0\.1,0\.5: method option axes are not available with --layout pd/,
    ],
    [
      'sweep --layout pd with an offered-load axis',
      [...PD_SWEEP, '--load', 'rate:1,2'],
      /--load is not available with --layout pd/,
    ],
    [
      'a chunked prefill size below the minimum',
      ['run', ...SMALL, '--chunked-prefill-size', '4'],
      /--chunked-prefill-size must be at least 64 tokens, got 4/,
    ],
    [
      'a chunked prefill size below the page size',
      ['run', ...SMALL, '--chunked-prefill-size', '64', '--page-size', '128'],
      /--chunked-prefill-size 64 is below --page-size 128/,
    ],
    [
      'unknown scenario',
      ['run', '--scenario', 'nope'],
      /unknown scenario 'nope'; valid scenarios: seed-sequential, seed-concurrent/,
    ],
    ['missing scenario', ['run'], /--scenario is required; valid scenarios: /],
    [
      'unknown profile',
      ['run', ...SMALL, '--profile', 'h100'],
      /unknown profile 'h100'; valid profiles: h200-llama-3.2-1b/,
    ],
    [
      'unknown policy',
      ['run', ...SMALL, '--policies', 'round_robin,best'],
      /unknown policy 'best'; valid policies: round_robin/,
    ],
    [
      'zero ranks',
      ['run', ...SMALL, '--ranks', '0'],
      /--ranks must be a positive integer, got '0'/,
    ],
    [
      '--ranks against --set ranks',
      ['run', ...SMALL, '--set', 'ranks=8'],
      /--ranks 4 conflicts with --set ranks=8/,
    ],
    [
      // --ranks reaches the workload, whose failing rank 3 no longer exists.
      '--ranks below a scenario rank',
      ['run', '--scenario', 'rank-failure', '--ranks', '2'],
      /rank-failure: failRank must be < ranks \(2\), got 3/,
    ],
    [
      'negative window',
      ['run', ...SMALL, '--window=-64'],
      /--window must be a positive integer, got '-64'/,
    ],
    [
      'non-numeric prefix length',
      ['run', ...SMALL, '--prefix-length', 'long'],
      /--prefix-length must be a number, got 'long'/,
    ],
    [
      'window above prefix length',
      ['run', ...SMALL, '--policies', 'prefix_match', '--window', '512', '--prefix-length', '256'],
      /prefixLength must be >= window/,
    ],
    [
      'unknown scenario option',
      ['run', ...SMALL, '--set', 'bogus=1'],
      /seed-sequential: unknown option 'bogus'; valid options: /,
    ],
    [
      'bad scenario option value',
      ['run', ...SMALL, '--set', 'requests=0'],
      /requests must be an integer >= 1/,
    ],
    ['unknown flag', ['run', ...SMALL, '--bogus'], /Unknown option '--bogus'/],
    [
      'unknown affinity',
      ['run', ...SMALL, '--affinity', 'sticky'],
      /unknown affinity kind 'sticky'; valid affinity kinds: routing_key, none/,
    ],
    [
      'both profile flags',
      ['run', ...SMALL, '--profile', 'h200-llama-3.1-8b', '--profile-file', 'p.json'],
      /either --profile or --profile-file/,
    ],
    [
      'missing profile file',
      ['run', ...SMALL, '--profile-file', 'missing.json'],
      /--profile-file: cost profile .*missing\.json: cannot read/,
    ],
    [
      'two stdout outputs',
      ['run', ...SMALL, '--json', '-', '--csv', '-'],
      /only one of --json, --csv, --html/,
    ],
    [
      'unknown objective',
      ['sweep', ...SMALL, '--objective', 'speed'],
      /unknown objective 'speed'; valid objectives: ttft-p99, ttft-p50, ttft-mean, hit-rate, throughput/,
    ],
    [
      'sweep axis no listed method reads',
      ['sweep', ...SMALL, '--policy', 'round_robin,total_tokens', '--window', '64'],
      /--window: no method in this sweep \(round_robin, total_tokens\) reads window; methods that do: prefix_match, consistent_hash, cache_aware/,
    ],
    [
      'sweep axis value out of a method range',
      ['sweep', ...SMALL, '--policy', 'prefix_match,cache_aware', '--window', '0,64'],
      /--window 0,64: prefix_match: window must be an integer >= 1, got 0/,
    ],
    [
      'sweep axis value of the wrong type',
      ['sweep', ...SMALL, '--policy', 'cache_aware', '--window', '64.5'],
      /--window 64.5: cache_aware: window must be an integer >= 1, got 64.5/,
    ],
    [
      'sweep axis in hex',
      ['sweep', ...SMALL, '--window', '0x40'],
      /--window: '0x40' is not a number/,
    ],
    [
      'sweep enum axis',
      ['sweep', ...SMALL, '--policy', 'consistent_hash', '--option', 'load=tokens,bytes'],
      /--load tokens,bytes: consistent_hash: load must be one of tokens, requests, got 'bytes'/,
    ],
    [
      'sweep backwards range',
      ['sweep', ...SMALL, '--policy', 'cache_aware', '--epsilon', '1..0:0.1'],
      /--epsilon: range 1\.\.0:0\.1 ends below its start/,
    ],
    [
      'sweep real range without a step',
      ['sweep', ...SMALL, '--policy', 'cache_aware', '--epsilon', '0..1'],
      /--epsilon: a range of real numbers needs a step/,
    ],
    [
      'sweep unknown --option',
      ['sweep', ...SMALL, '--option', 'windowSize=64'],
      /--option windowSize: no registered method has an option of that name/,
    ],
    [
      'sweep where the method refuses every setting',
      ['sweep', ...SMALL, '--window', '512', '--prefix-length', '256'],
      /every setting of this sweep is rejected by its method, e\.g\. prefix_match window=512 prefix-length=256: .*prefixLength/,
    ],
    [
      'sweep --current with an option its method lacks',
      ['sweep', ...SMALL, '--current', 'prefix_match:epsilon=1'],
      /--current: prefix_match has no option 'epsilon'; its options: window, prefixLength/,
    ],
    [
      'sweep negative constraint',
      ['sweep', ...SMALL, '--hit-rate-within=-1'],
      /--hit-rate-within must be a number >= 0, got '-1'/,
    ],
    ['replay without file', ['replay', '--ranks', '4'], /replay needs the trace FILE/],
    [
      'replay speed-up zero',
      ['replay', 'x.jsonl', '--speedup', '0'],
      /--speedup must be a positive number/,
    ],
    [
      'unknown command',
      ['simulate'],
      /unknown command 'simulate'; valid commands: run, sweep, replay, scenarios, profiles/,
    ],
  ];
  for (const [name, args, message] of cases) {
    it(name, async () => {
      const r = await cli(args);
      expect(r.stderr).toMatch(message);
      expect(r.code).toBe(2);
      expect(r.stdout).toBe('');
      expect(r.stderr).not.toMatch(/\n\s+at /); // no stack trace
    });
  }
});

describe('replay', () => {
  const line = (t: number, ids: number[]) =>
    JSON.stringify({
      timestamp: t,
      input_length: ids.length * 512,
      output_length: 8,
      hash_ids: ids,
    });

  it('names the file and line of a malformed trace line, or skips it with --skip-invalid', async () => {
    const file = join(dir, 'bad.jsonl');
    writeFileSync(
      file,
      [line(0, [1, 2]), '{"timestamp": 5, "input_length": "many"}', line(10_000, [1, 3])].join(
        '\n',
      ),
    );
    const bad = await cli(['replay', 'bad.jsonl', '--ranks', '2']);
    expect(bad.code).toBe(2);
    expect(bad.stderr).toContain(`${file}:2: input_length must be an integer >= 1`);

    // Hashing only the shared first block sends both requests to the same rank.
    const ok = await cli([
      'replay',
      'bad.jsonl',
      '--ranks',
      '2',
      '--policies',
      'prefix_match:prefixLength=512',
      '--skip-invalid',
      '--json',
      '-',
    ]);
    expect(ok.code).toBe(0);
    const j = JSON.parse(ok.stdout);
    expect(j.command).toBe('replay');
    expect(j.skippedLines).toBe(1);
    expect(j.scenarioOptions.file).toBe('bad.jsonl');
    expect(j.policies[0].requests).toBe(2);
    // The second request finds the shared 512-token block cached.
    expect(j.policies[0].hitRate).toBeCloseTo(512 / 2048, 6);

    // The same through run: --set file= is relative to the user's directory too.
    const viaRun = await cli([
      'run',
      '--scenario',
      'replay',
      '--set',
      'file=bad.jsonl',
      '--set',
      'skipInvalid=true',
      '--ranks',
      '2',
      '--policies',
      'prefix_match:prefixLength=512',
      '--json',
      '-',
    ]);
    expect(viaRun.code).toBe(0);
    const jr = JSON.parse(viaRun.stdout);
    expect(jr.scenarioOptions.file).toBe('bad.jsonl');
    expect(jr.policies).toEqual(j.policies);

    const table = await cli(['replay', 'bad.jsonl', '--ranks', '2', '--skip-invalid']);
    expect(table.stdout).toContain('1 invalid trace lines skipped');
  });

  it('compresses time with --speedup', async () => {
    const file = join(dir, 'slow.jsonl');
    writeFileSync(file, [line(0, [1]), line(60_000, [2]), line(120_000, [3])].join('\n'));
    const at = async (x: string) =>
      JSON.parse(
        (
          await cli([
            'replay',
            file,
            '--ranks',
            '2',
            '--policies',
            'round_robin',
            '--speedup',
            x,
            '--json',
            '-',
          ])
        ).stdout,
      );
    const slow = await at('1');
    const fast = await at('10');
    expect(fast.scenarioOptions.speedup).toBe(10);
    expect(fast.policies[0].durationMs).toBeLessThan(slow.policies[0].durationMs / 5);
  });
});

describe('sweep', () => {
  it('runs the grid, skips pairs the policy rejects, and names the best with a reason', async () => {
    const args = [
      'sweep',
      ...SMALL,
      '--window',
      '256,2048',
      '--prefix-length',
      '1024,4096',
      '--objective',
      'ttft-mean',
    ];
    const r = await cli([...args, '--json', '-']);
    expect(r.code).toBe(0);
    const j = JSON.parse(r.stdout);
    expect(j.command).toBe('sweep');
    // (2048, 1024) is not a valid pair.
    expect(
      j.grid.map((c: { window: number; prefixLength: number }) => `${c.window}/${c.prefixLength}`),
    ).toEqual(['256/1024', '256/4096', '2048/4096']);
    expect(j.rejected).toHaveLength(1);
    expect(j.rejected[0].options).toEqual({ window: 2048, prefixLength: 1024 });
    expect(j.rejected[0].error).toMatch(/prefixLength/);
    const means = j.grid.map((c: { result: { ttftMs: { mean: number } } }) => c.result.ttftMs.mean);
    const best = j.grid.find(
      (c: { window: number; prefixLength: number }) =>
        c.window === j.best.window && c.prefixLength === j.best.prefixLength,
    );
    expect(best.result.ttftMs.mean).toBeLessThanOrEqual(Math.min(...means) * 1.01);
    expect(j.reason).toMatch(/has the lowest mean TTFT/);

    const t = await cli(args);
    expect(t.stdout).toContain(
      `best: prefix_match window=${j.best.window} prefix-length=${j.best.prefixLength}`,
    );
    expect(t.stdout).toContain('1 setting left out, refused by the method');
    expect(t.stdout).toContain('<- best');
  });

  it('writes the heatmap HTML', async () => {
    const r = await cli([
      'sweep',
      ...SMALL,
      '--window',
      '64,128',
      '--prefix-length',
      '1024',
      '--html',
      'sweep.html',
    ]);
    expect(r.code).toBe(0);
    const html = readFileSync(join(dir, 'sweep.html'), 'utf8');
    expect(html).toContain('prefix_match sweep: TTFT p99 (ms)');
    expect(html).not.toMatch(/<script/i);
  });

  it("sweeps cache_aware's options, several methods, and the schema's default grid", async () => {
    const r = await cli([
      'sweep',
      ...SMALL,
      '--policy',
      'cache_aware,prefix_match,round_robin',
      '--window',
      '64..256:x2',
      '--max-prefix-tokens',
      '4096',
      '--epsilon',
      '0.25,1',
      '--json',
      '-',
    ]);
    expect(r.code, r.stderr).toBe(0);
    const j = JSON.parse(r.stdout);
    expect(j.policies).toEqual(['cache_aware', 'prefix_match', 'round_robin']);
    const label = (c: { method: string; options: Record<string, unknown> }) =>
      `${c.method} ${JSON.stringify(c.options)}`;
    // cache_aware: 3 windows x 1 prefix cap x 2 epsilons, first axis fastest; prefix_match
    // reads only the window; round_robin none of them, so it runs once at its defaults.
    expect(j.grid.map(label)).toEqual([
      'cache_aware {"window":64,"maxPrefixTokens":4096,"epsilon":0.25}',
      'cache_aware {"window":128,"maxPrefixTokens":4096,"epsilon":0.25}',
      'cache_aware {"window":256,"maxPrefixTokens":4096,"epsilon":0.25}',
      'cache_aware {"window":64,"maxPrefixTokens":4096,"epsilon":1}',
      'cache_aware {"window":128,"maxPrefixTokens":4096,"epsilon":1}',
      'cache_aware {"window":256,"maxPrefixTokens":4096,"epsilon":1}',
      'prefix_match {"window":64}',
      'prefix_match {"window":128}',
      'prefix_match {"window":256}',
      'round_robin {}',
    ]);
    expect(j.axes.map((a: { option: string; methods: string[] }) => a.option)).toEqual([
      'window',
      'maxPrefixTokens',
      'epsilon',
    ]);
    expect(j.axes[0].methods).toEqual(['cache_aware', 'prefix_match']);
    // The cell really ran with its options: a window of 64 shows in its report options.
    expect(j.grid[0].result.options).toEqual({ window: 64, maxPrefixTokens: 4096, epsilon: 0.25 });
    expect(j.routerConfig).toContain(`load-balance-method: ${j.best.method}`);

    // No axis at all: every method gets its schema's sweep values.
    const d = await cli(['sweep', ...SMALL, '--policy', 'consistent_hash', '--json', '-']);
    expect(d.code, d.stderr).toBe(0);
    const dj = JSON.parse(d.stdout);
    expect(
      dj.axes.map((a: { option: string; source: string }) => `${a.option}:${a.source}`),
    ).toEqual(['prefixLength:schema', 'epsilon:schema']);
    expect(dj.grid).toHaveLength(16);
  }, 120_000);

  it('picks by the objective asked, under a hit-rate constraint, and compares with --current', async () => {
    const base = ['sweep', '--scenario', 'agentic', '--ranks', '4', '--set', 'sessions=6'];
    const args = [...base, '--policy', 'round_robin,cache_aware', '--window', '256'];
    const hit = JSON.parse((await cli([...args, '--objective', 'hit-rate', '--json', '-'])).stdout);
    expect(hit.best.method).toBe('cache_aware');
    const rr = hit.grid.find((c: { method: string }) => c.method === 'round_robin');
    const ca = hit.grid.find((c: { method: string }) => c.method === 'cache_aware');
    expect(ca.result.hitRate).toBeGreaterThan(rr.result.hitRate + 0.01);
    // A zero-point constraint leaves only the settings with the best hit rate.
    const p50 = JSON.parse(
      (
        await cli([
          ...args,
          '--objective',
          'ttft-p50',
          '--hit-rate-within',
          '0',
          '--current',
          'round_robin',
          '--json',
          '-',
        ])
      ).stdout,
    );
    expect(p50.objective).toBe('ttft-p50');
    expect(p50.hitRateWithin).toBe(0);
    expect(p50.best.method).toBe('cache_aware');
    expect(p50.reason).toMatch(
      /^Constraint: hit rate within 0 points of the best .*; 1 of 2 settings qualify/,
    );
    expect(p50.current.method).toBe('round_robin');
    expect(p50.current.result.hitRate).toBe(rr.result.hitRate);
    expect(p50.reason).toMatch(
      /The current setting, round_robin \(defaults\), gets TTFT p50 [\d.]+ ms/,
    );
    const t = await cli([...args, '--objective', 'throughput']);
    expect(t.code, t.stderr).toBe(0);
    expect(t.stdout).toMatch(/has the (highest throughput|highest throughput), [\d,]+ tok\/s/);
  }, 120_000);

  it('writes the winner as a router config with --out-config', async () => {
    const r = await cli([
      'sweep',
      ...SMALL,
      '--policy',
      'cache_aware',
      '--window',
      '128',
      '--epsilon',
      '0.5',
      '--out-config',
      'conf/router.yaml',
    ]);
    expect(r.code, r.stderr).toBe(0);
    const yaml = readFileSync(join(dir, 'conf/router.yaml'), 'utf8');
    expect(yaml).toMatch(/^# kvroute-sim sweep: best ttft-p99 of 1 settings on seed-sequential/);
    expect(yaml).toContain('load-balance-method: cache_aware\nwindow: 128\nepsilon: 0.5\n');
    expect(r.stdout).toContain(yaml);
    expect(r.stderr).toContain('wrote the router config to');
  }, 120_000);
});

describe('listings and help', () => {
  it('lists every scenario and profile, one per line, with a description', async () => {
    const s = await cli(['scenarios']);
    const sl = s.stdout.trimEnd().split('\n');
    expect(sl.map((l) => l.split(/\s+/)[0])).toEqual(scenarioNames());
    for (const l of sl) expect(l.split(/\s{2,}/)[1]?.length ?? 0).toBeGreaterThan(10);
    const p = await cli(['profiles']);
    const pl = p.stdout.trimEnd().split('\n');
    expect(pl.map((l) => l.split(/\s+/)[0])).toEqual(profileNames());
    for (const l of pl) expect(l.split(/\s{2,}/)[1]?.length ?? 0).toBeGreaterThan(10);
  });

  it('prints usage for every subcommand', async () => {
    for (const name of ['run', 'sweep', 'replay', 'scenarios', 'profiles']) {
      const r = await cli([name, '--help']);
      expect(r.code).toBe(0);
      expect(r.stdout).toMatch(new RegExp(`^usage: kvroute-sim ${name}`));
      const h = await cli(['help', name]);
      expect(h.stdout).toBe(r.stdout);
    }
    const top = await cli(['--help']);
    expect(top.code).toBe(0);
    expect(top.stdout).toContain('commands:');
    const none = await cli([]);
    expect(none.code).toBe(2);
    expect(none.stderr).toContain('usage: kvroute-sim <command>');
    // The run help lists every policy flag the issue names.
    const run = await cli(['run', '--help']);
    for (const flag of [
      '--scenario',
      '--policies',
      '--ranks',
      '--profile',
      '--profile-file',
      '--seed',
      '--window',
      '--prefix-length',
      '--affinity',
      '--set',
      '--json',
      '--csv',
      '--html',
    ]) {
      expect(run.stdout).toContain(flag);
    }
    expect(methodNames().length).toBeGreaterThan(0);
  });

  it("lists each command with its own summary, and keeps the examples' line breaks", async () => {
    const top = (await cli(['--help'])).stdout;
    for (const entry of commands) {
      if (entry.name === 'validate') continue; // another package's program
      const own = (await entry.load()).summary;
      expect(entry.summary, entry.name).toBe(own);
      expect(top).toContain(own);
    }
    // A `\` ending a line of a template literal joins the lines unless it is escaped.
    const fit = (await cli(['fit', '--help'])).stdout;
    expect(fit).toContain('--record probe.jsonl \\\n    --set clients=20');
    expect(fit).toContain('--set suffixMaxTokens=8192 \\\n    --set ranks=26');
    for (const name of ['run', 'sweep', 'replay', 'fit', 'merge']) {
      const usage = (await cli([name, '--help'])).stdout;
      // A continued example line runs into its next flag only when the break was lost.
      expect(usage, name).not.toMatch(/\S {5}--\w/);
    }
  });

  it('draws a progress bar only on a terminal, and only for runs over a second', async () => {
    // A quick run on a "terminal" stays clean: the bar waits a second before drawing.
    const r = await cli(['run', ...SMALL, '--policies', 'round_robin'], { tty: true });
    expect(r.stderr).toBe('');
    // A slow run (a clock that jumps 400 ms per reading) draws the bar on stderr, then erases it.
    let t = 0;
    const slow = await cli(['run', ...SMALL, '--policies', 'round_robin,prefix_match'], {
      tty: true,
      now: () => (t += 400),
    });
    expect(slow.code).toBe(0);
    expect(slow.stderr).toMatch(/\[#*\.*\]\s+\d+% (round_robin|prefix_match) \([12]\/2\)/);
    expect(slow.stderr.endsWith('\r\x1b[K')).toBe(true);
    expect(slow.stdout).not.toContain('%]');
    // Not a terminal: no bar however slow.
    const piped = await cli(['run', ...SMALL, '--policies', 'round_robin'], {
      tty: false,
      now: () => (t += 400),
    });
    expect(piped.stderr).toBe('');
  });
});

describe('as a process', () => {
  const tsx = join(pkgDir, '../../node_modules/.bin/tsx');
  const run = (args: string[]) =>
    spawnSync(tsx, ['--conditions=@kvroute/source', 'src/cli.ts', ...args], {
      cwd: pkgDir,
      encoding: 'utf8',
      timeout: 60_000,
    });

  it('keeps stdout pure JSON with --json -, exits 0, and matches an in-process run byte for byte', async () => {
    const args = ['run', ...SMALL, '--policies', 'round_robin,prefix_match', '--json', '-'];
    const r = run(args);
    expect(r.status).toBe(0);
    expect(() => JSON.parse(r.stdout)).not.toThrow();
    expect(r.stdout.trimStart().startsWith('{')).toBe(true);
    // A fresh process and this one (which has run other simulations already) agree exactly.
    expect((await cli(args)).stdout).toBe(r.stdout);
  });

  it('exits 2 on bad input through the bin launcher', () => {
    const r = spawnSync(process.execPath, ['bin/kvroute-sim.mjs', 'run', '--scenario', 'nope'], {
      cwd: pkgDir,
      encoding: 'utf8',
      timeout: 60_000,
    });
    expect(r.status).toBe(2);
    expect(r.stderr).toContain("unknown scenario 'nope'");
    expect(r.stdout).toBe('');
  });
});
