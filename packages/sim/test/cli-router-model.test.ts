// The router-model flags (--replicas, --index-source, --event-lag-ms, --load-poll-ms) through
// run, sweep and replay: they change the simulation, the report says which were used, and
// bad values are errors naming the flag.
import { describe, expect, it } from 'vitest';
import { runSimCli } from './helpers/cli.ts';

const cli = (args: string[]) => runSimCli(args);

const AGENTIC = ['--scenario', 'agentic', '--ranks', '4', '--set', 'sessions=12'];

describe('router-model flags', () => {
  it('run: names the router model in the title and the JSON, and changes the result', async () => {
    const base = await cli(['run', ...AGENTIC, '--policies', 'cache_aware', '--json', '-']);
    const flags = ['--replicas', '3', '--index-source', 'events', '--event-lag-ms', '20'];
    const json = await cli([
      'run',
      ...AGENTIC,
      '--policies',
      'cache_aware',
      ...flags,
      '--json',
      '-',
    ]);
    expect(json.code).toBe(0);
    const a = JSON.parse(base.stdout);
    const b = JSON.parse(json.stdout);
    expect(a.router).toBeUndefined();
    expect(b.router).toEqual({ replicas: 3, indexSource: 'events', eventLagMs: 20 });
    expect(b.policies[0].events).not.toBe(a.policies[0].events);
    const table = await cli([
      'run',
      ...AGENTIC,
      '--policies',
      'total_requests',
      '--replicas',
      '3',
      '--load-poll-ms',
      '100',
    ]);
    expect(table.stdout.split('\n')[0]).toBe(
      'scenario agentic, 4 ranks, profile h200-llama-3.1-8b, seed 1; 3 router replicas, index learned, load poll 100 ms',
    );
  });

  it('sweep and replay take them too', async () => {
    const grid = ['sweep', ...AGENTIC, '--window', '128', '--prefix-length', '4096', '--jobs', '1'];
    const sweep = await cli([...grid, '--replicas', '3', '--json', '-']);
    expect(sweep.code).toBe(0);
    const report = JSON.parse(sweep.stdout);
    expect(report.router).toEqual({ replicas: 3 });
    const plain = JSON.parse((await cli([...grid, '--json', '-'])).stdout);
    // The reference (cache_aware) learns per replica: three replicas lose hits.
    expect(report.reference.hitRate).toBeLessThan(plain.reference.hitRate);
    const replay = await cli([
      'replay',
      '../../packages/sim/data/traces/mooncake-conversation.jsonl',
      '--ranks',
      '4',
      '--set',
      'limit=40',
      '--policies',
      'cache_aware',
      '--replicas',
      '2',
      '--index-source',
      'oracle',
      '--json',
      '-',
    ]);
    expect(replay.stderr).toBe('');
    expect(JSON.parse(replay.stdout).router).toEqual({ replicas: 2, indexSource: 'oracle' });
  });

  it('rejects bad values naming the flag (exit 2)', async () => {
    for (const [flags, message] of [
      [['--replicas', '0'], /--replicas/],
      [['--index-source', 'psychic'], /index-source/],
      [['--event-lag-ms', '5'], /--event-lag-ms needs --index-source events/],
      [['--replicas', '3', '--load-poll-ms=-1'], /--load-poll-ms must be a number >= 0/],
      [['--load-poll-ms', '100'], /--load-poll-ms needs --replicas 2 or more/],
    ] as const) {
      const r = await cli(['run', ...AGENTIC, '--policies', 'cache_aware', ...flags]);
      expect(r.code, flags.join(' ')).toBe(2);
      expect(r.stderr).toMatch(message);
    }
  });
});
