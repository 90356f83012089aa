// The kvroute-router command: config from flags/env/YAML, optional embedded mock workers
// (--mock-workers N), then build and listen. The effective config is logged once at start,
// with the admin token redacted.
import { readFileSync } from 'node:fs';
import { hostname } from 'node:os';
import type { FastifyInstance } from 'fastify';
import { parse as parseYaml } from 'yaml';
import { helpText, parseArgs, type RouterConfig, redactConfig, resolveConfig } from './config.ts';
import { redactUrlCredentials } from './credentials.ts';
import { RouterConfigError } from './errors.ts';
import { type LogFormat, loggerOptions, resolveLogFormat, startupMessage } from './logging.ts';
import { buildRouter, dispatcherConfig } from './router.ts';

export interface RunningRouter {
  app: FastifyInstance;
  url: string;
  config: RouterConfig;
  /**
   * Stops accepting connections and waits for in-flight responses, at most `graceMs`
   * (default SHUTDOWN_GRACE_MS); then the remaining connections are cut.
   */
  close(graceMs?: number): Promise<void>;
  /**
   * Re-reads the configuration (flags, environment, the YAML file again) and switches every
   * group's method and options to the new ones (what SIGHUP does). An invalid file, or one
   * whose model groups differ, is refused with the error logged, and the running policy is
   * kept. Settings other than methods and options are not applied (they need a restart).
   */
  reload(source?: string): { ok: true; switches: number } | { ok: false; error: string };
}

/**
 * How long a shutdown waits for in-flight responses. Without a bound, one client connection
 * that is open but has not sent a request (a pooled or pre-opened connection) holds the close
 * until Node's headers timeout (60 s): Node counts such a connection as active, not idle.
 */
export const SHUTDOWN_GRACE_MS = 10_000;

/** Starts N mock workers on loopback (the embedded default for demos and `pnpm router`). */
async function startMockWorkers(
  config: RouterConfig,
): Promise<{ urls: string[]; close(): Promise<void> }> {
  const { startMockWorker } = await import('@kvroute/mock-worker');
  const running: Awaited<ReturnType<typeof startMockWorker>>[] = [];
  for (let i = 0; i < config.mockWorkers; i++) {
    running.push(
      await startMockWorker({
        host: '127.0.0.1',
        port: config.mockBasePort !== undefined ? config.mockBasePort + i : 0,
        timeScale: config.mockTimeScale,
        dpSize: config.mockDpSize,
        ...(config.mockProfile ? { profile: config.mockProfile } : {}),
        ...(config.tokenizer ? { tokenizer: config.tokenizer } : {}),
      }),
    );
  }
  return {
    urls: running.map((w) => w.url),
    close: async () => {
      await Promise.all(running.map((w) => w.close()));
    },
  };
}

/** The listen(2) backlog of the main listener (see startRouter). */
export const LISTEN_BACKLOG = 4096;

/**
 * KVROUTE_DEFAULT_HOST and KVROUTE_DEFAULT_PORT: defaults below every other source, used only
 * where no flag, KVROUTE_HOST / KVROUTE_PORT or config file key sets host / port. The router
 * image sets them (0.0.0.0, 30000): as KVROUTE_HOST / KVROUTE_PORT they would beat the file
 * and silently override `host:` and `port:` in a mounted config. Returns the environment the
 * configuration is resolved from.
 */
export function withImageDefaults(
  argv: readonly string[],
  env: NodeJS.ProcessEnv,
  readFile: (path: string) => string = (p) => readFileSync(p, 'utf8'),
): NodeJS.ProcessEnv {
  const defaults = [
    ['host', 'KVROUTE_HOST', env.KVROUTE_DEFAULT_HOST],
    ['port', 'KVROUTE_PORT', env.KVROUTE_DEFAULT_PORT],
  ] as const;
  if (defaults.every(([, , value]) => value === undefined)) return env;
  let cli: ReturnType<typeof parseArgs>;
  try {
    cli = parseArgs(argv);
  } catch {
    return env; // resolveConfig reports it
  }
  let file: object | undefined;
  const path = cli.configFile ?? env.KVROUTE_CONFIG;
  if (path !== undefined) {
    try {
      const parsed: unknown = parseYaml(readFile(path));
      if (parsed && typeof parsed === 'object') file = parsed;
    } catch {
      // resolveConfig reports an unreadable or invalid file
    }
  }
  const out = { ...env };
  for (const [key, name, value] of defaults) {
    if (value === undefined || env[name] !== undefined || cli.values.has(key)) continue;
    if (file && key in file) continue;
    out[name] = value;
  }
  return out;
}

