// CLI entry: `kvroute-mock-worker [flags]` (see --help), or `kvroute-mock-worker kv-store
// [flags]`, the KV store PD workers share. Prints one line with the URL so scripts can start
// it with --port 0 and read where it listens.
import {
  KV_STORE_USAGE,
  MockWorkerConfigError,
  parseKvStoreArgs,
  parseMockWorkerArgs,
  USAGE,
} from './options.ts';
import { startKvStore } from './pd/kv-store.ts';
import { startMockWorker } from './start.ts';

async function kvStoreMain(argv: string[]): Promise<void> {
  const args = parseKvStoreArgs(argv);
  if (args.help) {
    process.stdout.write(KV_STORE_USAGE);
    return;
  }
  const { capacityTokens, pageSize } = args;
  const store = await startKvStore({
    host: args.host,
    port: args.port,
    ...(capacityTokens !== undefined ? { capacityTokens } : {}),
    ...(pageSize !== undefined ? { pageSize } : {}),
  });
  console.log(
    `kvroute-mock-worker kv-store listening on ${store.url} (${capacityTokens ?? 'unbounded'} tokens)`,
  );
  const stop = () => {
    void store.close().then(() => process.exit(0));
  };
  process.once('SIGINT', stop);
  process.once('SIGTERM', stop);
}

async function main(): Promise<void> {
  const argv = process.argv.slice(2).filter((a, i) => !(i === 0 && a === '--'));
  if (argv[0] === 'kv-store') return kvStoreMain(argv.slice(1));
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
