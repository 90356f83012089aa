// CLI entry: `kvroute-mock-worker [flags]` (see --help). Prints one line with the URL so
// scripts can start it with --port 0 and read where it listens.
import { MockWorkerConfigError, parseMockWorkerArgs, USAGE } from './options.ts';
import { startMockWorker } from './start.ts';

async function main(): Promise<void> {
  const args = parseMockWorkerArgs(process.argv.slice(2));
  if (args.help) {
    process.stdout.write(USAGE);
    return;
  }
  const worker = await startMockWorker({ ...args.options, host: args.host, port: args.port });
  const o = worker.app.mockOptions;
  const e = worker.app.mockEngine;
  console.log(
    `kvroute-mock-worker listening on ${worker.url} (dp_size ${o.dpSize}, ${o.loadBalanceMethod}, profile ${e.profile.name}, time scale ${o.timeScale}, kv ${e.kvCapacity} tokens/rank)`,
  );
  const stop = () => {
    void worker.close().then(() => process.exit(0));
  };
  process.once('SIGINT', stop);
  process.once('SIGTERM', stop);
}

main().catch((err: unknown) => {
  console.error(err instanceof MockWorkerConfigError ? err.message : err);
  process.exit(2);
});
