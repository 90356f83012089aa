// (a) Under prefix_match an agent's turns land on one rank, and the hit rate the workers report
// (cached_tokens) matches what @kvroute/sim predicts for the same request sequence: the same
// policy config driving the same RankModel (profile, KV capacity, chunked prefill) in
// simulated time.
import { createDispatcher, createLoadTracker } from '@kvroute/policy';
import { dispatcherConfig, resolveConfig } from '@kvroute/router';
import { EventQueue, RankModel } from '@kvroute/sim/model';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type Cluster, getText, postJson, startCluster, sumMetric } from './helpers/cluster.ts';

const RANKS = 4;
const AGENTS = 10;
const TURNS = 5;
const ROUTER_ARGS = [
  '--load-balance-method',
  'prefix_match',
  '--prefix-window',
  '64',
  '--prefix-length',
  '256',
];
// Small KV pools so agents sharing a rank evict each other: the prediction has to model LRU
// eviction, not just count shared prefixes.
const KV_CAPACITY = 2500;

interface Turn {
  agent: number;
  inputIds: number[];
  maxNewTokens: number;
}

/** Deterministic agent sessions: a per-agent system+tools prefix, then growing turns. */
function agentTurns(): Turn[] {
  let s = 12345;
  const rand = (): number => {
    s = (Math.imul(s, 1103515245) + 12345) >>> 0;
    return s;
  };
  const ids = (n: number): number[] => Array.from({ length: n }, () => 1 + (rand() % 29999));
  const history = Array.from({ length: AGENTS }, () => ids(300 + (rand() % 200)));
  const turns: Turn[] = [];
  for (let t = 0; t < TURNS; t++) {
    for (let a = 0; a < AGENTS; a++) {
      history[a] = [...history[a]!, ...ids(30 + (rand() % 50))];
      turns.push({ agent: a, inputIds: [...history[a]!], maxNewTokens: 8 });
    }
  }
  return turns;
}

let cluster: Cluster;
beforeAll(async () => {
  cluster = await startCluster({
    workers: RANKS,
    worker: { kvCapacity: KV_CAPACITY },
    routerArgs: ROUTER_ARGS,
  });
});
afterAll(async () => {
  await cluster?.close();
});

function predict(turns: Turn[]): { ranks: number[]; cached: number; prompt: number } {
  const engine = cluster.workers[0]!.app.mockEngine;
  const queue = new EventQueue();
  const models = Array.from(
    { length: RANKS },
    (_, rank) =>
      new RankModel({
        rank,
        profile: engine.profile,
        scheduler: queue,
        kvCapacityTokens: engine.kvCapacity,
        chunkedPrefillSize: engine.chunkedPrefillSize,
        pageSize: cluster.workers[0]!.app.mockOptions.pageSize,
      }),
  );
  const dispatcher = createDispatcher(
    dispatcherConfig(resolveConfig(['--worker-urls', 'http://x:1', ...ROUTER_ARGS])),
  );
  const tracker = createLoadTracker(RANKS);
  const ranks: number[] = [];
  let cached = 0;
  let prompt = 0;
  turns.forEach((turn, id) => {
    const decision = dispatcher.begin(
      { inputIds: turn.inputIds, maxNewTokens: turn.maxNewTokens },
      tracker,
    );
    models[decision.rank]!.submit({
      id,
      inputIds: Uint32Array.from(turn.inputIds),
      maxNewTokens: turn.maxNewTokens,
      onFinish: (_t, info) => {
        cached += info.cachedTokens;
        prompt += turn.inputIds.length;
        decision.done();
      },
    });
    // One client, closed loop: the next turn starts after this one finished.
    queue.run();
    ranks.push(decision.rank);
  });
  return { ranks, cached, prompt };
}

describe('prefix_match end to end', () => {
  it('keeps each agent on one rank and matches the simulator hit rate within 2 points', async () => {
    const turns = agentTurns();
    const observedRanks: number[] = [];
    let cached = 0;
    let prompt = 0;
    for (const turn of turns) {
      const res = await postJson(`${cluster.url}/generate`, {
        input_ids: turn.inputIds,
        sampling_params: { max_new_tokens: turn.maxNewTokens },
      });
      expect(res.status).toBe(200);
      observedRanks.push(Number(res.headers['x-kvroute-rank']));
      expect(res.headers['x-kvroute-reason']).toBe('prefix-hash');
      cached += res.body.meta_info.cached_tokens;
      prompt += res.body.meta_info.prompt_tokens;
    }

    const rankOfAgent = new Map<number, Set<number>>();
    turns.forEach((t, i) => {
      const set = rankOfAgent.get(t.agent) ?? new Set<number>();
      set.add(observedRanks[i]!);
      rankOfAgent.set(t.agent, set);
    });
    for (const set of rankOfAgent.values()) expect(set.size).toBe(1);
    // Ten agents over four ranks: more than one rank is used (the test is not trivially 100%).
    expect(new Set(observedRanks).size).toBeGreaterThan(1);

    const predicted = predict(turns);
    expect(observedRanks).toEqual(predicted.ranks);
    expect(prompt).toBe(predicted.prompt);
    const observedRate = cached / prompt;
    const predictedRate = predicted.cached / predicted.prompt;
    console.info(
      `prefix_match e2e: observed hit rate ${(observedRate * 100).toFixed(2)}%, sim predicted ${(predictedRate * 100).toFixed(2)}%`,
    );
    expect(observedRate).toBeGreaterThan(0.3);
    expect(Math.abs(observedRate - predictedRate)).toBeLessThanOrEqual(0.02);

    // The router's own metrics saw the same worker-reported tokens (the hit rate operators read).
    const metrics = (await getText(`${cluster.url}/metrics`)).text;
    expect(sumMetric(metrics, 'kvroute_router_cached_tokens_total')).toBe(cached);
    expect(sumMetric(metrics, 'kvroute_router_prompt_tokens_total')).toBe(prompt);
  });
});
