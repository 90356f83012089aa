import { existsSync } from 'node:fs';
import { resolve } from 'node:path';
import type { DispatcherConfig } from '@kvroute/policy';
import { ObservedReplayError, replayObserved } from '../../replay-observed.ts';
import { renderObservedReplay } from '../../report/observed-replay.ts';
import type { RankOverrides } from '../../simulate.ts';
import { TraceFormatError } from '../../workloads/trace-file.ts';
import {
  bool,
  nameList,
  type Parsed,
  parseCommandArgs,
  positiveNumber,
  str,
  strs,
} from '../args.ts';
import type { CliIo, Subcommand } from '../command.ts';
import {
  DEFAULT_POLICIES,
  ROUTER_FLAGS_HELP,
  ROUTER_OPTIONS,
  readPolicies,
  readRouterFlags,
  readSimFlags,
  readSwitches,
  SIM_FLAGS_HELP,
  SIM_OPTIONS,
  type SimFlags,
  SWITCH_FLAGS_HELP,
  SWITCH_OPTIONS,
} from '../common.ts';
import { emitRunReport } from '../emit-report.ts';
import { UsageError } from '../errors.ts';
import { writeOutput } from '../outputs.ts';
import { parsePolicies } from '../policies.ts';
import { buildWorkload, REPLAY_SCENARIO } from '../sim-api.ts';
import { compare, engineOptions } from '../simulate.ts';

const usage = `usage: kvroute-sim replay FILE [--policies a,b,c] [--ranks N] [--speedup X] [--skip-invalid] [flags]
       kvroute-sim replay --trace RECORDED.jsonl --observed [--profile-file FITTED.json] [flags]

Replays a Mooncake-format JSONL trace (one {"timestamp", "input_length", "output_length",
"hash_ids"} object per line; 512-token hash blocks become synthetic token blocks) under each
policy and prints the comparison table. The same as 'run --scenario replay --set file=FILE'.
A trace kvroute-router recorded (--record-trace) is read the same way: its start line gives
the block size and the rank count (--ranks overrides).

With --observed (recorded traces only) the traffic is replayed under the setting it was
recorded with (the start line's method and options, and every policy switch the router made;
--policies NAME predicts one other policy instead) and each request's prediction is compared
with what the router observed: hit rate, TTFT p50/p90/p99, end-to-end latency, throughput,
and how many requests the prediction placed on the rank the router chose.

  FILE                  path: the trace, e.g. packages/sim/data/traces/mooncake-conversation.jsonl
                        (shipped with the package; relative to where you run the command)
  --trace FILE          path: the same as FILE (one of the two is required); several FILEs
                        (or --trace repeated) are the files of one recording in order, e.g.
                        rotated PATH.000001 PATH, read as one, as 'cat' joins them
  --group NAME          model name: on a recording of a router with worker groups (several
                        models), replay this group's requests on its own ranks under its own
                        recorded setting and switches (required with two or more groups:
                        each group has its own ranks and policy)
  --observed            switch: predicted vs observed on a recorded trace (default off)
  --ignore-recorded-switches
                        switch: a recorded trace's policy switches are applied to every
                        policy at their time (and marked in the charts), as the router made
                        them; with this flag each policy runs the whole trace (default off)
  --policies LIST       comma-separated method names (default ${DEFAULT_POLICIES})
  --speedup X           number > 0: arrivals X times faster than recorded (default 1); a
                        recorded session's think gaps shrink with it
  --open-loop           switch: send every request at its recorded time. By default a trace
                        the router recorded replays its sessions (requests with the same key)
                        closed loop: each turn is sent its recorded think gap (its timestamp
                        minus the previous turn's timestamp and observed e2e time) after the
                        previous turn's predicted end, as the agent waited for the answer
                        (default off)
  --skip-invalid        switch: skip malformed lines and report how many, instead of failing
                        (default off)
${ROUTER_FLAGS_HELP}
${SWITCH_FLAGS_HELP}
${SIM_FLAGS_HELP}

example:
  kvroute-sim replay packages/sim/data/traces/mooncake-conversation.jsonl --ranks 16 --speedup 8 \\
    --policies round_robin,prefix_match,cache_aware
`;

