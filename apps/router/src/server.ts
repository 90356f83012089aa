// Entry point for `pnpm router`, `tsx src/server.ts`, the bin and the esbuild bundle: it only
// hands argv to the CLI, which builds the app and listens.
import { main } from './cli.ts';

// `pnpm router ...` runs in apps/router; relative paths (--config, --record-trace, key and
// tokenizer files) mean where the user typed it (pnpm's INIT_CWD), as with `pnpm sim`.
const initCwd = process.env.INIT_CWD;
if (process.env.npm_lifecycle_event === 'router' && initCwd && initCwd !== process.cwd()) {
  process.chdir(initCwd);
}

await main(process.argv.slice(2), process.env);
