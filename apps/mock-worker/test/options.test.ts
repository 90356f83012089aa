import { describe, expect, it } from 'vitest';
import {
  DEFAULTS,
  MockWorkerConfigError,
  parseMockWorkerArgs,
  resolveOptions,
} from '../src/options.ts';

describe('CLI flags', () => {
  it('drops the leading -- that `pnpm start -- --dp-size 4` passes through', () => {
    expect(parseMockWorkerArgs(['--', '--dp-size', '4']).options.dpSize).toBe(4);
    // Only a leading one: a later -- is still an error (no positionals).
    expect(() => parseMockWorkerArgs(['--dp-size', '4', '--', 'x'])).toThrow(MockWorkerConfigError);
  });

  it('parses every flag into options', () => {
    const a = parseMockWorkerArgs([
      '--host',
      '0.0.0.0',
      '--port',
      '8080',
      '--dp-size',
      '4',
      '--load-balance-method',
      'prefix_match',
      '--policy-option',
      'window=64',
      '--policy-option',
      'affinity=routing_key',
      '--profile',
      'h200-llama-3.2-1b',
      '--profile-file',
      '/tmp/p.json',
      '--time-scale',
      '0.1',
      '--kv-capacity',
      '100000',
      '--page-size',
      '16',
      '--chunked-prefill-size',
      '4096',
      '--max-context',
      '8192',
      '--model-name',
      'm',
      '--tokenizer',
      '/tmp/tokenizer.json',
      '--fail-rate',
      '0.25',
      '--fail-after',
      '10',
      '--fail-mode',
      'reset',
      '--slow-ms',
      '50',
      '--seed',
      's',
      '--log',
    ]);
    expect(a.host).toBe('0.0.0.0');
    expect(a.port).toBe(8080);
    expect(a.help).toBe(false);
    expect(a.options).toEqual({
      dpSize: 4,
      loadBalanceMethod: 'prefix_match',
      policyOptions: { window: 64, affinity: 'routing_key' },
      profile: 'h200-llama-3.2-1b',
      profileFile: '/tmp/p.json',
      timeScale: 0.1,
      kvCapacity: 100000,
      pageSize: 16,
      chunkedPrefillSize: 4096,
      maxContext: 8192,
      modelName: 'm',
      tokenizer: '/tmp/tokenizer.json',
      failRate: 0.25,
      failAfter: 10,
      failMode: 'reset',
      slowMs: 50,
      seed: 's',
      logger: true,
    });
  });

  it('defaults: loopback, port 0, documented defaults', () => {
    const a = parseMockWorkerArgs([]);
    expect(a.host).toBe('127.0.0.1');
    expect(a.port).toBe(0);
    const r = resolveOptions(a.options);
    expect(r).toMatchObject({
      dpSize: DEFAULTS.dpSize,
      profile: 'h200-llama-3.1-8b',
      timeScale: 1,
      loadBalanceMethod: 'round_robin',
      pageSize: 1,
      failRate: 0,
      failMode: 'http500',
      slowMs: 0,
    });
    expect(r.failAfter).toBeUndefined();
    expect(parseMockWorkerArgs(['-h']).help).toBe(true);
  });

  it('clear errors naming the flag', () => {
    expect(() => parseMockWorkerArgs(['--time-scale', 'fast'])).toThrow(
      /--time-scale must be a number, got "fast"/,
    );
    expect(() => parseMockWorkerArgs(['--bogus'])).toThrow(MockWorkerConfigError);
    expect(() => parseMockWorkerArgs(['--policy-option', 'novalue'])).toThrow(/KEY=VALUE/);
    expect(() => parseMockWorkerArgs(['--port', '70000'])).toThrow(/--port/);
    expect(() => resolveOptions({ timeScale: -1 })).toThrow(/timeScale/);
    expect(() => resolveOptions({ failMode: 'explode' as never })).toThrow(/failMode/);
    expect(() => resolveOptions({ failAfter: 1.5 })).toThrow(/failAfter/);
    // The simulator's minimum: below it a prompt is prefilled a few tokens per step.
    expect(() => resolveOptions({ chunkedPrefillSize: 8 })).toThrow(
      'chunkedPrefillSize must be an integer >= 64, got 8',
    );
    expect(resolveOptions({ chunkedPrefillSize: 64 }).chunkedPrefillSize).toBe(64);
    // Names checked with the flags, so the command prints one line, not a stack trace.
    expect(() => resolveOptions({ profile: 'nope' })).toThrow(MockWorkerConfigError);
    expect(() => resolveOptions({ profile: 'nope' })).toThrow(
      /unknown profile "nope"; valid profiles: .*h200-llama-3.1-8b/,
    );
    expect(() => resolveOptions({ loadBalanceMethod: 'nope' })).toThrow(MockWorkerConfigError);
    expect(() => resolveOptions({ loadBalanceMethod: 'nope' })).toThrow(
      /valid methods: .*cache_aware/,
    );
  });
});
