// Listening is separate from building (fastify's build/listen split): tests use
// buildMockWorker() with app.inject(), the router's --mock-workers and e2e tests use this.
import type { FastifyInstance } from 'fastify';
import { buildMockWorker } from './app.ts';
import type { MockWorkerOptions } from './options.ts';

export interface StartMockWorkerOptions extends MockWorkerOptions {
  /** Default 127.0.0.1. */
  host?: string;
  /** Default 0: any free port. */
  port?: number;
}

export interface RunningMockWorker {
  /** `http://127.0.0.1:PORT`, no trailing slash. */
  url: string;
  port: number;
  app: FastifyInstance;
  /**
   * Stops listening and drops open connections (in-flight requests see a reset socket), as
   * a worker process that is killed would: the router's failover tests use this.
   */
  close(): Promise<void>;
}

export async function startMockWorker(
  opts: StartMockWorkerOptions = {},
): Promise<RunningMockWorker> {
  const { host = '127.0.0.1', port = 0, ...options } = opts;
  const app = buildMockWorker(options);
  await app.listen({ host, port });
  const bootstrap = app.mockPd.bootstrap;
  if (bootstrap) {
    try {
      await bootstrap.listen(host, app.mockOptions.bootstrapPort);
    } catch (err) {
      await app.close();
      throw err;
    }
  }
  const addr = app.server.address();
  if (addr === null || typeof addr === 'string') throw new Error('mock worker: no TCP address');
  const shownHost = addr.family === 'IPv6' ? `[${addr.address}]` : addr.address;
  let closing: Promise<void> | undefined;
  return {
    url: `http://${shownHost}:${addr.port}`,
    port: addr.port,
    app,
    close() {
      closing ??= (async () => {
        app.server.closeAllConnections();
        await app.close();
      })();
      return closing;
    },
  };
}
