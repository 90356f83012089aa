// The subcommands `kvroute-sim` knows. To add one, export `command: Subcommand` (see
// command.ts) from your module and add one `lazy(...)` line below. Modules load only when
// their command runs, so `kvroute-sim scenarios` does not pay for vega or the engine.
import type { Subcommand } from './command.ts';

export interface CommandEntry {
  readonly name: string;
  readonly summary: string;
  load(): Promise<Subcommand>;
}

function lazy(
  name: string,
  summary: string,
  load: () => Promise<{ command: Subcommand }>,
): CommandEntry {
  return { name, summary, load: async () => (await load()).command };
}

export const commands: readonly CommandEntry[] = [
  lazy(
    'run',
    'simulate a scenario under several policies and print a comparison table',
    () => import('./commands/run.ts'),
  ),
  lazy(
    'sweep',
    "tune any method's options (and the methods, and the load): name the best setting, why, and its router config",
    () => import('./commands/sweep.ts'),
  ),
  lazy(
    'replay',
    'replay a Mooncake-format JSONL trace under several policies',
    () => import('./commands/replay.ts'),
  ),
  lazy(
    'scenarios',
    'list the workload scenarios, one per line',
    () => import('./commands/scenarios.ts'),
  ),
  lazy('profiles', 'list the cost profiles, one per line', () => import('./commands/profiles.ts')),
  lazy(
    'fit',
    'fit a cost profile to observed per-request timings and write it as a profile file',
    () => import('./commands/fit.ts'),
  ),
  lazy(
    'merge',
    "combine 'sweep --shard K/N' results into the report one sweep run gives",
    () => import('./commands/merge.ts'),
  ),
  {
    name: 'validate',
    summary: 'send a scenario to a live endpoint and compare what it did with the prediction',
    load: async () =>
      (await import('./external.ts')).externalCommand({
        name: 'validate',
        summary: 'send a scenario to a live endpoint and compare what it did with the prediction',
        bin: 'kvroute-validate',
        packageName: '@kvroute/validate',
      }),
  },
  lazy(
    'compare',
    'regenerate docs/policy-comparison.{md,html}: every method on the comparison scenarios, targets judged',
    () => import('./commands/compare.ts'),
  ),
];

export function findCommand(name: string): CommandEntry | undefined {
  return commands.find((c) => c.name === name);
}
