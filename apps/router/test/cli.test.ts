import { mkdtempSync, writeFileSync } from 'node:fs';
import { connect } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { main, startRouter, withImageDefaults } from '../src/cli.ts';
import { spawnRouterSource } from './helpers/router.ts';

/** Starts the router in-process on a free port, quiet, with the given flags. */
const quietRouter = (argv: string[]) =>
  startRouter([...argv, '--mock-time-scale', '0', '--port', '0', '--log-level', 'silent'], {});

afterEach(() => {
  vi.restoreAllMocks();
  process.exitCode = undefined;
});

describe('kvroute-router CLI', () => {
  it('--mock-workers N starts N loopback workers behind the router', async () => {
    const running = await quietRouter(['--mock-workers', '2', '--admin-token', 'abc']);
    try {
      expect(running.config.workerUrls).toHaveLength(2);
      expect(running.app.kvroute.table.size).toBe(2);
      const res = await fetch(`${running.url}/generate`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ text: 'hello', sampling_params: { max_new_tokens: 3 } }),
      });
      expect(res.status).toBe(200);
      const json = (await res.json()) as { meta_info: { completion_tokens: number } };
      expect(json.meta_info.completion_tokens).toBe(3);
    } finally {
      await running.close();
    }
  });

  it('--dp-aware with --mock-dp-size routes to (worker, DP rank) pairs', async () => {
    const running = await quietRouter(['--mock-workers', '2', '--mock-dp-size', '2', '--dp-aware']);
    try {
      expect(running.app.kvroute.table.info().map((r) => r.dpRank)).toEqual([0, 1, 0, 1]);
    } finally {
      await running.close();
    }
  });

  it('the command `pnpm router` runs logs the effective config from all sources, serves, and stops on SIGTERM', async () => {
    const { child, output, exited } = spawnRouterSource(
      [
        '--mock-workers',
        '4',
        '--mock-time-scale',
        '0',
        '--port',
        '0',
        '--admin-token',
        'hush-hush',
      ],
      { env: { ...process.env, KVROUTE_MAX_RETRIES: '5' } },
    );
    try {
      const started = await new Promise<{ msg: string; config: Record<string, unknown> }>(
        (resolve, reject) => {
          child.stdout.on('data', () => {
            const line = output()
              .split('\n')
              .find((l) => l.includes('kvroute-router listening on'));
            if (line) resolve(JSON.parse(line));
          });
          void exited.then((code) => reject(new Error(`exited ${code}: ${output()}`)));
        },
      );
      // Defaults, environment and flags, merged: the effective config, token redacted.
      expect(started.config).toMatchObject({
        loadBalanceMethod: 'cache_aware',
        maxRetries: 5,
        mockWorkers: 4,
        maxBodyBytes: 32 * 1024 * 1024,
        adminToken: '<set>',
      });
      expect(started.config.workerUrls).toHaveLength(4);
      expect(output()).not.toContain('hush-hush');
      const url = /listening on (http:\/\/127\.0\.0\.1:\d+)/.exec(started.msg)![1]!;
      const res = await fetch(`${url}/v1/chat/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ messages: [{ role: 'user', content: 'hi' }], max_tokens: 3 }),
      });
      expect(res.status).toBe(200);
      expect(res.headers.get('x-kvroute-reason')).toBeTruthy();
      expect(((await res.json()) as { usage: { completion_tokens: number } }).usage).toMatchObject({
        completion_tokens: 3,
      });
      child.kill('SIGTERM');
      expect(await exited).toBe(0);
      expect(output()).toContain('SIGTERM: shutting down');
    } finally {
      child.kill('SIGKILL');
    }
  });

  it('close() waits for in-flight responses at most the grace period, even with a silent client connection', async () => {
    const running = await quietRouter(['--mock-workers', '1']);
    const port = Number(new URL(running.url).port);
    // Connected, nothing sent: Node counts it as active, so an unbounded close would wait for it.
    const silent = connect(port, '127.0.0.1');
    await new Promise<void>((r) => silent.once('connect', () => r()));
    const closed = new Promise<void>((r) => silent.once('close', () => r()));
    await running.close(50);
    await closed;
    expect(silent.destroyed).toBe(true);
  });

  it('prints help, and a config error exits 1 with the message', async () => {
    const log = vi.spyOn(console, 'log').mockImplementation(() => {});
    const err = vi.spyOn(console, 'error').mockImplementation(() => {});
    await main(['--help'], {});
    expect(log.mock.calls[0]![0]).toContain('--load-balance-method');
    // --config in the same columns as every other flag, with its value; durations take hours.
    const help = String(log.mock.calls[0]![0]);
    const column = (flag: string) =>
      help
        .split('\n')
        .find((l) => l.startsWith(`  ${flag}`))!
        .search(/ {2}[A-Z]/);
    expect(column('--config FILE')).toBe(column('--port INT'));
    expect(help).toContain('500ms, 2s, 1m, 1h');
    await main(['--prefix-window', 'x'], {});
    expect(process.exitCode).toBe(1);
    expect(err.mock.calls[0]![0]).toContain('--prefix-window: expected a number');
  });

  it('the image defaults (KVROUTE_DEFAULT_HOST/PORT) give way to a config file, a flag and the environment', async () => {
    const defaults = { KVROUTE_DEFAULT_HOST: '0.0.0.0', KVROUTE_DEFAULT_PORT: '30000' };
    const file = (text: string) => () => text;
    expect(withImageDefaults([], defaults, file(''))).toMatchObject({
      KVROUTE_HOST: '0.0.0.0',
      KVROUTE_PORT: '30000',
    });
    const env = withImageDefaults(['--config', 'r.yaml'], defaults, file('host: 127.0.0.1\n'));
    expect(env.KVROUTE_HOST).toBeUndefined();
    expect(env.KVROUTE_PORT).toBe('30000');
    const flags = withImageDefaults(['--port=8080'], { ...defaults, KVROUTE_HOST: '::' });
    expect(flags.KVROUTE_HOST).toBe('::');
    expect(flags.KVROUTE_PORT).toBeUndefined();
    // The whole start: the file's host and port win over the image's defaults.
    const dir = mkdtempSync(join(tmpdir(), 'kvroute-cfg-'));
    const cfg = join(dir, 'router.yaml');
    writeFileSync(cfg, 'host: 127.0.0.1\nport: 0\nmock-workers: 1\nlog-level: silent\n');
    const running = await startRouter(['--config', cfg, '--mock-time-scale', '0'], defaults);
    try {
      expect(running.config.host).toBe('127.0.0.1');
      expect(running.config.port).toBe(0);
    } finally {
      await running.close(50);
    }
  });

  it('reports a failed start as a JSON log line when logs are JSON, plain text when pretty', async () => {
    const err = vi.spyOn(console, 'error').mockImplementation(() => {});
    const line = (i: number) => String(err.mock.calls[i]![0]);
    // A config error, the format from the environment (the chart's KVROUTE_LOG_FORMAT).
    await main(['--prefix-window', 'x'], { KVROUTE_LOG_FORMAT: 'json' });
    expect(JSON.parse(line(0))).toMatchObject({
      level: 60,
      msg: expect.stringContaining('--prefix-window: expected a number'),
    });
    // A start that fails after the config resolved: the trace file cannot be opened.
    const argv = ['--mock-workers', '1', '--port', '0', '--log-level', 'silent'];
    await main([...argv, '--log-format', 'json', '--record-trace', '/nonexistent/dir/t.jsonl'], {});
    expect(process.exitCode).toBe(1);
    expect(JSON.parse(line(1))).toMatchObject({
      level: 60,
      msg: expect.stringMatching(/^kvroute-router: record trace \/nonexistent\/dir\/t\.jsonl/),
    });
    await main(['--prefix-window=x', '--log-format=pretty'], { KVROUTE_LOG_FORMAT: 'json' });
    expect(line(2)).toMatch(/^kvroute-router: --prefix-window: expected a number/);
  });
});
