import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { DEFAULT_CONFIG, helpText, OPTIONS, redactConfig, resolveConfig } from '../src/config.ts';
import { RouterConfigError } from '../src/errors.ts';
import { dispatcherConfig } from '../src/router.ts';

const W = ['--worker-urls', 'http://127.0.0.1:1'];

describe('resolveConfig', () => {
  it('reads SGLang-named flags, including space-separated worker URLs', () => {
    const cfg = resolveConfig([
      '--worker-urls',
      'http://a:1/',
      'http://b:2',
      '--load-balance-method',
      'round_robin',
      '--dp-cache-affinity',
      'routing_key',
      '--prefix-window',
      '128',
      '--prefix-length=2048',
      '--allow-rank-override',
      '--admin-token',
      's3cret',
      '--load-poll-interval',
      '2s',
      '--health-check-interval-secs',
      '3',
      '--health-failure-threshold',
      '5',
      '--request-timeout-ms',
      '1500',
      '--max-body-bytes',
      '1024',
      '--port',
      '0',
    ]);
    expect(cfg.workerUrls).toEqual(['http://a:1', 'http://b:2']);
    expect(cfg.loadBalanceMethod).toBe('round_robin');
    expect(cfg.dpCacheAffinity).toBe('routing_key');
    // --prefix-window is the router's older spelling of --window.
    expect(cfg.methodOptions).toEqual({ window: 128, prefixLength: 2048 });
    expect(cfg.allowRankOverride).toBe(true);
    expect(cfg.adminToken).toBe('s3cret');
    expect(cfg.loadPollIntervalMs).toBe(2000);
    expect(cfg.health.intervalMs).toBe(3000);
    expect(cfg.health.failureThreshold).toBe(5);
    expect(cfg.health.successThreshold).toBe(DEFAULT_CONFIG.health.successThreshold);
    expect(cfg.requestTimeoutMs).toBe(1500);
    expect(cfg.maxBodyBytes).toBe(1024);
    expect(cfg.port).toBe(0);
  });

  it('defaults: 32 MiB body limit, cache_aware (the recommended method), no admin routes, no rank override', () => {
    const cfg = resolveConfig(W);
    expect(cfg.maxBodyBytes).toBe(32 * 1024 * 1024);
    expect(cfg.loadBalanceMethod).toBe('cache_aware');
    expect(cfg.adminToken).toBeUndefined();
    expect(cfg.allowRankOverride).toBe(false);
  });

  it('layers YAML < env < flags', () => {
    const yaml = [
      'worker-urls: [http://y:1, http://y:2]',
      'load-balance-method: total_tokens',
      'prefix-window: 64',
      'health:',
      '  intervalMs: 700',
      'policy-option:',
      '  foo: 1',
    ].join('\n');
    const cfg = resolveConfig(
      ['--config', 'r.yaml', '--prefix-window', '32'],
      {
        KVROUTE_LOAD_BALANCE_METHOD: 'round_robin',
        KVROUTE_WINDOW: '48',
        KVROUTE_DP_AWARE: 'true',
      },
      (p) => {
        expect(p).toBe('r.yaml');
        return yaml;
      },
    );
    expect(cfg.workerUrls).toEqual(['http://y:1', 'http://y:2']);
    expect(cfg.loadBalanceMethod).toBe('round_robin');
    expect(cfg.methodOptions.window).toBe(32);
    expect(cfg.dpAware).toBe(true);
    expect(cfg.health.intervalMs).toBe(700);
    expect(cfg.policyOptions).toEqual({ foo: 1 });
  });

  it('env lists are comma or space separated', () => {
    const cfg = resolveConfig([], { KVROUTE_WORKER_URLS: 'http://a:1, http://b:2' });
    expect(cfg.workerUrls).toEqual(['http://a:1', 'http://b:2']);
  });

  it.each([
    [['--bogus', '1', ...W], /unknown flag --bogus/],
    [['--port', 'abc', ...W], /--port: expected a number/],
    [['--prefix-window', '1.5', ...W], /--prefix-window: expected an integer/],
    [['--window', '0x10', ...W], /--window: expected a number, got "0x10"/],
    [['--epsilon', 'Infinity', ...W], /--epsilon: expected a number/],
    [['--load', 'bytes', ...W], /--load: must be one of tokens, requests/],
    [['--policy-option', '__proto__=1', ...W], /invalid key "__proto__"/],
    [['--dp-cache-affinity', 'session', ...W], /--dp-cache-affinity: must be one of routing_key/],
    [['--worker-urls', 'notaurl'], /"notaurl" is not a URL/],
    [['--worker-urls', 'ftp://x'], /must be http/],
    [[], /no workers/],
    [['--dp-size', '2', ...W], /--dp-size only applies with --dp-aware/],
    [['--load-poll-interval', 'soon', ...W], /expected a duration/],
    [['--admin-token'], /--admin-token needs a value/],
  ])('rejects %j naming the problem', (argv, message) => {
    expect(() => resolveConfig(argv as string[])).toThrow(RouterConfigError);
    expect(() => resolveConfig(argv as string[])).toThrow(message);
  });

  it('rejects unknown YAML keys and bad env values', () => {
    expect(() => resolveConfig(['--config', 'x'], {}, () => 'worker-url: [http://a:1]')).toThrow(
      /unknown key "worker-url"/,
    );
    expect(() => resolveConfig(W, { KVROUTE_PORT: 'eighty' })).toThrow(
      /KVROUTE_PORT: expected a number/,
    );
  });

  it('never logs the admin token', () => {
    const cfg = resolveConfig([...W, '--admin-token', 'hunter2']);
    expect(JSON.stringify(redactConfig(cfg))).not.toContain('hunter2');
  });

  it('help lists every flag with its env var', () => {
    const help = helpText();
    for (const o of OPTIONS) expect(help).toContain(`--${o.flag}`);
    expect(help).toContain('KVROUTE_WORKER_URLS');
  });
});

describe('dispatcherConfig', () => {
  it('maps flags onto the policy config', () => {
    const cfg = resolveConfig([
      ...W,
      '--load-balance-method',
      'prefix_match',
      '--prefix-window',
      '64',
      '--prefix-length',
      '512',
      '--dp-cache-affinity',
      'routing_key',
      '--affinity-max-entries',
      '10',
    ]);
    expect(dispatcherConfig(cfg)).toEqual({
      method: 'prefix_match',
      window: 64,
      prefixLength: 512,
      affinity: { kind: 'routing_key', maxEntries: 10, ttlMs: 3_600_000 },
    });
  });
});

describe('README', () => {
  it('documents every flag with its env var', () => {
    const readme = readFileSync(new URL('../README.md', import.meta.url), 'utf8');
    for (const o of OPTIONS) {
      expect(readme).toContain(`\`--${o.flag}`);
      expect(readme).toContain(`\`KVROUTE_${o.flag.toUpperCase().replaceAll('-', '_')}\``);
    }
  });
});