export async function startRouter(
  argv: readonly string[],
  startEnv: NodeJS.ProcessEnv,
): Promise<RunningRouter> {
  const env = withImageDefaults(argv, startEnv);
  let config = resolveConfig(argv, env);
  const resolvedAtStart = config;
  const mocks = config.mockWorkers > 0 ? await startMockWorkers(config) : undefined;
  if (mocks) config = { ...config, workerUrls: [...config.workerUrls, ...mocks.urls] };
  let app: ReturnType<typeof buildRouter>;
  try {
    app = buildRouter(config, { logger: loggerOptions(config.logLevel, config.logFormat) });
  } catch (err) {
    // The mock workers' listeners would keep the process alive after the error is printed.
    await mocks?.close();
    throw err;
  }
  try {
    // Node's default accept backlog is 511. A burst of more connections than that (2,000
    // clients at once) overflows the kernel's accept queue: the handshakes the kernel drops
    // are retried 1 s, 3 s, 7 s later, so those clients are accepted (and their body timer
    // started) seconds after they sent their headers, and a 10 s body timeout closes them
    // at 11 to 17 s as they see it. The kernel caps this at net.core.somaxconn.
    await app.listen({ host: config.host, port: config.port, backlog: LISTEN_BACKLOG });
    const ops = app.kvroute.adminApp;
    if (ops && config.adminPort !== undefined) {
      await ops.listen({ host: config.adminHost, port: config.adminPort });
      const a = ops.server.address();
      app.log.info(
        `kvroute-router metrics and admin on port ${a && typeof a === 'object' ? a.port : config.adminPort}`,
      );
    }
  } catch (err) {
    await app.close();
    await mocks?.close();
    throw err;
  }
  const addr = app.server.address();
  const port = addr && typeof addr === 'object' ? addr.port : config.port;
  const url = `http://${config.host.includes(':') ? `[${config.host}]` : config.host}:${port}`;
  app.log.info(
    {
      config: redactConfig(config),
      policy: dispatcherConfig(config),
      tokenizer: app.kvroute.tokenizer.description,
      ranks: app.kvroute.table
        .info()
        .map((r) => ({ rank: r.rank, url: redactUrlCredentials(r.url), dpRank: r.dpRank })),
    },
    startupMessage(url, config, app.kvroute.table.size, app.kvroute.table.workers().length),
  );
  return {
    app,
    url,
    config,
    reload: (source = 'sighup') => {
      const log = app.log;
      try {
        let next: RouterConfig;
        try {
          next = resolveConfig(argv, env);
        } catch (err) {
          // reloadPolicies counts the refusals it finds; a file that does not even resolve
          // (bad YAML, a value out of range) is a refusal too.
          app.kvroute.noteSwitchRefused(source);
          throw err;
        }
        const events = app.kvroute.reloadPolicies(next, source);
        const ignored = changedSettings(resolvedAtStart, next);
        if (ignored.length > 0) {
          log.warn(
            { ignored },
            `${source}: only methods and options are reloaded; changes to ${ignored.join(', ')} need a restart`,
          );
        }
        if (events.length === 0) log.info(`${source}: configuration re-read, no policy changed`);
        return { ok: true, switches: events.length };
      } catch (err) {
        const error = (err as Error).message;
        log.error({ error }, `${source}: new configuration refused, the running policy is kept`);
        return { ok: false, error };
      }
    },
    close: async (graceMs = SHUTDOWN_GRACE_MS) => {
      const cut = setTimeout(() => app.server.closeAllConnections(), graceMs);
      try {
        await app.close();
      } finally {
        clearTimeout(cut);
      }
      await mocks?.close();
    },
  };
}

/**
 * The log format a failed start reports in: the configuration's, or, when the configuration
 * itself is what failed, the --log-format flag or KVROUTE_LOG_FORMAT (else auto).
 */
function startupLogFormat(argv: readonly string[], env: NodeJS.ProcessEnv): LogFormat {
  try {
    return resolveConfig(argv, env).logFormat;
  } catch {
    let format: string | undefined = env.KVROUTE_LOG_FORMAT;
    argv.forEach((a, i) => {
      if (a === '--log-format') format = argv[i + 1];
      else if (a.startsWith('--log-format=')) format = a.slice('--log-format='.length);
    });
    return format === 'json' || format === 'pretty' ? format : 'auto';
  }
}

/** A fatal error as one line in the shape of the router's JSON logs (pino's, level 60). */
export function fatalLogLine(msg: string): string {
  return JSON.stringify({
    level: 60,
    time: Date.now(),
    pid: process.pid,
    hostname: hostname(),
    msg,
  });
}

export async function main(argv: readonly string[], env: NodeJS.ProcessEnv): Promise<void> {
  if (argv.includes('--help') || argv.includes('-h')) {
    console.log(helpText());
    return;
  }
  let running: RunningRouter;
  try {
    running = await startRouter(argv, env);
  } catch (err) {
    const message =
      err instanceof RouterConfigError ? err.message : `kvroute-router: ${(err as Error).message}`;
    console.error(
      resolveLogFormat(startupLogFormat(argv, env)) === 'json' ? fatalLogLine(message) : message,
    );
    process.exitCode = 1;
    return;
  }
  let stopping = false;
  const stop = (signal: string): void => {
    if (stopping) return;
    stopping = true;
    running.app.log.info(`${signal}: shutting down`);
    void running.close().finally(() => process.exit(0));
  };
  process.once('SIGINT', () => stop('SIGINT'));
  process.once('SIGTERM', () => stop('SIGTERM'));
  // SIGHUP re-reads the YAML file and switches methods and options (see RunningRouter.reload).
  process.on('SIGHUP', () => {
    if (!stopping) running.reload('sighup');
  });
}

/** Policy fields: what a reload applies (the rest of a re-read config needs a restart). */
const RELOADED = new Set([
  'loadBalanceMethod',
  'methodOptions',
  'policyOptions',
  'dpCacheAffinity',
  'affinityMaxEntries',
  'affinityTtlMs',
  'modelGroups',
]);

/** Top-level settings that differ between two resolved configs, policy fields aside. */
function changedSettings(before: RouterConfig, after: RouterConfig): string[] {
  const keys = new Set([...Object.keys(before), ...Object.keys(after)]);
  const out: string[] = [];
  for (const k of keys) {
    if (RELOADED.has(k)) continue;
    const a = (before as unknown as Record<string, unknown>)[k];
    const b = (after as unknown as Record<string, unknown>)[k];
    if (JSON.stringify(a) !== JSON.stringify(b)) out.push(k);
  }
  return out;
}
