import { resolve } from 'node:path';
import {
  describeRange,
  methodNames,
  methodOptionCatalog,
  methodOptionSchema,
  parseAssignments,
  parseNumber,
  readOption,
} from '@kvroute/policy';
import { basePace } from '../../compare/load-curve.ts';
import { defaultWorkers } from '../../parallel/pool.ts';
import { confidenceOf, replayObserved } from '../../replay-observed.ts';
import { OBJECTIVES } from '../../report/sweep-choice.ts';
import type { SweepObjective } from '../../report/types.ts';
import type { RankOverrides } from '../../simulate.ts';
import { MAX_AXIS_VALUES, type SweepSetting } from '../../sweep/axes.ts';
import {
  bool,
  checkName,
  nameList,
  nonNegativeNumber,
  type Parsed,
  parseCommandArgs,
  positiveInt,
  str,
  strs,
} from '../args.ts';
import type { Subcommand } from '../command.ts';
import {
  ROUTER_FLAGS_HELP,
  ROUTER_OPTIONS,
  readRouterFlags,
  readSimFlags,
  requireScenario,
  SIM_OPTIONS,
  simFlagsHelp,
} from '../common.ts';
import { emitSweepReport, writeRouterConfig } from '../emit-report.ts';
import { UsageError } from '../errors.ts';
import {
  PD_OPTIONS,
  PD_SWEEP_HELP,
  readLayout,
  refusePdSweepFlags,
  runPdLayout,
} from '../pd-layout.ts';
import { affinityConfig } from '../policies.ts';
import { writeShard } from '../shards.ts';
import { buildWorkload, REPLAY_SCENARIO } from '../sim-api.ts';
import {
  engineOptions,
  runSweep,
  runSweepCells,
  SHARD_FORMAT,
  type SweepLoad,
  shardIndices,
  sweepJobs,
  sweepSpec,
} from '../simulate.ts';

export { OBJECTIVES };

const DEFAULT_POLICY = 'prefix_match';

/**
 * Method options whose flag another sweep flag takes: `--load` is the offered-load axis here,
 * so consistent_hash's `load` option is swept as `--option load=tokens,requests`.
 */
const SHADOWED = new Set(['load']);

/** Axis flags: one per option of any registered method, from the schemas. */
function axisFlags() {
  return methodOptionCatalog().filter((e) => !SHADOWED.has(e.flag));
}

function axesHelp(): string {
  const lines: string[] = [];
  for (const e of methodOptionCatalog()) {
    const head = SHADOWED.has(e.flag) ? `  --option ${e.name}=LIST` : `  --${e.flag} LIST`;
    Object.entries(e.specs).forEach(([method, spec], i) => {
      const sweep = spec.sweep ? `; swept by default: ${spec.sweep.join(',')}` : '';
      const text = `${method}: ${spec.doc} (default ${spec.default}, ${describeRange(spec)}${sweep})`;
      const lead = i === 0 ? head : '';
      lines.push(
        lead.length < 24 ? `${lead.padEnd(24)}${text}` : `${lead}\n${' '.repeat(24)}${text}`,
      );
    });
  }
  return lines.join('\n');
}

