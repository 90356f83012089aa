import { parseCommandArgs } from '../args.ts';
import type { Subcommand } from '../command.ts';
import {
  DEFAULT_POLICIES,
  ROUTER_FLAGS_HELP,
  ROUTER_OPTIONS,
  readPolicies,
  readRouterFlags,
  readSimFlags,
  readSwitches,
  requireScenario,
  SIM_FLAGS_HELP,
  SIM_OPTIONS,
  SWITCH_FLAGS_HELP,
  SWITCH_OPTIONS,
} from '../common.ts';
import { emitRunReport } from '../emit-report.ts';
import { PD_FLAGS_HELP, PD_OPTIONS, readLayout, runPdLayout } from '../pd-layout.ts';
import { compare } from '../simulate.ts';

const usage = `usage: kvroute-sim run --scenario NAME [--policies a,b,c] [flags]

Simulates the scenario once per policy on the same pre-generated workload and prints one
comparison row per policy: token hit rate, TTFT p50/p90/p99/mean, cold and steady-state
TTFT, throughput, per-rank imbalance, evicted tokens and queueing delay.

  --scenario NAME       name: workload (see 'kvroute-sim scenarios'); required
  --policies LIST       comma-separated method names (default ${DEFAULT_POLICIES});
                        per-policy options as name:key=value, e.g. prefix_match:window=128
${ROUTER_FLAGS_HELP}
${PD_FLAGS_HELP}
${SWITCH_FLAGS_HELP}
${SIM_FLAGS_HELP}

examples:
  kvroute-sim run --scenario seed-sequential --policies round_robin,total_tokens,prefix_match
  kvroute-sim run --scenario agentic --ranks 8 --set sessions=50 --json - | jq '.policies[].hitRate'
  kvroute-sim run --scenario agentic --ranks 4 --policies cache_aware --replicas 3 --index-source events
  kvroute-sim run --scenario agentic --ranks 8 --layout pd --prefill-ranks 4 --decode-ranks 4 --link-gbps 400 --prefill-policy cache_aware --decode-policy total_tokens --html pd.html
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
      ...ROUTER_OPTIONS,
      ...PD_OPTIONS,
      ...SWITCH_OPTIONS,
    });
    const scenario = requireScenario(p);
    const flags = readSimFlags(p, scenario, io);
    if (readLayout(p) === 'pd') return runPdLayout(io, p, { command: 'run', scenario, flags });
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
      router: readRouterFlags(p),
      engine: flags.engine,
      switches: readSwitches(p, flags),
    });
    await emitRunReport(io, flags.outputs, report, samples, extras);
    return 0;
  },
};
