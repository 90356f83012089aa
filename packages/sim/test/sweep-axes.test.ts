// Sweep axes come from the methods' option schemas: lists and ranges parsed strictly, values
// checked per method, grids per method, settings a method refuses left out with its error.
import { describe, expect, it } from 'vitest';
import { parseAxisValues, planSweep } from '../src/sweep/axes.ts';
import { routerConfigYaml } from '../src/sweep/router-config.ts';

describe('axis values', () => {
  it('reads lists and arithmetic, geometric and integer ranges', () => {
    expect(parseAxisValues('--w', '64, 128,256', 'int')).toEqual([64, 128, 256]);
    expect(parseAxisValues('--w', '64..1024:x2', 'int')).toEqual([64, 128, 256, 512, 1024]);
    expect(parseAxisValues('--w', '3..6', 'int')).toEqual([3, 4, 5, 6]);
    expect(parseAxisValues('--w', '0..10:+4', 'int')).toEqual([0, 4, 8]);
    // Float steps land on the decimals a user typed, end included.
    expect(parseAxisValues('--e', '0.1..0.5:0.1', 'number')).toEqual([0.1, 0.2, 0.3, 0.4, 0.5]);
    expect(parseAxisValues('--e', '0.25..2:x2', 'number')).toEqual([0.25, 0.5, 1, 2]);
    // Rounded integer steps that collide are kept once.
    expect(parseAxisValues('--w', '1..3:x1.2', 'int')).toEqual([1, 2, 3]);
    expect(parseAxisValues('--l', 'tokens,requests', 'enum')).toEqual(['tokens', 'requests']);
  });

  it('refuses what is not a clean list or range, naming the flag', () => {
    const bad: [string, 'int' | 'number' | 'enum', RegExp][] = [
      ['', 'int', /--x: empty list/],
      ['64,,128', 'int', /--x: empty item/],
      ['0x40', 'int', /--x: '0x40' is not a number/],
      ['Infinity', 'number', /not a number/],
      ['64,64', 'int', /--x: lists 64 twice/],
      ['8..4', 'int', /ends below its start/],
      ['0..1', 'number', /needs a step/],
      ['1..8:x1', 'int', /factor > 1/],
      ['0..8:x2', 'int', /start > 0/],
      ['1..8:0', 'int', /step must be > 0/],
      ['1..1e9', 'int', /more than 1000 values/],
      ['a..b:1', 'int', /range start must be a number/],
    ];
    for (const [raw, kind, msg] of bad) {
      expect(() => parseAxisValues('--x', raw, kind), raw).toThrow(msg);
    }
  });
});

describe('planSweep', () => {
  it('gives each method the product of the axes it reads, first axis fastest', () => {
    const grid = planSweep(
      ['prefix_match', 'round_robin'],
      new Map([
        ['prefixLength', '1024,4096'],
        ['window', '64,2048'],
      ]),
    );
    expect(grid.settings).toEqual([
      { method: 'prefix_match', options: { window: 64, prefixLength: 1024 } },
      { method: 'prefix_match', options: { window: 64, prefixLength: 4096 } },
      { method: 'prefix_match', options: { window: 2048, prefixLength: 4096 } },
      { method: 'round_robin', options: {} },
    ]);
    expect(grid.rejected.map((r) => r.options)).toEqual([{ window: 2048, prefixLength: 1024 }]);
    expect(grid.rejected[0]!.error).toMatch(/prefix_match/);
    expect(grid.axes.map((a) => [a.option, a.methods, a.source])).toEqual([
      ['window', ['prefix_match'], 'given'],
      ['prefixLength', ['prefix_match'], 'given'],
    ]);
  });

  it("fills a method no axis applies to from its schema's sweep values", () => {
    const grid = planSweep(['cache_aware', 'consistent_hash'], new Map([['prefixLength', '2048']]));
    // consistent_hash reads prefixLength: only the given axis. cache_aware does not: its
    // schema's window x epsilon grid.
    expect(grid.settings.filter((s) => s.method === 'consistent_hash')).toEqual([
      { method: 'consistent_hash', options: { prefixLength: 2048 } },
    ]);
    expect(grid.settings.filter((s) => s.method === 'cache_aware')).toHaveLength(16);
    expect(grid.axes.find((a) => a.option === 'epsilon')).toMatchObject({
      methods: ['cache_aware'],
      source: 'schema',
    });
  });

  it('checks each value against every reading method and names flag, method and range', () => {
    expect(() => planSweep(['consistent_hash'], new Map([['epsilon', '-0.5,1']]))).toThrow(
      /--epsilon -0\.5,1: consistent_hash: epsilon must be a number >= 0, got -0\.5/,
    );
    expect(() => planSweep(['round_robin'], new Map([['epsilon', '1']]))).toThrow(
      /--epsilon: no method in this sweep \(round_robin\) reads epsilon; methods that do: consistent_hash, cache_aware/,
    );
    expect(() => planSweep(['no_such'], new Map())).toThrow(/unknown method "no_such"/);
  });
});

describe('router config snippet', () => {
  it('uses the router flag names and quotes only what YAML would misread', () => {
    expect(
      routerConfigYaml(
        { method: 'consistent_hash', options: { prefixLength: 2048, load: 'requests' } },
        { kind: 'routing_key', maxEntries: 10, ttlMs: 0 },
        ['made by a test'],
      ),
    ).toBe(
      [
        '# made by a test',
        'load-balance-method: consistent_hash',
        'prefix-length: 2048',
        'load: requests',
        'dp-cache-affinity: routing_key',
        'affinity-max-entries: 10',
        '# affinity ran without a TTL (ttlMs=0); the router needs one: set affinity-ttl-ms',
        '',
      ].join('\n'),
    );
  });
});
