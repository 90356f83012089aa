// Metrics of the PD mode, per role, registered beside the router's own. A pair's prefill and
// decode are observed apart so an operator sees which side is slow or failing:
//   kvroute_pd_requests_total{role,rank,status}      answers per side (status 'error' = no answer;
//                                                     a decode's 'prefill-failed' = given up because
//                                                     its prefill failed)
//   kvroute_pd_ttft_seconds{role}                     prefill: send to its whole answer (it
//                                                     generates one token); decode: send to first byte
//   kvroute_pd_transfer_wait_seconds                  prefill answer to decode first byte, streams
//                                                     only: the KV transfer plus the first decode
//                                                     step, as the router sees it
//   kvroute_pd_prefill_prompt_tokens_total{rank}      prefill side's prompt and cached tokens:
//   kvroute_pd_prefill_cached_tokens_total{rank}      hit rate = cached / prompt
//   kvroute_pd_prefill_without_cached_tokens_total    prefill answers that reported no cached count
//   kvroute_pd_pair_retries_total{side}               pairs retried, by the side that failed
//   kvroute_pd_decode_in_flight_requests{rank}        the decode side's load per rank (the
//   kvroute_pd_decode_in_flight_tokens{rank}          prefill side is the router's main table,
//   kvroute_pd_decode_rank_healthy{rank}              in kvroute_router_in_flight_* and
//                                                     kvroute_router_rank_healthy)
import { Counter, Gauge, Histogram, type Registry } from 'prom-client';
import type { RankInfo } from '../rank-table.ts';

export type PdRole = 'prefill' | 'decode';

const BUCKETS = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60];

/** `decodeRanks`: the decode table's ranks, read when metrics are scraped. */
export function createPdMetrics(
  registry: Registry,
  decodeRanks: () => readonly RankInfo[] = () => [],
) {
  const registers = [registry];
  const perRank = (name: string, help: string, value: (r: RankInfo) => number) =>
    new Gauge({
      name,
      help,
      labelNames: ['rank'] as const,
      registers,
      collect() {
        this.reset();
        for (const r of decodeRanks()) if (!r.removed) this.set({ rank: String(r.rank) }, value(r));
      },
    });
  perRank(
    'kvroute_pd_decode_in_flight_requests',
    'Requests sent to a decode rank and not yet finished',
    (r) => r.inFlightRequests,
  );
  perRank(
    'kvroute_pd_decode_in_flight_tokens',
    'Tokens (prompt + max new tokens) of in-flight requests per decode rank, as its policy sees them',
    (r) => r.inFlightTokens,
  );
  perRank(
    'kvroute_pd_decode_rank_healthy',
    '1 when the decode rank is routable, 0 when marked down or ejected',
    (r) => (r.healthy ? 1 : 0),
  );
  const requests = new Counter({
    name: 'kvroute_pd_requests_total',
    help: 'Requests sent to each side of a prefill/decode pair, by rank and answer status',
    labelNames: ['role', 'rank', 'status'] as const,
    registers,
  });
  const ttft = new Histogram({
    name: 'kvroute_pd_ttft_seconds',
    help: 'Prefill: send to its complete answer; decode: send to its first byte',
    labelNames: ['role'] as const,
    buckets: BUCKETS,
    registers,
  });
  const transferWait = new Histogram({
    name: 'kvroute_pd_transfer_wait_seconds',
    help: 'Streams: from the prefill answer to the decode first byte (KV transfer plus first step)',
    buckets: BUCKETS,
    registers,
  });
  const promptTokens = new Counter({
    name: 'kvroute_pd_prefill_prompt_tokens_total',
    help: 'Prompt tokens the prefill side reported, by prefill rank',
    labelNames: ['rank'] as const,
    registers,
  });
  const cachedTokens = new Counter({
    name: 'kvroute_pd_prefill_cached_tokens_total',
    help: 'Prompt tokens the prefill side found in its cache, by prefill rank',
    labelNames: ['rank'] as const,
    registers,
  });
  const withoutCached = new Counter({
    name: 'kvroute_pd_prefill_without_cached_tokens_total',
    help: 'Prefill answers without a cached token count (left out of the hit rate)',
    registers,
  });
  const retries = new Counter({
    name: 'kvroute_pd_pair_retries_total',
    help: 'Pairs retried before the client saw a byte, by the side that failed',
    labelNames: ['side'] as const,
    registers,
  });
  return { requests, ttft, transferWait, promptTokens, cachedTokens, withoutCached, retries };
}

export type PdMetrics = ReturnType<typeof createPdMetrics>;
