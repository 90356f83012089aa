import { afterEach, describe, expect, it, vi } from 'vitest';
import { main, startRouter } from '../src/cli.ts';

afterEach(() => {
  vi.restoreAllMocks();
  process.exitCode = undefined;
});

describe('kvroute-router CLI', () => {
  it('--mock-workers N starts N loopback workers behind the router and logs the effective config', async () => {
    const running = await startRouter(
      [
        '--mock-workers',
        '2',
        '--mock-time-scale',
        '0',
        '--port',
        '0',
        '--log-level',
        'silent',
        '--admin-token',
        'abc',
      ],
      {},
    );
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
    const running = await startRouter(
      [
        '--mock-workers',
        '2',
        '--mock-dp-size',
        '2',
        '--dp-aware',
        '--mock-time-scale',
        '0',
        '--port',
        '0',
        '--log-level',
        'silent',
      ],
      {},
    );
    try {
      expect(running.app.kvroute.table.info().map((r) => r.dpRank)).toEqual([0, 1, 0, 1]);
    } finally {
      await running.close();
    }
  });

  it('prints help, and a config error exits 1 with the message', async () => {
    const log = vi.spyOn(console, 'log').mockImplementation(() => {});
    const err = vi.spyOn(console, 'error').mockImplementation(() => {});
    await main(['--help'], {});
    expect(log.mock.calls[0]![0]).toContain('--load-balance-method');
    await main(['--prefix-window', 'x'], {});
    expect(process.exitCode).toBe(1);
    expect(err.mock.calls[0]![0]).toContain('--prefix-window: expected a number');
  });
});
