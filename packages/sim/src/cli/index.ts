// `@kvroute/sim/cli`: run `kvroute-sim` in-process, and the pieces another command-line tool
// built on the simulator (kvroute-validate) shares with it, so both parse flags, report bad
// input and draw progress the same way.

export {
  parseAxisValues,
  planSweep,
  type SweepAxis,
  type SweepGrid,
  type SweepSetting,
} from '../sweep/axes.ts';
export { routerConfigYaml } from '../sweep/router-config.ts';
export {
  checkName,
  type OptionSpec,
  type Parsed,
  parseAssignments,
  parseCommandArgs,
  parseSeed,
  positiveInt,
  positiveNumber,
  str,
  strs,
} from './args.ts';
export type { CliErr, CliIo, CliOut, Subcommand } from './command.ts';
export { defaultProfileName } from './common.ts';
export { isInputError, UsageError } from './errors.ts';
export { dropLeadingDashDash, globalUsage, runCli, runSubcommand } from './main.ts';
export { createProgress, type Progress } from './progress.ts';
export { commands } from './registry.ts';
export {
  assembleSweep,
  findCell,
  runSweep,
  type SweepInput,
  type SweepLoad,
  type SweepSpec,
  sweepJobs,
  sweepSpec,
} from './simulate.ts';
