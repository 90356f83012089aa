// The router config a sweep writes loads in the router through its own config loader, and the
// router then runs exactly the setting the simulator ran: same method, same options, same
// affinity. Checked for a real sweep's winner and for every option of every registered method.

import { methodNames, methodOptionSchema } from '@kvroute/policy';
import { dispatcherConfig, resolveConfig } from '@kvroute/router';
import { routerConfigYaml } from '@kvroute/sim/cli';
import { describe, expect, it } from 'vitest';
import { runSimCli } from '../packages/sim/test/helpers/cli.ts';

const WORKERS = ['--worker-urls', 'http://127.0.0.1:1,http://127.0.0.1:2'];

function load(yaml: string) {
  return resolveConfig(['--config', 'sweep.yaml', ...WORKERS], {}, (path) => {
    expect(path).toBe('sweep.yaml');
    return yaml;
  });
}

const sim = (args: string[]) => runSimCli(args);

describe("a sweep's router config", () => {
  it("loads in the router and configures the winner's method, options and affinity", async () => {
    const r = await sim([
      'sweep',
      '--scenario',
      'agentic',
      '--ranks',
      '4',
      '--set',
      'sessions=6',
      '--policy',
      'cache_aware,consistent_hash',
      '--window',
      '64,256',
      '--max-prefix-tokens',
      '8192',
      '--option',
      'load=requests',
      '--affinity',
      'routing_key:maxEntries=1000:ttlMs=60000',
      '--jobs',
      '1',
      '--json',
      '-',
    ]);
    expect(r.code, r.stderr).toBe(0);
    const report = JSON.parse(r.stdout);
    const cfg = load(report.routerConfig);
    expect(cfg.loadBalanceMethod).toBe(report.best.method);
    expect(dispatcherConfig(cfg)).toEqual({
      method: report.best.method,
      ...report.best.options,
      affinity: { kind: 'routing_key', maxEntries: 1000, ttlMs: 60000 },
    });
    // What the simulator ran for that cell is the same config.
    const cell = report.grid.find(
      (c: { method: string; options: object }) =>
        c.method === report.best.method &&
        JSON.stringify(c.options) === JSON.stringify(report.best.options),
    );
    expect(cell.result.options).toEqual({
      ...report.best.options,
      affinity: { kind: 'routing_key', maxEntries: 1000, ttlMs: 60000 },
    });
  }, 300_000);

  it('spells every option of every registered method as the router reads it', () => {
    for (const method of methodNames()) {
      const schema = methodOptionSchema(method);
      const options: Record<string, number | string> = {};
      for (const [name, spec] of Object.entries(schema)) {
        // A non-default value, so a key the router ignored would show.
        options[name] =
          spec.type === 'enum'
            ? (spec.choices[spec.choices.length - 1] as string)
            : spec.type === 'int'
              ? spec.default + 1
              : spec.default + 0.5;
      }
      // The prefix caps must stay at least the window.
      for (const cap of ['prefixLength', 'maxPrefixTokens', 'capacityTokens']) {
        if (typeof options[cap] === 'number' && typeof options.window === 'number') {
          options[cap] = Math.max(options[cap] as number, options.window as number);
        }
      }
      const cfg = load(routerConfigYaml({ method, options }, undefined, ['a comment']));
      expect(dispatcherConfig(cfg), method).toEqual({ method, ...options });
    }
  });
});
