// The CLI's public surface, re-exported from @kvroute/sim's index: run `kvroute-sim` in-process.
export type { CliIo, Subcommand } from './command.ts';
export { UsageError } from './errors.ts';
export { globalUsage, runCli } from './main.ts';
export { commands } from './registry.ts';
