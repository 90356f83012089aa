// the JSON output's keys are a documented contract. This reads the package
// README's "JSON output" section and checks it against what the CLI actually writes, both
// ways: every key the CLI writes is documented, and every documented key is written.
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { SHARD_FORMAT } from '../src/cli/simulate.ts';
import { summarize } from '../src/metrics/summary.ts';
import { runSimCli } from './helpers/cli.ts';
import { REQUIRED_POLICY_KEYS } from './report-fixtures.ts';

const readme = readFileSync(new URL('../README.md', import.meta.url), 'utf8');
const section = readme.slice(
  readme.indexOf('## JSON output'),
  readme.indexOf('\n## ', readme.indexOf('## JSON output') + 1),
);

/** Keys at the first level of the first ```jsonc block after `marker`. */
function jsoncTopKeys(marker: string): string[] {
  const from = section.indexOf(marker);
  const block = section.slice(
    section.indexOf('```jsonc', from),
    section.indexOf('```\n', from + 10),
  );
  const keys = new Set<string>();
  // A line may hold several keys ("format": ..., "command": ...) and nested objects.
  for (const line of block.split('\n')) {
    if (!line.startsWith('  "')) continue;
    for (const m of line.matchAll(/"(\w+)":/g)) {
      // Only keys of the top object: skip anything inside a nested { ... } on that line.
      const before = line.slice(0, m.index);
      const depth = (before.match(/[{[]/g) ?? []).length - (before.match(/[}\]]/g) ?? []).length;
      if (depth === 0) keys.add(m[1]!);
    }
  }
  return [...keys].sort();
}

/** Backticked names in the first column of the `policies[]` entry table. */
function policyEntryKeys(): string[] {
  const from = section.indexOf('Each `policies[]` entry:');
  const table = section.slice(from, section.indexOf('`sweep --json` writes', from));
  const keys: string[] = [];
  for (const line of table.split('\n')) {
    const first = line.split('|')[1];
    if (!first) continue;
    for (const m of first.matchAll(/`(\w+)`/g)) keys.push(m[1]!);
  }
  return keys.sort();
}

async function cliJson(args: string[], cwd: string): Promise<Record<string, unknown>> {
  const { code, stdout } = await runSimCli([...args, '--json', '-'], cwd);
  expect(code).toBe(0);
  return JSON.parse(stdout) as Record<string, unknown>;
}

const SMALL = ['--scenario', 'seed-sequential', '--ranks', '4', '--set', 'requests=6'];

describe('JSON output matches the README', () => {
  const dir = mkdtempSync(join(tmpdir(), 'kvroute-json-doc-'));

  it('run and replay: the top-level keys and every policies[] key are documented, and vice versa', async () => {
    const documentedTop = jsoncTopKeys('`run` and `replay` (`--json`)');
    const documentedPolicy = policyEntryKeys();
    // The required keys are among them.
    expect(documentedTop).toEqual(
      expect.arrayContaining(['scenario', 'ranks', 'profile', 'seed', 'policies']),
    );
    expect(documentedPolicy).toEqual(expect.arrayContaining([...REQUIRED_POLICY_KEYS]));

    const run = await cliJson(['run', ...SMALL, '--policies', 'round_robin,prefix_match'], dir);
    const line = (t: number, ids: number[]) =>
      JSON.stringify({
        timestamp: t,
        input_length: ids.length * 512,
        output_length: 4,
        hash_ids: ids,
      });
    writeFileSync(
      join(dir, 't.jsonl'),
      [line(0, [1, 2]), 'not json', line(500, [1, 3])].join('\n'),
    );
    const replay = await cliJson(
      ['replay', 't.jsonl', '--ranks', '2', '--policies', 'prefix_match', '--skip-invalid'],
      dir,
    );
    // skippedLines is documented as replay-only, 0 when nothing was skipped.
    expect(replay.skippedLines).toBe(1);
    writeFileSync(join(dir, 'ok.jsonl'), [line(0, [1, 2]), line(500, [1, 3])].join('\n'));
    const clean = await cliJson(['replay', 'ok.jsonl', '--ranks', '2'], dir);
    expect(clean.skippedLines).toBe(0);
    // router is written only when a router-model flag was given.
    const withoutRouter = documentedTop.filter((k) => k !== 'router');
    expect(Object.keys(run).sort()).toEqual(withoutRouter.filter((k) => k !== 'skippedLines'));
    expect(Object.keys(replay).sort()).toEqual(withoutRouter);
    const replicated = await cliJson(
      ['run', ...SMALL, '--policies', 'round_robin', '--replicas', '2', '--load-poll-ms', '50'],
      dir,
    );
    expect(Object.keys(replicated).sort()).toEqual(
      documentedTop.filter((k) => k !== 'skippedLines'),
    );
    for (const report of [run, replay]) {
      for (const p of report.policies as Record<string, unknown>[]) {
        expect(Object.keys(p).sort()).toEqual(documentedPolicy);
        const ttft = p.ttftMs as Record<string, unknown>;
        expect(Object.keys(ttft).sort()).toEqual(['mean', 'p50', 'p90', 'p99']);
        expect(p.hitRate as number).toBeGreaterThanOrEqual(0);
        expect(p.hitRate as number).toBeLessThanOrEqual(1);
      }
    }
  });

  it('sweep: the documented top-level keys are exactly the ones written', async () => {
    const sweep = await cliJson(
      [
        'sweep',
        ...SMALL,
        '--window',
        '256',
        '--prefix-length',
        '1024,4096',
        // Optional keys: the constraint and the current setting.
        '--hit-rate-within',
        '1',
        '--current',
        'prefix_match:window=128',
      ],
      dir,
    );
    expect(Object.keys(sweep).sort()).toEqual(jsoncTopKeys('`sweep --json` writes'));
    const cell = (sweep.grid as Record<string, unknown>[])[0]!;
    expect(Object.keys(cell).sort()).toEqual([
      'method',
      'options',
      'prefixLength',
      'result',
      'window',
    ]);
    expect(Object.keys(cell.result as object).sort()).toEqual(policyEntryKeys());
  });

  it('states which statistics over no requests are null, as summarize writes them', () => {
    const none = summarize({
      policy: 'round_robin',
      options: {},
      records: [],
      failed: 3,
      ranks: 2,
      perRank: [],
      reasons: {},
      evictedNodes: 0,
      events: 0,
      mode: 'open',
    }) as unknown as Record<string, unknown>;
    const nulls = Object.keys(none).filter((k) => none[k] === null);
    expect(nulls.sort()).toEqual(['coldTtftMs', 'steadyTtftMs', 'warmupTtftMs']);
    const rule = section.slice(0, section.indexOf('```jsonc')).replace(/\s+/g, ' ');
    const nullSentence = rule.match(/[^.;]*is `null`/)?.[0] ?? '';
    for (const k of nulls) expect(nullSentence).toContain(`\`${k}\``);
    // The whole-run statistics are numbers, 0 over no completed request: documented so.
    expect(none.ttftMs).toEqual({ p50: 0, p90: 0, p99: 0, mean: 0 });
    expect(none.queueingMs).toEqual({ p50: 0, p90: 0, p99: 0, mean: 0 });
    expect(none.hitRate).toBe(0);
    expect(rule).toContain(
      '`ttftMs`, `queueingMs` and `hitRate` are always numbers: 0 when no request completed',
    );
  });
});

describe('the README names the formats the code writes', () => {
  it('sweep shard files', () => {
    const named = new Set(readme.match(/kvroute-sim-sweep-shard\/v\d+/g) ?? []);
    expect([...named]).toEqual([SHARD_FORMAT]);
  });
});
