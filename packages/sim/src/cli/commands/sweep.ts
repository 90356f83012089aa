import { methodNames, methodRegistry } from '@kvroute/policy';
import { basePace } from '../../compare/load-curve.ts';
import { defaultWorkers } from '../../parallel/pool.ts';
import { renderSweepTable } from '../../report/table.ts';
import type { SweepObjective } from '../../report/types.ts';
import { checkName, parseCommandArgs, positiveInt, positiveIntList, str } from '../args.ts';
import type { Subcommand } from '../command.ts';
import {
  ROUTER_FLAGS_HELP,
  ROUTER_OPTIONS,
  readRouterFlags,
  readSimFlags,
  requireScenario,
  SIM_FLAGS_HELP,
  SIM_OPTIONS,
} from '../common.ts';
import { emitSweepReport } from '../emit-report.ts';
import { UsageError } from '../errors.ts';
import { emit } from '../outputs.ts';
import { affinityConfig } from '../policies.ts';
import { writeShard } from '../shards.ts';
import { buildWorkload } from '../sim-api.ts';
import {
  runSweepCells,
  SHARD_FORMAT,
  shardIndices,
  sweep,
  sweepJobs,
  sweepSpec,
} from '../simulate.ts';

export const OBJECTIVES: readonly SweepObjective[] = ['ttft-p99', 'ttft-mean', 'hit-rate'];
const DEFAULT_WINDOWS = '64,128,256,512';
const DEFAULT_PREFIX_LENGTHS = '1024,2048,4096,8192';

/** Methods that read both knobs the sweep turns. */
export function sweepableMethods(): string[] {
  return methodNames().filter((m) => {
    const reads = methodRegistry[m]?.optionNames;
    return reads?.includes('window') && reads.includes('prefixLength');
  });
}

const usage = `usage: kvroute-sim sweep --scenario NAME [--policy prefix_match] [--window LIST] [--prefix-length LIST] [flags]

Runs the policy once per (window, prefix length) pair on the same workload, prints the grid,
and names the best setting for the objective, with the reason and what it trades away.
Pairs whose prefix length is below the window are skipped (the policy rejects them).

  --scenario NAME       name: workload (see 'kvroute-sim scenarios'); required
  --policy NAME         name: a method that reads window and prefixLength (default prefix_match)
  --window LIST         comma-separated integers: windows in tokens (default ${DEFAULT_WINDOWS})
  --prefix-length LIST  comma-separated integers: prefix lengths in tokens
                        (default ${DEFAULT_PREFIX_LENGTHS})
  --objective OBJ       ${OBJECTIVES.join(' | ')} (default ttft-p99); near-ties (1% on TTFT,
                        0.1 points on hit rate) are broken by the other metrics
  --load KIND:LIST      run the whole grid at several loads and name the best setting at each:
                        rate:0.5,1,2,4 multiplies --request-rate (default: the scenario's own
                        pace) as open-loop Poisson arrivals; concurrency:1,2,4 multiplies
                        --max-concurrency (required). Table and --json only.
  --jobs N              integer: cells run at once on worker threads (default: one per core,
                        ${defaultWorkers()} here); results are the same bytes for any N
  --shard K/N           run only shard K of N (every N-th cell from the K-th) and write the
                        shard's results as JSON to --json FILE (default stdout); combine the N
                        files with 'kvroute-sim merge' into the report one run would give
${ROUTER_FLAGS_HELP}
${SIM_FLAGS_HELP}

example:
  kvroute-sim sweep --scenario agentic --policy prefix_match --window 64,128,256,512 \\
    --prefix-length 1024,2048,4096,8192 --objective ttft-p99 --html sweep.html
`;