const usage =
  () => `usage: kvroute-sim sweep --scenario NAME [--policy a,b,c] [--<option> LIST]... [flags]
       kvroute-sim sweep --trace RECORDED.jsonl --profile-file FITTED.json [--policy ...] [flags]

Runs every setting of the swept methods' options on the same workload, prints the grid, and
names the best setting for the objective, why, what it trades away, and how the recommended
default (cache_aware with its default options) and the --current setting compare; writes the
winner as a kvroute-router YAML config (printed, and to --out-config FILE).

Axes: any option of any method, from the methods' own options schemas (below). LIST is
comma-separated values (64,128,256; tokens,requests) or a range: LO..HI (integers, step 1),
LO..HI:STEP (arithmetic, e.g. 0..1:0.25) or LO..HI:xF (geometric, e.g. 64..1024:x2); at most
${MAX_AXIS_VALUES} values. Each value is checked against the type and range of every listed method
that reads the option. An axis applies to the methods in --policy that read it; an
option none of them reads is an error. A method gets the product of the axes that apply to
it; a method no axis applies to gets its schema's default sweep values (or runs once at its
defaults). Settings a method refuses as a whole (e.g. prefix_match with prefix length below
the window) are left out and listed.

  --scenario NAME       name: workload (see 'kvroute-sim scenarios'); required unless --trace
  --trace FILE          path: sweep on a trace (Mooncake-format, or one kvroute-router recorded),
                        the same as --scenario replay --set file=FILE; a recorded trace's
                        sessions replay closed loop, and the verdict states how far the
                        prediction was from what the router observed on the recorded setting
                        (default: none; --scenario names the workload)
                        (repeatable: the files of one recording in order, e.g. rotated
                        PATH.000001 PATH, read as one, as 'cat' joins them)
  --group NAME          model name: on a recording of a router with worker groups, sweep
                        this group's requests on its own ranks, under its own recorded
                        setting (required with two or more groups; --out-config then
                        holds this group's setting, to put in its models: entry)
  --open-loop           switch: send every request of the trace at its recorded time, also a
                        session's next turn, which otherwise waits for the predicted end of
                        the previous one plus its recorded think gap (default off)
  --policy LIST         comma-separated methods to sweep, each with its own option grid
                        (default ${DEFAULT_POLICY}); see 'kvroute-sim run --help' for
                        the methods: ${methodNames().join(', ')}
${axesHelp()}
  --option NAME=LIST    an axis by option name (camelCase), repeatable; the only spelling
                        for options whose flag another sweep flag takes (default: none)
  --objective OBJ       ${OBJECTIVES.join(' | ')} (default ttft-p99): what the best setting
                        minimises (hit-rate, throughput: maximises; throughput is tokens/s).
                        Near-ties (1% relative, 0.1 points of hit rate) are broken by the
                        other metrics, then by grid order
  --hit-rate-within P   number >= 0: only settings whose hit rate is within P points of the
                        sweep's best hit rate compete (e.g. --objective ttft-p99
                        --hit-rate-within 1: best TTFT p99 that gives up at most 1 point of
                        hits) (default: no constraint)
  --current SETTING     the setting deployed now, METHOD[:key=value...] (e.g.
                        cache_aware:window=128): run as one more cell and compared with in
                        the verdict (default: none)
  --out-config FILE     path: write the winner as a kvroute-router YAML config
                        (load-balance-method and option keys) (default: printed only)
  --load KIND:LIST      run the whole grid at several loads and name the best setting at each:
                        rate:0.5,1,2,4 multiplies --request-rate (default: the scenario's own
                        pace) as open-loop Poisson arrivals; concurrency:1,2,4 multiplies
                        --max-concurrency (required). Table and --json only; the router config
                        is the winner at the first load listed (default: one load)
  --jobs N              integer: cells run at once, on this thread and N - 1 worker threads
                        (default: one per core, ${defaultWorkers()} here); results are the same
                        bytes for any N
  --shard K/N           run only shard K of N (every N-th cell from the K-th) and write the
                        shard's results as JSON to --json FILE (default stdout); combine the N
                        files with 'kvroute-sim merge' into the report one run would give
${ROUTER_FLAGS_HELP}
${PD_SWEEP_HELP}
${simFlagsHelp(false)}

examples:
  kvroute-sim sweep --scenario agentic --policy cache_aware --window 64..512:x2 \\
    --max-prefix-tokens 4096,16384 --epsilon 0.1,0.25,0.5 --out-config router.yaml
  kvroute-sim sweep --scenario agentic --policy prefix_match,consistent_hash,cache_aware \\
    --window 128,256 --objective ttft-p99 --hit-rate-within 1 --load rate:1,2
  kvroute-sim sweep --scenario agentic --layout pd --gpus 8 --prefill-ranks 1..7 --html pd-sweep.html
`;

/** `METHOD[:key=value...]`, checked against the method's schema. */
export function parseSetting(flag: string, raw: string): SweepSetting {
  const [name = '', ...assignments] = raw.split(':');
  const method = checkName('policy', name.trim(), methodNames());
  if (assignments.some((a) => a.trim() === '')) {
    throw new UsageError(`--${flag}: empty option in '${raw}' (use method:key=value:key=value)`);
  }
  const schema = methodOptionSchema(method);
  const options: Record<string, number | string> = {};
  for (const [key, value] of Object.entries(parseAssignments(`--${flag}`, assignments))) {
    const spec = schema[key];
    if (spec === undefined) {
      throw new UsageError(
        `--${flag}: ${method} has no option '${key}'; its options: ${Object.keys(schema).join(', ') || 'none'}`,
      );
    }
    options[key] = readOption(
      method,
      key,
      spec,
      typeof value === 'boolean' ? String(value) : value,
    );
  }
  return { method, options };
}

/** Axes given as `--<option> LIST` and `--option NAME=LIST`, by option name. */
function readAxes(p: ReturnType<typeof parseCommandArgs>): Map<string, string> {
  const axes = new Map<string, string>();
  for (const e of axisFlags()) {
    const raw = str(p, e.flag);
    if (raw !== undefined) axes.set(e.name, raw);
  }
  for (const item of strs(p, 'option')) {
    const eq = item.indexOf('=');
    if (eq <= 0) throw new UsageError(`--option expects NAME=LIST, got '${item}'`);
    const name = item.slice(0, eq).trim();
    if (axes.has(name)) throw new UsageError(`--option ${name}: that axis is given twice`);
    axes.set(name, item.slice(eq + 1));
  }
  return axes;
}

