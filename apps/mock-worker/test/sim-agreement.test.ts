// The worker must be the simulator in real time: the same request sequence through the HTTP
// surface and through @kvroute/sim's RankModel on its own event queue gives the same
// cached_tokens, request by request. (Sequential requests, so batching cannot differ.)
import { EventQueue, getProfile, RankModel } from '@kvroute/sim/model';
import { afterEach, describe, expect, it } from 'vitest';
import { fillerTokenId, promptSeed } from '../src/filler.ts';
import { closeAll, post, worker } from './helpers.ts';

/** Agent-like sessions: a shared system prefix, each turn extending its session's history. */
function requests(): number[][] {
  let x = 12345;
  const rnd = (n: number) => {
    x = (Math.imul(x, 1103515245) + 12345) >>> 0;
    return 1 + (x % n);
  };
  const system = Array.from({ length: 300 }, () => rnd(30000));
  const sessions = Array.from({ length: 4 }, () => [...system]);
  const out: number[][] = [];
  for (let turn = 0; turn < 5; turn++) {
    for (const s of sessions) {
      for (let i = 0, n = 20 + rnd(80); i < n; i++) s.push(rnd(30000));
      out.push([...s]);
    }
  }
  return out;
}

afterEach(closeAll);

describe('mock worker vs @kvroute/sim', () => {
  it('cached_tokens match the RankModel request by request (small KV pool, with eviction)', async () => {
    const kvCapacity = 1200; // small enough that LRU eviction happens
    const seq = requests();
    const app = worker({ kvCapacity, pageSize: 4 });
    const viaHttp: number[] = [];
    for (const ids of seq) {
      const r = await post(app, '/generate', {
        input_ids: ids,
        sampling_params: { max_new_tokens: 8 },
      });
      viaHttp.push(r.body.meta_info.cached_tokens);
    }

    const q = new EventQueue();
    const rank = new RankModel({
      rank: 0,
      profile: getProfile('h200-llama-3.1-8b'),
      scheduler: q,
      kvCapacityTokens: kvCapacity,
      pageSize: 4,
    });
    const viaSim: number[] = [];
    seq.forEach((ids, i) => {
      // The worker caches a token-id prompt's reply with it, as SGLang does: the filler ids it
      // returns, which the simulator is told as the request's output.
      const seed = promptSeed(ids);
      rank.submit({
        id: i,
        inputIds: ids,
        maxNewTokens: 8,
        outputIds: Array.from({ length: 8 }, (_, k) => fillerTokenId(seed, k)),
        onFinish: (_t, info) => viaSim.push(info.cachedTokens),
      });
      q.run();
    });

    expect(viaHttp).toEqual(viaSim);
    expect(viaSim.filter((c) => c > 0).length).toBeGreaterThan(10);
    expect(rank.stats().evictedTokens).toBeGreaterThan(0);
  });
});
