// A router built from command-line flags, listening on loopback for a test: its URL, and
// the cleanups that close it (its listener and any kept-alive client connection).
import type { FastifyInstance } from 'fastify';
import { resolveConfig } from '../../src/config.ts';
import { buildRouter } from '../../src/router.ts';

export async function listenRouter(
  flags: string[],
  cleanups: (() => Promise<void> | void)[],
): Promise<{ app: FastifyInstance; url: string }> {
  const app = buildRouter(resolveConfig(flags));
  cleanups.push(() => app.close());
  await app.listen({ host: '127.0.0.1', port: 0 });
  cleanups.push(async () => app.server.closeAllConnections());
  return { app, url: `http://127.0.0.1:${(app.server.address() as { port: number }).port}` };
}

/** Flags that turn the router's active health and generation checks off (tests drive faults). */
export const NO_ACTIVE_CHECKS = [
  '--health-check-interval-ms',
  '0',
  '--generation-check-interval-ms',
  '0',
] as const;