function readLoad(
  raw: string,
  base: () => number | undefined,
): SweepLoad & { axis: 'rate' | 'concurrency' } {
  const m = /^(rate|concurrency):(.+)$/.exec(raw);
  if (m === null) {
    throw new UsageError(`--load must be rate:LIST or concurrency:LIST, got '${raw}'`);
  }
  const axis = m[1] as 'rate' | 'concurrency';
  const multipliers = m[2]!.split(',').map((x) => {
    const v = parseNumber(x) ?? Number.NaN;
    if (!(v > 0)) {
      throw new UsageError(`--load multipliers must be positive numbers, got '${x}'`);
    }
    return v;
  });
  const b = base();
  if (b === undefined) {
    throw new UsageError('--load concurrency:LIST multiplies --max-concurrency: give it');
  }
  return { axis, base: b, multipliers };
}

export const command: Subcommand = {
  name: 'sweep',
  summary:
    "tune any method's options (and the methods, and the load): name the best setting, why, and its router config",
  get usage() {
    return usage();
  },
  async run(argv, io) {
    const parsed = parseCommandArgs('sweep', argv, {
      scenario: { type: 'string' },
      trace: { type: 'string', multiple: true },
      group: { type: 'string' },
      'open-loop': { type: 'boolean' },
      policy: { type: 'string' },
      option: { type: 'string', multiple: true },
      objective: { type: 'string' },
      'hit-rate-within': { type: 'string' },
      current: { type: 'string' },
      'out-config': { type: 'string' },
      jobs: { type: 'string' },
      shard: { type: 'string' },
      ...SIM_OPTIONS,
      ...ROUTER_OPTIONS,
      load: { type: 'string' },
      ...PD_OPTIONS,
    });
    const p = traceScenario(parsed);
    const scenario = requireScenario(p);
    if (readLayout(p) === 'pd') {
      // The prefill:decode split is the axis: colocated vs PD layouts at one GPU count. An
      // option axis would otherwise reach the shared flag parsing as one option's value, to be
      // applied to a side's method or misread as a malformed number.
      const axis = axisFlags().find((e) => str(p, e.flag) !== undefined);
      const named = strs(p, 'option')[0];
      if (axis !== undefined || named !== undefined) {
        const given = axis !== undefined ? `--${axis.flag}` : `--option ${named}`;
        throw new UsageError(
          `${given}: method option axes are not available with --layout pd (the split is the axis); give a side's options with its method, e.g. --prefill-policy cache_aware:window=64`,
        );
      }
      refusePdSweepFlags(p);
      return runPdLayout(io, p, {
        command: 'sweep',
        scenario,
        flags: readSimFlags(p, scenario, io),
      });
    }
    const policies = nameList('policy', str(p, 'policy') ?? DEFAULT_POLICY).map((m) =>
      checkName('policy', m, methodNames()),
    );
    const dup = policies.find((m, i) => policies.indexOf(m) !== i);
    if (dup !== undefined) throw new UsageError(`--policy lists '${dup}' twice`);
    const objective = checkName(
      'objective',
      str(p, 'objective') ?? 'ttft-p99',
      OBJECTIVES,
    ) as SweepObjective;
    const withinRaw = str(p, 'hit-rate-within');
    let hitRateWithin: number | undefined;
    if (withinRaw !== undefined) {
      hitRateWithin = nonNegativeNumber('hit-rate-within', withinRaw);
    }
    const currentRaw = str(p, 'current');
    const current = currentRaw !== undefined ? parseSetting('current', currentRaw) : undefined;
    const axes = readAxes(p);
    // Axis flags carry lists, and --load is the offered-load axis here: keep them all away from
    // the shared parsing, which reads single method option values.
    const cleared: Record<string, undefined> = { load: undefined };
    for (const e of methodOptionCatalog()) cleared[e.flag] = undefined;
    const flags = readSimFlags({ ...p, values: { ...p.values, ...cleared } }, scenario, io);
    const traces = strs(parsed, 'trace');
    if (traces.length > 1) {
      // One recording in several files (rotated: PATH.000001 ... PATH), read in this order.
      flags.scenarioOptions.file = traces.map((t) => resolve(io.cwd, t));
      flags.displayOptions = { file: traces.join(' ') };
    }
    const group = str(parsed, 'group');
    if (group !== undefined) flags.scenarioOptions.group = group;
    const jobsRaw = str(p, 'jobs');
    const workers = jobsRaw !== undefined ? positiveInt('jobs', jobsRaw) : undefined;
    const loadRaw = str(p, 'load');
    const load =
      loadRaw === undefined
        ? undefined
        : readLoad(loadRaw, () =>
            loadRaw.startsWith('rate:')
              ? (flags.engine.requestRate ??
                basePace(
                  buildWorkload(scenario, flags.scenarioOptions, flags.seed),
                  flags.profile,
                  flags.seed,
                ))
              : flags.engine.maxConcurrency,
          );
    if (
      load !== undefined &&
      (flags.outputs.csv !== undefined || flags.outputs.html !== undefined)
    ) {
      throw new UsageError('--load writes the table and --json only (no --csv or --html)');
    }
    const aff = affinityConfig(flags.policyFlags);
    const input = {
      scenario,
      scenarioOptions: flags.scenarioOptions,
      ...(flags.displayOptions ? { displayOptions: flags.displayOptions } : {}),
      seed: flags.seed,
      ...(flags.ranks !== undefined ? { ranks: flags.ranks } : {}),
      profile: flags.profile,
      profileRef: flags.profileRef,
      policies,
      axes,
      ...(aff !== undefined ? { affinity: aff } : {}),
      objective,
      ...(hitRateWithin !== undefined ? { hitRateWithin } : {}),
      ...(current !== undefined ? { current } : {}),
      ...(workers !== undefined ? { workers } : {}),
      engine: flags.engine,
      router: readRouterFlags(p),
      ...(load !== undefined ? { load } : {}),
    };
    const shardRaw = str(p, 'shard');
    const outConfig = str(p, 'out-config');
    if (shardRaw !== undefined) {
      const { index, count } = parseShard(shardRaw);
      if (flags.outputs.csv !== undefined || flags.outputs.html !== undefined) {
        throw new UsageError(
          '--shard writes shard results (--json); render them after kvroute-sim merge',
        );
      }
      if (outConfig !== undefined) {
        throw new UsageError('--shard has no winner yet: give --out-config to kvroute-sim merge');
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
    const report = await runSweep(io, input);
    if (scenario === REPLAY_SCENARIO && 'reason' in report) {
      // A recorded trace holds what the router observed: replaying it under the setting it was
      // recorded with says how far this sweep's predictions can be trusted.
      const plan = buildWorkload(scenario, flags.scenarioOptions, flags.seed);
      for (const w of plan.warnings ?? []) io.stderr.write(`warning: ${w}\n`);
      if (plan.recorded !== undefined && plan.recorded.start.method !== undefined) {
        const engine: { engine?: RankOverrides } = engineOptions(flags.profile, flags.engine);
        const c = confidenceOf(
          replayObserved(plan, {
            profile: flags.profile,
            seed: flags.seed,
            ...(flags.ranks !== undefined ? { ranks: flags.ranks } : {}),
            ...(engine.engine ? { rank: engine.engine } : {}),
          }),
        );
        report.confidence = c;
        report.reason = `${report.reason} ${c.text}`;
      }
    }
    await emitSweepReport(io, flags.outputs, report);
    if (outConfig !== undefined) writeRouterConfig(io, outConfig, report);
    return 0;
  },
};

/**
 * `--trace FILE` is `--scenario replay --set file=FILE`, and `--open-loop` is
 * `--set openLoop=true` (replay only): the arguments as if spelled that way.
 */
function traceScenario(p: Parsed): Parsed {
  const trace = strs(p, 'trace')[0];
  const openLoop = bool(p, 'open-loop');
  const group = str(p, 'group');
  if (group !== undefined && trace === undefined) {
    throw new UsageError('--group picks a worker group of a recorded trace: give --trace FILE');
  }
  if (trace === undefined && !openLoop) return p;
  const scenario = str(p, 'scenario');
  const set = strs(p, 'set');
  if (trace !== undefined) {
    if (scenario !== undefined && scenario !== REPLAY_SCENARIO) {
      throw new UsageError(
        `--trace sweeps on a trace (scenario ${REPLAY_SCENARIO}); it cannot be combined with --scenario ${scenario}`,
      );
    }
    if (set.some((a) => a.trim().startsWith('file='))) {
      throw new UsageError('give the trace once: --trace FILE or --set file=FILE');
    }
    set.push(`file=${trace}`);
  } else if (scenario !== REPLAY_SCENARIO) {
    throw new UsageError('--open-loop applies to a trace: give --trace FILE');
  }
  if (openLoop) set.push('openLoop=true');
  return { ...p, values: { ...p.values, scenario: REPLAY_SCENARIO, set } };
}

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
