// What a new user meets first: `pnpm router -- ...` (pnpm 12 passes the `--` through),
// --help that shows each flag's value type and default, and mock workers on known ports.
import { createServer } from 'node:net';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { main, startRouter } from '../src/cli.ts';
import { DEFAULT_CONFIG, helpText, parseArgs, resolveConfig } from '../src/config.ts';

afterEach(() => {
  vi.restoreAllMocks();
  process.exitCode = undefined;
});

/** A port nobody listens on now (bound then released). */
async function freePortRange(n: number): Promise<number> {
  for (let attempt = 0; attempt < 20; attempt++) {
    const base = 20000 + Math.floor(Math.random() * 30000);
    const ok = await Promise.all(
      Array.from({ length: n }, (_, i) => {
        return new Promise<boolean>((resolve) => {
          const s = createServer();
          s.once('error', () => resolve(false));
          s.listen(base + i, '127.0.0.1', () => s.close(() => resolve(true)));
        });
      }),
    );
    if (ok.every(Boolean)) return base;
  }
  throw new Error('no free port range found in 20 tries');
}

describe('router CLI usability', () => {
  it('accepts the leading -- that `pnpm router -- --flags` passes', () => {
    const cfg = resolveConfig(['--', '--port', '8123', '--mock-workers', '1'], {});
    expect(cfg.port).toBe(8123);
    expect(parseArgs(['--', '--port', '1']).values.size).toBe(1);
    // Only a leading one: a later bare -- is still an error.
    expect(() => parseArgs(['--port', '1', '--'])).toThrow(/unknown flag --/);
  });

  it('--help shows value types and defaults', async () => {
    const text = helpText();
    expect(text).toMatch(/--port INT\s+.*\(default 30000\)/);
    expect(text).toMatch(/--worker-urls A B \.\.\.\s/);
    expect(text).toMatch(/--request-timeout-ms DURATION\s+.*\(default 1800000ms\)/);
    expect(text).toMatch(/--request-timeout-secs NUM\s+.*\(default 1800\)/);
    expect(text).toMatch(
      /--log-level fatal\|error\|warn\|info\|debug\|trace\|silent\s+.*\(default info\)/,
    );
    expect(text).toMatch(/--mock-base-port INT\s/);
    expect(text).toContain(`(default ${DEFAULT_CONFIG.loadBalanceMethod})`);
    // And through main() after a leading --, as `pnpm router -- --help` runs it.
    const log = vi.spyOn(console, 'log').mockImplementation(() => {});
    await main(['--', '--help'], {});
    expect(log.mock.calls[0]?.[0]).toBe(text);
  });

  it('--mock-base-port puts the mock workers on consecutive known ports', async () => {
    const base = await freePortRange(2);
    const running = await startRouter(
      [
        '--',
        '--mock-workers',
        '2',
        '--mock-base-port',
        String(base),
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
      expect(running.config.workerUrls).toEqual([
        `http://127.0.0.1:${base}`,
        `http://127.0.0.1:${base + 1}`,
      ]);
      const info = await fetch(`http://127.0.0.1:${base + 1}/get_server_info`);
      expect(info.status).toBe(200);
    } finally {
      await running.close();
    }
    expect(() => resolveConfig(['--mock-workers', '3', '--mock-base-port', '65534'], {})).toThrow(
      /--mock-base-port 65534 leaves no room for 3 mock workers/,
    );
  });
});
