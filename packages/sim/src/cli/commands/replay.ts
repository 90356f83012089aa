import { existsSync } from 'node:fs';
import { resolve } from 'node:path';
import { bool, parseCommandArgs, positiveNumber, str } from '../args.ts';
import type { Subcommand } from '../command.ts';
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
  SWITCH_FLAGS_HELP,
  SWITCH_OPTIONS,
} from '../common.ts';
import { emitRunReport } from '../emit-report.ts';
import { UsageError } from '../errors.ts';
import { REPLAY_SCENARIO } from '../sim-api.ts';
import { compare } from '../simulate.ts';

const usage = `usage: kvroute-sim replay FILE [--policies a,b,c] [--ranks N] [--speedup X] [--skip-invalid] [flags]

Replays a Mooncake-format JSONL trace (one {"timestamp", "input_length", "output_length",
"hash_ids"} object per line; 512-token hash blocks become synthetic token blocks) under each
policy and prints the comparison table. The same as 'run --scenario replay --set file=FILE'.

  FILE                  path: the trace, e.g. packages/sim/data/traces/mooncake-conversation.jsonl
                        (shipped with the package; relative to where you run the command)
  --policies LIST       comma-separated method names (default ${DEFAULT_POLICIES})
  --speedup X           number > 0: arrivals X times faster than recorded (default 1)
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
        ...SIM_OPTIONS,
        ...ROUTER_OPTIONS,
        ...SWITCH_OPTIONS,
      },
      true,
    );
    if (p.positionals.length !== 1) {
      throw new UsageError(
        p.positionals.length === 0
          ? 'replay needs the trace FILE'
          : `replay takes one trace FILE, got ${p.positionals.length}: ${p.positionals.join(' ')}`,
      );
    }
    const given = p.positionals[0]!;
    // Relative to where the user is; failing that, the trace loader also tries the repo root
    // (so the README's packages/sim/data/traces/... works from the package directory too).
    const fromCwd = resolve(io.cwd, given);
    const file = existsSync(fromCwd) ? fromCwd : given;
    const speedupRaw = str(p, 'speedup');
    const flags = readSimFlags(p, REPLAY_SCENARIO, io);
    const scenarioOptions = {
      ...flags.scenarioOptions,
      file,
      ...(speedupRaw !== undefined ? { speedup: positiveNumber('speedup', speedupRaw) } : {}),
      skipInvalid: bool(p, 'skip-invalid'),
    };
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
    });
    await emitRunReport(io, flags.outputs, report, samples, extras);
    return 0;
  },
};
