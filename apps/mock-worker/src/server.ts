// CLI entry: `kvroute-mock-worker [flags]` (see --help), or `kvroute-mock-worker kv-store
// [flags]`, the KV store PD workers share. Prints one line with the URL so scripts can start
// it with --port 0 and read where it listens.
import { parseArgs } from 'node:util';
import { MockWorkerConfigError, parseMockWorkerArgs, USAGE } from './options.ts';
import { startKvStore } from './pd/kv-store.ts';
import { startMockWorker } from './start.ts';

const KV_STORE_USAGE = `Usage: kvroute-mock-worker kv-store [flags]

A KV store the mock PD workers share (SGLang's HiCache storage backend): prefill workers started
with --kv-store URL load what it holds and write their prompts to it; decode workers with
--kv-store URL --decode-offload write each finished prompt + reply to it.

  --host HOST          listen address (default 127.0.0.1)
  --port N             listen port (default 0: any free port; the URL is printed)
  --kv-store-tokens N  tokens held before least recently used paths are evicted (default: unbounded)
  --page-size N        radix page size in tokens (default 1, as the workers')
  -h, --help           this text
`;

async function kvStoreMain(argv: string[]): Promise<void> {
  const { values } = parseArgs({
    args: argv,
    options: {
      host: { type: 'string' },
      port: { type: 'string' },
      'kv-store-tokens': { type: 'string' },
      'page-size': { type: 'string' },
      help: { type: 'boolean', short: 'h' },
    },
  });
  if (values.help) {
    process.stdout.write(KV_STORE_USAGE);
    return;
  }
  const int = (flag: string, raw: string | undefined, min: number): number | undefined => {
    if (raw === undefined) return undefined;
    const v = Number(raw);
    if (!Number.isInteger(v) || v < min) {
      throw new MockWorkerConfigError(`--${flag} must be an integer >= ${min}, got "${raw}"`);
    }
    return v;
  };
  const capacityTokens = int('kv-store-tokens', values['kv-store-tokens'], 1);
  const pageSize = int('page-size', values['page-size'], 1);
  const store = await startKvStore({
    host: values.host ?? '127.0.0.1',
    port: int('port', values.port, 0) ?? 0,
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
  if (argv[0] === 'kv-store') return kvStoreMain(argv.slice(1).filter((a) => a !== '--'));
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
