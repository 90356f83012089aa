// hot-prefix: many tenants, each with its own system prompt, with Zipf popularity so the top
// tenant sends at least 30% of the traffic. Open loop, Poisson arrivals, one
// request per user turn: tenant prompt + a unique user message. The case prefix_match gets
// wrong: every request of the hot tenant hashes to one rank, which drowns while the others
// idle. A load-aware method should copy the hot prompt onto just enough ranks.
//
// Defaults: 20 tenants at Zipf 1.2 put ~35% of requests on the top tenant; 60 requests/s on
// 16 ranks of h200-llama-3.1-8b is more than one rank can prefill and decode for that
// tenant alone (~21 requests/s of 2-8k-token prompts), while the cluster as a whole has room.
import { optInt, optNum, optPositive, optRange, WorkloadOptionError } from './options.ts';
import { concat, stream, zipfSampler } from './random.ts';
import type { ScenarioDefinition, WorkloadRequest } from './types.ts';

/** The share of the most popular of n Zipf(s) items. */
export function zipfTopShare(n: number, s: number): number {
  let sum = 0;
  for (let k = 0; k < n; k++) sum += 1 / (k + 1) ** s;
  return 1 / sum;
}

export const hotPrefix: ScenarioDefinition = {
  name: 'hot-prefix',
  description:
    'Zipf tenants (top one >= 30% of requests) with per-tenant system prompts + unique user turns, Poisson open loop',
  defaults: {
    ranks: 16,
    requests: 3600,
    ratePerS: 60,
    tenants: 20,
    zipfS: 1.2,
    prefixMinTokens: 2048,
    prefixMaxTokens: 8192,
    userMinTokens: 100,
    userMaxTokens: 1500,
    outputMinTokens: 32,
    outputMaxTokens: 256,
  },
  build(o, seed) {
    const name = 'hot-prefix';
    const ranks = optInt(name, o, 'ranks', 1);
    const count = optInt(name, o, 'requests', 1);
    const rate = optPositive(name, o, 'ratePerS');
    const tenants = optInt(name, o, 'tenants', 1);
    const zipfS = optNum(name, o, 'zipfS', 0);
    const [pMin, pMax] = optRange(name, o, 'prefixMinTokens', 'prefixMaxTokens', 1);
    const [uMin, uMax] = optRange(name, o, 'userMinTokens', 'userMaxTokens', 1);
    const [outMin, outMax] = optRange(name, o, 'outputMinTokens', 'outputMaxTokens', 1);
    if (tenants > 1 && zipfTopShare(tenants, zipfS) < 0.3) {
      throw new WorkloadOptionError(
        `${name}: the top tenant must send >= 30% of requests; with tenants=${tenants} and zipfS=${zipfS} it sends ${(zipfTopShare(tenants, zipfS) * 100).toFixed(1)}% (raise zipfS or lower tenants)`,
      );
    }
    const prefixes = stream(seed, `${name}:prefixes`);
    const prompts = Array.from({ length: tenants }, () =>
      prefixes.tokens(prefixes.int(pMin, pMax)),
    );
    const pick = zipfSampler(tenants, zipfS);
    const arrivals = stream(seed, `${name}:arrivals`);
    const content = stream(seed, `${name}:content`);
    const requests: WorkloadRequest[] = [];
    let t = 0;
    for (let id = 0; id < count; id++) {
      t += arrivals.exp(1000 / rate);
      const tenant = pick(arrivals());
      const user = content.tokens(content.int(uMin, uMax));
      requests.push({
        id,
        clientId: id,
        inputIds: concat([prompts[tenant]!, user]),
        outputTokens: content.int(outMin, outMax),
        arrivalMs: t,
        sessionKey: `tenant-${tenant}`,
        tenant: `tenant-${tenant}`,
      });
    }
    return { scenario: name, mode: 'open', ranks, clients: [], requests, events: [] };
  },
};
