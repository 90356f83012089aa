import { parseCommandArgs } from '../args.ts';
import type { Subcommand } from '../command.ts';
import {
  DEFAULT_POLICIES,
  readPolicies,
  readSimFlags,
  requireScenario,
  SIM_FLAGS_HELP,
  SIM_OPTIONS,
} from '../common.ts';
import { emitRunReport } from '../emit-report.ts';
import { compare } from '../simulate.ts';

const usage = `usage: kvroute-sim run --scenario NAME [--policies a,b,c] [flags]

Simulates the scenario once per policy on the same pre-generated workload and prints one
comparison row per policy: token hit rate, TTFT p50/p90/p99/mean, cold and steady-state
TTFT, throughput, per-rank imbalance, evicted tokens and queueing delay.

  --scenario NAME       workload (see 'kvroute-sim scenarios')
  --policies LIST       comma-separated methods (default ${DEFAULT_POLICIES});
                        per-policy options as name:key=value, e.g. prefix_match:window=128
  --window W            prefix window in tokens, for every policy that reads it
  --prefix-length L     most tokens hashed, for every policy that reads it
${SIM_FLAGS_HELP}

examples:
  kvroute-sim run --scenario seed-sequential --policies round_robin,total_tokens,prefix_match
  kvroute-sim run --scenario agentic --ranks 8 --set sessions=50 --json - | jq '.policies[].hitRate'
`;

export const command: Subcommand = {
  name: 'run',
  summary: 'simulate a scenario under several policies and print a comparison table',
  usage,
  async run(argv, io) {
    const p = parseCommandArgs('run', argv, {
      scenario: { type: 'string' },
      policies: { type: 'string' },
      ...SIM_OPTIONS,
    });
    const scenario = requireScenario(p);
    const flags = readSimFlags(p, scenario, io);
    const policies = readPolicies(p, flags);
    const { report, samples, extras } = compare(io, {
      command: 'run',
      scenario,
      scenarioOptions: flags.scenarioOptions,
      displayOptions: flags.displayOptions,
      seed: flags.seed,
      ranks: flags.ranks,
      profile: flags.profile,
      policies,
      engine: flags.engine,
    });
    await emitRunReport(io, flags.outputs, report, samples, extras);
    return 0;
  },
};
