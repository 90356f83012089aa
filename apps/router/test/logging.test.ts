import { PassThrough } from 'node:stream';
import { describe, expect, it } from 'vitest';
import { resolveConfig } from '../src/config.ts';
import {
  formatPretty,
  loggerOptions,
  prettyStream,
  resolveLogFormat,
  startupMessage,
} from '../src/logging.ts';
import { buildRouter } from '../src/router.ts';

describe('log format', () => {
  it('auto is pretty on a terminal and JSON anywhere else; json and pretty are what they say', () => {
    expect(resolveLogFormat('auto', true)).toBe('pretty');
    expect(resolveLogFormat('auto', false)).toBe('json');
    expect(resolveLogFormat('json', true)).toBe('json');
    expect(resolveLogFormat('pretty', false)).toBe('pretty');
    expect(() => resolveConfig(['--mock-workers', '1', '--log-format', 'xml'])).toThrow(
      /--log-format/,
    );
  });

  it('a pino record reads as time, level, message and key=value fields', () => {
    const line = JSON.stringify({
      level: 40,
      time: Date.UTC(2026, 0, 2, 3, 4, 5, 678),
      pid: 1,
      hostname: 'h',
      msg: 'retrying on another rank',
      rank: 2,
      worker: 'http://w:1',
      err: { message: 'socket hang up', stack: 'long' },
    });
    expect(formatPretty(line)).toBe(
      '03:04:05.678 WARN  retrying on another rank  rank=2 worker=http://w:1 err=socket hang up',
    );
    expect(formatPretty('not json')).toBe('not json');
    const long = formatPretty(
      JSON.stringify({ level: 30, msg: 'm', config: { x: 'y'.repeat(500) } }),
    );
    expect(long.length).toBeLessThan(200);
    expect(long.endsWith('…')).toBe(true);
  });

  it('the pretty stream writes one readable line per record, across chunk boundaries', () => {
    const out = new PassThrough();
    let text = '';
    out.on('data', (d) => {
      text += d;
    });
    const s = prettyStream(out);
    const rec = `${JSON.stringify({ level: 30, time: 0, msg: 'one' })}\n${JSON.stringify({ level: 50, time: 0, msg: 'two' })}\n`;
    s.write(rec.slice(0, 10));
    s.write(rec.slice(10));
    expect(text).toBe('00:00:00.000 INFO  one\n00:00:00.000 ERROR two\n');
  });

  it('the router logs one startup line of its own, not fastify\'s "Server listening at"', async () => {
    const lines: string[] = [];
    const out = { write: (l: string) => lines.push(l) } as unknown as NodeJS.WritableStream;
    const opts = loggerOptions('info', 'json', out, false);
    const config = resolveConfig(['--worker-urls', 'http://127.0.0.1:9', '--port', '0']);
    const app = buildRouter(config, {
      logger: { ...opts, stream: out } as never,
    });
    try {
      await app.listen({ host: '127.0.0.1', port: 0 });
      app.log.info('kept');
      expect(lines.some((l) => l.includes('Server listening at'))).toBe(false);
      expect(lines.some((l) => l.includes('"msg":"kept"'))).toBe(true);
    } finally {
      await app.close();
    }
  });

  it('the startup line names the address, the method and where workers come from', () => {
    const withMocks = resolveConfig([
      '--mock-workers',
      '2',
      '--load-balance-method',
      'prefix_match',
    ]);
    // startRouter appends the mock workers' URLs before building.
    const cfg = { ...withMocks, workerUrls: ['http://127.0.0.1:1', 'http://127.0.0.1:2'] };
    expect(startupMessage('http://127.0.0.1:30000', cfg, 2, 2)).toBe(
      'kvroute-router listening on http://127.0.0.1:30000, method prefix_match, 2 ranks on 2 workers (2 mock), metrics on http://127.0.0.1:30000/metrics',
    );
    const discovery = resolveConfig([
      '--service-discovery',
      '--selector',
      'app=sglang',
      '--service-discovery-namespace',
      'llm',
      '--worker-urls',
      'http://a:1',
    ]);
    expect(startupMessage('http://0.0.0.0:30000', discovery, 1, 1)).toBe(
      'kvroute-router listening on http://0.0.0.0:30000, method cache_aware, 1 rank on 1 worker (1 from --worker-urls; Kubernetes discovery of pods app=sglang in llm, port 30000), metrics on http://0.0.0.0:30000/metrics',
    );
    // Workers listed under model groups are named as such, not as --worker-urls.
    const groups = resolveConfig([
      '--model-group',
      'llama=http://a:1,http://a:2',
      '--model-group',
      'qwen=http://b:1',
    ]);
    expect(startupMessage('http://127.0.0.1:30000', groups, 3, 3)).toContain(
      '3 ranks on 3 workers (3 from 2 --model-groups)',
    );
  });
});
