// The PD flags as SGLang's router spells them: --prefill URL [BOOTSTRAP_PORT] (repeatable),
// --decode URL, --prefill-policy, --decode-policy, and their YAML form.
import { describe, expect, it } from 'vitest';
import { RouterConfigError, resolveConfig } from '../src/index.ts';
import { parsePrefillList } from '../src/pd/config.ts';

describe('PD config', () => {
  it('groups --prefill URL [PORT] and makes the prefill servers the main workers', () => {
    const cfg = resolveConfig([
      '--pd-disaggregation',
      '--prefill',
      'http://p1:30000',
      '8998',
      '--prefill',
      'http://p2:30000/',
      '--decode',
      'http://d1:30000',
      '--decode',
      'http://d2:30000',
      '--prefill-policy',
      'prefix_match',
    ]);
    expect(cfg.prefillWorkers).toEqual([
      { url: 'http://p1:30000', bootstrapPort: 8998 },
      { url: 'http://p2:30000' },
    ]);
    expect(cfg.workerUrls).toEqual(['http://p1:30000', 'http://p2:30000']);
    expect(cfg.decode).toEqual(['http://d1:30000', 'http://d2:30000']);
    expect(cfg.loadBalanceMethod).toBe('prefix_match');
    expect(cfg.decodePolicy).toBe('total_tokens');
    expect(cfg.pdStyle).toBe('sglang');
    expect(cfg.pdRankDiscovery).toBe('told');
  });

  it('reads the same from YAML', () => {
    const yaml = [
      'pd-disaggregation: true',
      'prefill: ["http://p1:30000 8998", "http://p2:30000 none"]',
      'decode: [http://d1:30000]',
      'decode-policy: round_robin',
      'pd-style: vllm',
    ].join('\n');
    const cfg = resolveConfig(['--config', 'x.yaml'], {}, () => yaml);
    expect(cfg.prefillWorkers).toEqual([
      { url: 'http://p1:30000', bootstrapPort: 8998 },
      { url: 'http://p2:30000' },
    ]);
    expect(cfg.decodePolicy).toBe('round_robin');
    expect(cfg.pdStyle).toBe('vllm');
  });

  it('names what is wrong', () => {
    const bad = (argv: string[], msg: RegExp) => expect(() => resolveConfig(argv)).toThrow(msg);
    bad(['--prefill', 'http://p:1', '--decode', 'http://d:1'], /need --pd-disaggregation/);
    bad(
      ['--pd-disaggregation', '--prefill', 'http://p:1'],
      /at least one --prefill .* and one --decode/,
    );
    bad(
      [
        '--pd-disaggregation',
        '--prefill',
        'http://p:1',
        '--decode',
        'http://d:1',
        '--decode-policy',
        'cache_aware',
      ],
      /--decode-policy: must be a load method/,
    );
    bad(
      [
        '--pd-disaggregation',
        '--prefill',
        'http://p:1',
        '--decode',
        'http://d:1',
        '--prefill-policy',
        'nope',
      ],
      /--prefill-policy/,
    );
    bad(
      ['--pd-disaggregation', '--prefill', 'http://p:1', '--decode', 'http://p:1'],
      /listed twice/,
    );
    bad(
      [
        '--pd-disaggregation',
        '--worker-urls',
        'http://w:1',
        '--prefill',
        'http://p:1',
        '--decode',
        'http://d:1',
      ],
      /not --worker-urls/,
    );
    expect(() => parsePrefillList(['8998', 'http://p:1'])).toThrow(RouterConfigError);
    expect(() => parsePrefillList(['http://p:1', '8998', '8999'])).toThrow(/two bootstrap ports/);
    expect(() => parsePrefillList(['http://p:1', '70000'])).toThrow(/not in 1..65535/);
    expect(() => parsePrefillList(['ftp://p:1'])).toThrow(/http/);
  });
});
