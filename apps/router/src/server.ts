// Entry point for `pnpm router`, `tsx src/server.ts`, the bin and the esbuild bundle: it only
// hands argv to the CLI, which builds the app and listens.
import { main } from './cli.ts';

await main(process.argv.slice(2), process.env);