export const command: Subcommand = {
  name: 'sweep',
  summary: "grid-search a policy's window and prefix length; name the best setting and why",
  usage,
  async run(argv, io) {
    const p = parseCommandArgs('sweep', argv, {
      scenario: { type: 'string' },
      policy: { type: 'string' },
      objective: { type: 'string' },
      jobs: { type: 'string' },
      shard: { type: 'string' },
      load: { type: 'string' },
      ...SIM_OPTIONS,
      ...ROUTER_OPTIONS,
    });
    const scenario = requireScenario(p);
    const policy = str(p, 'policy') ?? 'prefix_match';
    checkName('policy', policy, methodNames());
    const sweepable = sweepableMethods();
    if (!sweepable.includes(policy)) {
      throw new UsageError(
        `policy '${policy}' has no window/prefixLength options to sweep; sweepable policies: ${sweepable.join(', ')}`,
      );
    }
    const objective = checkName(
      'objective',
      str(p, 'objective') ?? 'ttft-p99',
      OBJECTIVES,
    ) as SweepObjective;
    const windows = positiveIntList('window', str(p, 'window') ?? DEFAULT_WINDOWS);
    const prefixLengths = positiveIntList(
      'prefix-length',
      str(p, 'prefix-length') ?? DEFAULT_PREFIX_LENGTHS,
    );
    if (!prefixLengths.some((l) => windows.some((w) => l >= w))) {
      throw new UsageError(
        'no --prefix-length is at least one --window: every pair would be rejected',
      );
    }
    // The grid owns window and prefix-length, and here --load is the offered-load axis, not
    // the method option of that name; strip them before the shared parsing.
    const shared = {
      ...p,
      values: { ...p.values, window: undefined, 'prefix-length': undefined, load: undefined },
    };
    const flags = readSimFlags(shared, scenario, io);
    const jobsRaw = str(p, 'jobs');
    const workers = jobsRaw !== undefined ? positiveInt('jobs', jobsRaw) : undefined;
    const input = {
      scenario,
      scenarioOptions: flags.scenarioOptions,
      displayOptions: flags.displayOptions,
      seed: flags.seed,
      ranks: flags.ranks,
      profile: flags.profile,
      policy,
      affinity: affinityConfig(flags.policyFlags),
      windows,
      prefixLengths,
      objective,
      profileRef: flags.profileRef,
      ...(workers !== undefined ? { workers } : {}),
      engine: flags.engine,
      router: readRouterFlags(p),
    };
    const loadRaw = str(p, 'load');
    const shardRaw = str(p, 'shard');
    if (shardRaw !== undefined && loadRaw !== undefined) {
      throw new UsageError('--load and --shard cannot be combined');
    }
    if (shardRaw !== undefined) {
      const { index, count } = parseShard(shardRaw);
      if (flags.outputs.csv !== undefined || flags.outputs.html !== undefined) {
        throw new UsageError(
          '--shard writes shard results (--json); render them after kvroute-sim merge',
        );
      }
      const spec = sweepSpec(input);
      const jobs = sweepJobs(spec);
      const mine = shardIndices(jobs.length, index, count);
      const results = await runSweepCells(
        io,
        mine.map((i) => jobs[i]!),
        workers,
      );
      writeShard(io, flags.outputs.json ?? '-', {
        format: SHARD_FORMAT,
        shard: { index, count },
        sweep: spec,
        total: jobs.length,
        cells: mine.map((i, k) => ({ index: i, result: results[k]! })),
      });
      return 0;
    }
    if (loadRaw === undefined) {
      const { report } = await sweep(io, input);
      await emitSweepReport(io, flags.outputs, report);
      return 0;
    }
    const m = /^(rate|concurrency):(.+)$/.exec(loadRaw);
    if (m === null) {
      throw new UsageError(`--load must be rate:LIST or concurrency:LIST, got '${loadRaw}'`);
    }
    const axis = m[1] as 'rate' | 'concurrency';
    const multipliers = m[2]!.split(',').map((x) => {
      const v = Number(x.trim());
      if (!(v > 0) || !Number.isFinite(v) || x.trim() === '') {
        throw new UsageError(`--load multipliers must be positive numbers, got '${x}'`);
      }
      return v;
    });
    if (flags.outputs.csv !== undefined || flags.outputs.html !== undefined) {
      throw new UsageError('--load writes the table and --json only (no --csv or --html)');
    }
    let base: number;
    if (axis === 'rate') {
      base =
        flags.engine.requestRate ??
        basePace(
          buildWorkload(scenario, flags.scenarioOptions, flags.seed),
          flags.profile,
          flags.seed,
        );
    } else {
      if (flags.engine.maxConcurrency === undefined) {
        throw new UsageError('--load concurrency:LIST multiplies --max-concurrency: give it');
      }
      base = flags.engine.maxConcurrency;
    }
    const points: {
      multiplier: number;
      value: number;
      best: { window: number; prefixLength: number };
      report: Awaited<ReturnType<typeof sweep>>['report'];
    }[] = [];
    for (const mult of multipliers) {
      const value = axis === 'rate' ? base * mult : Math.max(1, Math.round(base * mult));
      const engine =
        axis === 'rate'
          ? { ...flags.engine, requestRate: value }
          : { ...flags.engine, maxConcurrency: value };
      const { report } = await sweep(io, { ...input, engine });
      points.push({ multiplier: mult, value, best: report.best, report });
    }
    const changes: string[] = [];
    for (let i = 1; i < points.length; i++) {
      const a = points[i - 1]!.best;
      const b = points[i]!.best;
      if (a.window !== b.window || a.prefixLength !== b.prefixLength) {
        changes.push(
          `the best setting changes between x${points[i - 1]!.multiplier} and x${points[i]!.multiplier}: window=${a.window} prefix-length=${a.prefixLength} below, window=${b.window} prefix-length=${b.prefixLength} above`,
        );
      }
    }
    const unit = axis === 'rate' ? 'requests/s' : 'in flight';
    const doc = {
      format: 'kvroute-sim-sweep-load/v1',
      axis,
      base,
      points,
      changes,
    };
    await emit(io, flags.outputs, {
      table: () =>
        `${points
          .map(
            (pt) =>
              `== load x${pt.multiplier} (${Math.round(pt.value * 1000) / 1000} ${unit}) ==\n${renderSweepTable(pt.report)}`,
          )
          .join(
            '\n',
          )}\n${changes.length === 0 ? `the best setting is the same at every load tried (x${multipliers.join(', x')})` : changes.join('\n')}\n`,
      json: () => `${JSON.stringify(doc, null, 2)}\n`,
      csv: () => '',
      html: async () => '',
    });
    return 0;
  },
};

/** `K/N` with 1 <= K <= N. */
export function parseShard(raw: string): { index: number; count: number } {
  const m = /^(\d+)\/(\d+)$/.exec(raw.trim());
  const index = m ? Number(m[1]) : Number.NaN;
  const count = m ? Number(m[2]) : Number.NaN;
  if (!m || count < 1 || index < 1 || index > count) {
    throw new UsageError(`--shard: expected K/N with 1 <= K <= N (e.g. 2/8), got '${raw}'`);
  }
  return { index, count };
}