export const command: Subcommand = {
  name: 'replay',
  summary: 'replay a Mooncake-format JSONL trace under several policies',
  usage,
  async run(argv, io) {
    const p = parseCommandArgs(
      'replay',
      argv,
      {
        policies: { type: 'string' },
        speedup: { type: 'string' },
        'skip-invalid': { type: 'boolean' },
        trace: { type: 'string', multiple: true },
        group: { type: 'string' },
        observed: { type: 'boolean' },
        'open-loop': { type: 'boolean' },
        'ignore-recorded-switches': { type: 'boolean' },
        ...SIM_OPTIONS,
        ...ROUTER_OPTIONS,
        ...SWITCH_OPTIONS,
      },
      true,
    );
    // Several files are one recording split by rotation (PATH.000001 ... PATH), read in the
    // order given as one file, as `cat` joins them (two router runs are refused).
    const named = [...p.positionals, ...strs(p, 'trace')];
    if (named.length === 0) throw new UsageError('replay needs the trace FILE (or --trace FILE)');
    const given = named.join(' ');
    // Relative to where the user is; failing that, the trace loader also tries the repo root
    // (so the README's packages/sim/data/traces/... works from the package directory too).
    const paths = named.map((f) => {
      const fromCwd = resolve(io.cwd, f);
      return existsSync(fromCwd) ? fromCwd : f;
    });
    const file = paths.length === 1 ? paths[0]! : paths;
    const group = str(p, 'group');
    const speedupRaw = str(p, 'speedup');
    const flags = readSimFlags(p, REPLAY_SCENARIO, io);
    const scenarioOptions = {
      ...flags.scenarioOptions,
      file,
      ...(speedupRaw !== undefined ? { speedup: positiveNumber('speedup', speedupRaw) } : {}),
      skipInvalid: bool(p, 'skip-invalid'),
      ...(bool(p, 'open-loop') ? { openLoop: true } : {}),
      ...(group !== undefined ? { group } : {}),
    };
    if (bool(p, 'observed')) {
      return runObserved(io, p, flags, scenarioOptions, given);
    }
    const policies = readPolicies(p, flags);
    const { report, samples, extras } = compare(io, {
      command: 'replay',
      scenario: REPLAY_SCENARIO,
      scenarioOptions,
      displayOptions: { file: given },
      seed: flags.seed,
      ranks: flags.ranks,
      profile: flags.profile,
      policies,
      router: readRouterFlags(p),
      engine: flags.engine,
      switches: readSwitches(p, flags),
      recordedSwitches: !bool(p, 'ignore-recorded-switches'),
    });
    await emitRunReport(io, flags.outputs, report, samples, extras);
    return 0;
  },
};

async function runObserved(
  io: CliIo,
  p: Parsed,
  flags: SimFlags,
  scenarioOptions: Record<string, unknown>,
  given: string,
): Promise<number> {
  if (flags.outputs.csv !== undefined || flags.outputs.html !== undefined) {
    throw new UsageError('--observed writes --json only (no --csv or --html)');
  }
  const list = str(p, 'policies');
  let policy: DispatcherConfig | undefined;
  if (list !== undefined) {
    const specs = parsePolicies(nameList('policies', list), flags.policyFlags);
    if (specs.length !== 1) {
      throw new UsageError(
        `--observed compares one setting with the observations; --policies lists ${specs.length}`,
      );
    }
    policy = specs[0]!.config;
  }
  let result: ReturnType<typeof replayObserved>;
  try {
    const plan = buildWorkload(REPLAY_SCENARIO, scenarioOptions, flags.seed);
    for (const w of plan.warnings ?? []) io.stderr.write(`warning: ${w}\n`);
    const engine: { engine?: RankOverrides } = engineOptions(flags.profile, flags.engine);
    result = replayObserved(plan, {
      profile: flags.profile,
      seed: flags.seed,
      ...(policy ? { policy } : {}),
      ...(flags.ranks !== undefined ? { ranks: flags.ranks } : {}),
      ...(engine.engine ? { rank: engine.engine } : {}),
    });
  } catch (e) {
    if (e instanceof ObservedReplayError || e instanceof TraceFormatError) {
      throw new UsageError(e.message);
    }
    throw e;
  }
  const json = flags.outputs.json;
  if (json !== '-') {
    io.stdout.write(renderObservedReplay(result, { trace: given, profile: flags.profile.name }));
  }
  if (json !== undefined) {
    writeOutput(
      io,
      'json',
      json,
      `${JSON.stringify({ format: 'kvroute-replay-observed/v1', trace: given, profile: flags.profile.name, ...result }, null, 2)}\n`,
    );
  }
  return 0;
}
