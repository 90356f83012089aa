import { afterEach, describe, expect, it } from 'vitest';
import { MockWorkerConfigError } from '../src/options.ts';
import { closeAll, post, textOfTokens, worker } from './helpers.ts';

afterEach(closeAll);

describe('internal DP dispatch', () => {
  it('round_robin (default) spreads requests over the ranks', async () => {
    const app = worker({ dpSize: 3 });
    const ranks: number[] = [];
    for (let i = 0; i < 6; i++) {
      const r = await post(app, '/generate', {
        text: `req ${i}`,
        sampling_params: { max_new_tokens: 1 },
      });
      ranks.push(r.body.meta_info.dp_rank);
      expect(r.res.headers['x-kvroute-dp-rank']).toBe(String(r.body.meta_info.dp_rank));
    }
    expect(ranks).toEqual([0, 1, 2, 0, 1, 2]);
  });

  it('honours routed_dp_rank (body) and X-Data-Parallel-Rank (header), and the cache is per rank', async () => {
    const app = worker({ dpSize: 4 });
    const text = textOfTokens(40);
    const a = await post(app, '/generate', { text, routed_dp_rank: 2 });
    expect(a.body.meta_info.dp_rank).toBe(2);
    const b = await post(app, '/generate', { text }, { 'x-data-parallel-rank': '2' });
    expect(b.body.meta_info).toMatchObject({ dp_rank: 2, cached_tokens: 39 });
    const c = await post(app, '/generate', { text, routed_dp_rank: 3 });
    expect(c.body.meta_info).toMatchObject({ dp_rank: 3, cached_tokens: 0 });
    // The header wins over the body field.
    const d = await post(
      app,
      '/v1/completions',
      { prompt: text, routed_dp_rank: 0 },
      { 'x-data-parallel-rank': '1' },
    );
    expect(d.res.headers['x-kvroute-dp-rank']).toBe('1');
  });

  it('prefix_match keeps a shared prefix on one rank, so cached_tokens grow', async () => {
    const app = worker({
      dpSize: 4,
      loadBalanceMethod: 'prefix_match',
      policyOptions: { window: 16 },
    });
    const system = textOfTokens(64, 'SYS:');
    const seen = new Set<number>();
    let cached = 0;
    for (let i = 0; i < 6; i++) {
      const r = await post(app, '/generate', {
        text: `${system}${String(i).repeat(8)}`,
        sampling_params: { max_new_tokens: 2 },
      });
      seen.add(r.body.meta_info.dp_rank);
      cached += r.body.meta_info.cached_tokens;
    }
    expect(seen.size).toBe(1);
    expect(cached).toBe(5 * 64);
    const info = (await app.inject('/get_server_info')).json();
    expect(info.load_balance_method).toBe('prefix_match');
  });

  it('routing_key affinity option reaches the dispatcher', async () => {
    const app = worker({ dpSize: 3, policyOptions: { affinity: 'routing_key' } });
    const ranks = new Set<number>();
    for (let i = 0; i < 4; i++) {
      const r = await post(app, '/generate', { text: `q${i}`, routing_key: 'session-7' });
      ranks.add(r.body.meta_info.dp_rank);
    }
    expect(ranks.size).toBe(1);
    expect(app.mockEngine.dispatcher.stats().affinity?.hits).toBe(3);
  });

  it('unknown method or profile fails at build time with the valid names', () => {
    expect(() => worker({ loadBalanceMethod: 'nope' })).toThrow(/valid methods: .*round_robin/);
    expect(() => worker({ profile: 'nope' })).toThrow(/valid profiles/);
    expect(() => worker({ dpSize: 0 })).toThrow(MockWorkerConfigError);
    expect(() => worker({ failRate: 2 })).toThrow(/failRate/);
  });
});

describe('fault knobs', () => {
  it('--fail-rate is seeded: same seed, same failures; roughly the rate', async () => {
    const pattern = async (seed: string) => {
      const app = worker({ failRate: 0.5, seed });
      const out: number[] = [];
      for (let i = 0; i < 40; i++)
        out.push(
          (await post(app, '/generate', { text: 'x', sampling_params: { max_new_tokens: 1 } }))
            .status,
        );
      return out;
    };
    const a = await pattern('s1');
    expect(await pattern('s1')).toEqual(a);
    expect(await pattern('s2')).not.toEqual(a);
    const failures = a.filter((s) => s === 500).length;
    expect(failures).toBeGreaterThan(8);
    expect(failures).toBeLessThan(32);
    expect(a.every((s) => s === 200 || s === 500)).toBe(true);
  });

  it('--fail-after N: requests after the Nth get 500 in OpenAI shape and /health turns 503', async () => {
    const app = worker({ failAfter: 2 });
    expect((await post(app, '/generate', { text: 'a' })).status).toBe(200);
    expect((await post(app, '/v1/completions', { prompt: 'b' })).status).toBe(200);
    expect((await app.inject('/health')).statusCode).toBe(200);
    const third = await post(app, '/v1/chat/completions', {
      messages: [{ role: 'user', content: 'c' }],
    });
    expect(third.status).toBe(500);
    expect(third.body.error).toMatchObject({ type: 'server_error', code: 'injected_failure' });
    expect(third.body.error.message).toContain('--fail-after');
    expect((await app.inject('/health')).statusCode).toBe(503);
    const metrics = (await app.inject('/metrics')).body;
    expect(metrics).toContain('kvroute_worker_injected_failures_total{reason="fail_after"} 1');
    expect(metrics).toContain('kvroute_worker_requests_total{endpoint="chat",status="500"} 1');
  });

  it('--slow-ms delays the start of a request by at least that long', async () => {
    const app = worker({ slowMs: 120 });
    const t0 = performance.now();
    const r = await post(app, '/generate', {
      text: 'slow',
      sampling_params: { max_new_tokens: 1 },
    });
    expect(r.status).toBe(200);
    expect(performance.now() - t0).toBeGreaterThanOrEqual(110);
  });
});
