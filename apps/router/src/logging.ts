// Log output. Production and log shippers get pino's JSON lines unchanged; a terminal (the
// demo, a developer) gets one readable line per event. The format is chosen once at start
// (--log-format auto|json|pretty; auto = pretty only when stdout is a TTY), so pipes and
// containers always see JSON.

import { Writable } from 'node:stream';
import type { RouterConfig } from './config.ts';
import { redactCredentials } from './credentials.ts';

export type LogFormat = RouterConfig['logFormat'];

export function resolveLogFormat(
  format: LogFormat,
  isTTY: boolean = process.stdout.isTTY === true,
): 'json' | 'pretty' {
  if (format === 'auto') return isTTY ? 'pretty' : 'json';
  return format;
}

const LEVELS: Record<number, string> = {
  10: 'TRACE',
  20: 'DEBUG',
  30: 'INFO',
  40: 'WARN',
  50: 'ERROR',
  60: 'FATAL',
};
const COLORS: Record<number, string> = { 40: '\x1b[33m', 50: '\x1b[31m', 60: '\x1b[41m' };
// pino's own fields, shown by position instead of as key=value.
const OWN = new Set(['level', 'time', 'pid', 'hostname', 'msg', 'v']);
const MAX_VALUE = 160;

/** One pino JSON record as a readable line: `12:04:05.123 INFO  message key=value ...`. */
export function formatPretty(line: string, color = false): string {
  let rec: Record<string, unknown>;
  try {
    rec = JSON.parse(line) as Record<string, unknown>;
  } catch {
    return line;
  }
  const level = typeof rec.level === 'number' ? rec.level : 30;
  const time = typeof rec.time === 'number' ? new Date(rec.time).toISOString().slice(11, 23) : '';
  let name = (LEVELS[level] ?? String(level)).padEnd(5);
  if (color && COLORS[level]) name = `${COLORS[level]}${name}\x1b[0m`;
  const fields: string[] = [];
  for (const [k, v] of Object.entries(rec)) {
    if (OWN.has(k) || v === undefined) continue;
    let text = typeof v === 'string' ? v : JSON.stringify(v);
    if (k === 'err' && v && typeof v === 'object' && 'message' in v) text = String(v.message);
    if (text.length > MAX_VALUE) text = `${text.slice(0, MAX_VALUE)}…`;
    fields.push(`${k}=${text}`);
  }
  return `${time} ${name} ${String(rec.msg ?? '')}${fields.length ? `  ${fields.join(' ')}` : ''}`;
}

/** A pino destination that writes each record as a readable line to `out`. */
export function prettyStream(out: NodeJS.WritableStream, color = false): Writable {
  let pending = '';
  return new Writable({
    write(chunk: Buffer | string, _enc, done) {
      pending += chunk.toString();
      let nl = pending.indexOf('\n');
      while (nl >= 0) {
        const line = pending.slice(0, nl);
        pending = pending.slice(nl + 1);
        if (line) out.write(`${formatPretty(line, color)}\n`);
        nl = pending.indexOf('\n');
      }
      done();
    },
  });
}

export interface LoggerOptions {
  level: string;
  stream?: Writable;
  hooks: { logMethod(this: unknown, args: unknown[], method: (...a: unknown[]) => void): void };
}

/**
 * fastify `logger` options for the router. fastify's own "Server listening at" line is
 * dropped: the router logs one startup line of its own that says more (see startupMessage).
 */
export function loggerOptions(
  level: string,
  format: LogFormat,
  out: NodeJS.WritableStream = process.stdout,
  isTTY: boolean = process.stdout.isTTY === true,
): LoggerOptions {
  const pretty = resolveLogFormat(format, isTTY) === 'pretty';
  return {
    level,
    ...(pretty ? { stream: prettyStream(out, isTTY) } : {}),
    hooks: {
      logMethod(args, method) {
        const first = args[0];
        if (typeof first === 'string' && first.startsWith('Server listening at')) return;
        // Lines are rare on the request path (failures, rate-limited): the walk costs nothing
        // per successful request.
        method.apply(this, redactCredentials(args) as typeof args);
      },
    },
  };
}

const plural = (n: number, noun: string): string => `${n} ${noun}${n === 1 ? '' : 's'}`;

/** The startup line: where it listens, with which method, over which workers. */
export function startupMessage(
  url: string,
  config: RouterConfig,
  ranks: number,
  workers: number,
): string {
  const sources: string[] = [];
  // startRouter appends the mock workers' URLs to workerUrls.
  const listed = config.workerUrls.length - config.mockWorkers;
  const from = config.pdDisaggregation
    ? '--prefill'
    : config.modelGroups.length > 0
      ? plural(config.modelGroups.length, '--model-group')
      : '--worker-urls';
  if (listed > 0) sources.push(`${listed} from ${from}`);
  if (config.pdDisaggregation && config.decode.length > 0) {
    sources.push(`${config.decode.length} decode from --decode`);
  }
  if (config.mockWorkers > 0) sources.push(`${config.mockWorkers} mock`);
  if (config.serviceDiscovery) {
    const ns = config.serviceDiscoveryNamespace ?? 'own namespace';
    sources.push(
      `Kubernetes discovery of pods ${config.selector.join(',')} in ${ns}, port ${config.serviceDiscoveryPort}`,
    );
  }
  if (config.adminToken !== undefined) sources.push('admin API /ranks');
  const metricsUrl =
    config.adminPort === undefined
      ? `${url}/metrics`
      : `${url.replace(/:\d+$/, `:${config.adminPort}`)}/metrics`;
  return (
    `kvroute-router listening on ${url}, method ${config.loadBalanceMethod}` +
    `${config.dpAware ? ' (DP-aware)' : ''}, ${plural(ranks, 'rank')} on ${plural(workers, 'worker')}` +
    ` (${sources.join('; ') || 'none yet'}), metrics on ${metricsUrl}`
  );
}
