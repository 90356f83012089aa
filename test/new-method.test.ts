// A method added the documented way (its file, its test, one registry line) shows up in every
// host without further edits: the sim CLI's flags and help, sweep axes, the router's flags, env
// variables, YAML keys and help, and the comparison report. The registry line is simulated by adding
// the factory to the registry object before any host module is loaded (hosts derive their
// vocabularies when they load or run, from the registry as it is then).
import { mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import {
  defineMethod,
  type Method,
  type MethodContext,
  type MethodFactory,
  methodRegistry,
} from '@kvroute/policy';
import { beforeAll, describe, expect, it } from 'vitest';

// The "new file": lowest rank not above `ceiling`, then least loaded. One option, to prove the
// option reaches every host's vocabulary.
const createCeiling = defineMethod(
  'ceiling_test',
  {
    ceilingRank: {
      type: 'int',
      default: 0,
      min: 0,
      doc: 'highest rank this test method may choose',
    },
  },
  (options): Method => ({
    name: 'ceiling_test',
    select(ctx: MethodContext) {
      const allowed = ctx.healthy.filter((r) => r.rank <= options.ceilingRank);
      const pool = allowed.length > 0 ? allowed : ctx.healthy;
      return { rank: ctx.tieBreak(pool).rank, reason: 'ceiling' };
    },
  }),
);

beforeAll(() => {
  // The one registry line.
  (methodRegistry as Record<string, MethodFactory>).ceiling_test = createCeiling;
});

async function sim(args: string[]) {
  // Loaded on first use, after the registry line, as every host module here.
  const { runSimCli } = await import('../packages/sim/test/helpers/cli.ts');
  return runSimCli(args);
}

const SMALL = ['--scenario', 'seed-sequential', '--ranks', '4', '--set', 'requests=6'];

describe('a method added by one registry line', () => {
  it('runs in the sim CLI with its option as a flag, and is in the help', async () => {
    const help = await sim(['run', '--help']);
    expect(help.stdout).toContain('--ceiling-rank N');
    expect(help.stdout).toContain('highest rank this test method may choose');
    const r = await sim([
      'run',
      ...SMALL,
      '--policies',
      'ceiling_test',
      '--ceiling-rank',
      '2',
      '--json',
      '-',
    ]);
    expect(r.stderr).toBe('');
    expect(r.code).toBe(0);
    const report = JSON.parse(r.stdout);
    expect(report.policies[0].policy).toBe('ceiling_test');
    expect(report.policies[0].options).toEqual({ ceilingRank: 2 });
    const bad = await sim(['run', ...SMALL, '--policies', 'ceiling_test', '--ceiling-rank', '0x2']);
    expect(bad.code).toBe(2);
    expect(bad.stderr).toContain("--ceiling-rank must be a number, got '0x2'");
  });

  it('gets router flags, env variables, YAML keys and help lines', async () => {
    const { dispatcherConfig, helpText, resolveConfig } = await import('@kvroute/router');
    const W = ['--worker-urls', 'http://127.0.0.1:1', '--load-balance-method', 'ceiling_test'];
    expect(dispatcherConfig(resolveConfig([...W, '--ceiling-rank', '3']))).toMatchObject({
      method: 'ceiling_test',
      ceilingRank: 3,
    });
    expect(resolveConfig(W, { KVROUTE_CEILING_RANK: '1' }).methodOptions).toEqual({
      ceilingRank: 1,
    });
    const yaml = resolveConfig(['--config', 'r.yaml'], {}, () =>
      ['worker-urls: [http://127.0.0.1:1]', 'ceilingRank: 4'].join('\n'),
    );
    expect(yaml.methodOptions).toEqual({ ceilingRank: 4 });
    expect(helpText()).toContain('--ceiling-rank');
    expect(helpText()).toContain('KVROUTE_CEILING_RANK');
  });

  it('is sweepable with its options as axes, and its winner loads in the router', async () => {
    const help = await sim(['sweep', '--help']);
    expect(help.stdout).toContain('--ceiling-rank LIST');
    expect(help.stdout).toContain('ceiling_test: highest rank this test method may choose');
    // --jobs 1: the registry line above is made at run time, so worker threads lack it.
    const r = await sim([
      'sweep',
      ...SMALL,
      '--policy',
      'ceiling_test,round_robin',
      '--ceiling-rank',
      '0..2',
      '--jobs',
      '1',
      '--json',
      '-',
    ]);
    expect(r.stderr).toBe('');
    expect(r.code).toBe(0);
    const report = JSON.parse(r.stdout);
    expect(report.axes).toEqual([
      {
        option: 'ceilingRank',
        flag: 'ceiling-rank',
        methods: ['ceiling_test'],
        values: [0, 1, 2],
        source: 'given',
      },
    ]);
    expect(
      report.grid.map((c: { method: string; options: object }) => [c.method, c.options]),
    ).toEqual([
      ['ceiling_test', { ceilingRank: 0 }],
      ['ceiling_test', { ceilingRank: 1 }],
      ['ceiling_test', { ceilingRank: 2 }],
      ['round_robin', {}],
    ]);
    // ceilingRank=0 sends everything to rank 0: the verdict can tell the cells apart.
    expect(
      report.grid[0].result.perRank.filter((x: { requests: number }) => x.requests > 0),
    ).toHaveLength(1);
    const bad = await sim(['sweep', ...SMALL, '--policy', 'ceiling_test', '--ceiling-rank=-1,2']);
    expect(bad.code).toBe(2);
    expect(bad.stderr).toContain('ceiling_test: ceilingRank must be an integer >= 0');

    const { dispatcherConfig, resolveConfig } = await import('@kvroute/router');
    const { routerConfigYaml } = await import('@kvroute/sim/cli');
    const yaml = routerConfigYaml(
      { method: 'ceiling_test', options: { ceilingRank: 2 } },
      undefined,
    );
    const cfg = resolveConfig(
      ['--config', 'r.yaml', '--worker-urls', 'http://127.0.0.1:1'],
      {},
      () => yaml,
    );
    expect(dispatcherConfig(cfg)).toEqual({ method: 'ceiling_test', ceilingRank: 2 });
  }, 600_000);

  it('appears in the comparison report', async () => {
    const out = mkdtempSync(join(tmpdir(), 'kvroute-new-method-'));
    const r = await sim([
      'compare',
      '--quick',
      '--methods',
      'round_robin,ceiling_test',
      '--ceiling-rank',
      '1',
      // --jobs 1: the registry line above is made at run time, so worker threads lack it.
      '--jobs',
      '1',
      '--out-dir',
      out,
    ]);
    expect(r.code).toBe(0);
    const md = readFileSync(join(out, 'policy-comparison.md'), 'utf8');
    expect(md).toContain('`ceiling_test`');
    expect(md).toContain('`ceilingRank=1`');
  }, 600_000);
});
