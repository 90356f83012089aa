import { parseCommandArgs } from '../args.ts';
import type { Subcommand } from '../command.ts';
import { scenarioList } from '../sim-api.ts';

export const command: Subcommand = {
  name: 'scenarios',
  summary: 'list the workload scenarios, one per line',
  usage: `usage: kvroute-sim scenarios

Prints each scenario as "name  description", one per line. Set a scenario's options with
'kvroute-sim run --scenario NAME --set key=value'.
`,
  async run(argv, io) {
    parseCommandArgs('scenarios', argv, {});
    const list = scenarioList();
    const width = Math.max(0, ...list.map((s) => s.name.length));
    for (const s of list) io.stdout.write(`${s.name.padEnd(width)}  ${s.description}\n`);
    return 0;
  },
};
