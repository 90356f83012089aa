// scale-out: the agentic session workload on 8 ranks that become 12 mid-run, the new ranks
// cold. Shows how many live sessions each method re-homes when the rank count
// changes: prefix_match's modulo moves about 2/3 of keys (a key stays only when
// h mod 8 == h mod 12), consistent hashing about the new ranks' share (4/12), and cache-aware
// routing only what load pushes over.
import { agentic } from './agentic.ts';
import { optInt, optNum } from './options.ts';
import { agenticOptions, CLUSTER_CHANGE_SESSIONS, lastSessionStartMs } from './rank-failure.ts';
import type { ScenarioDefinition } from './types.ts';

export const scaleOut: ScenarioDefinition = {
  name: 'scale-out',
  description: 'agentic sessions; 8 ranks become 12 mid-run (new ranks start cold)',
  defaults: {
    ...CLUSTER_CHANGE_SESSIONS,
    ranks: 8,
    toRanks: 12,
    /** Fraction of the session-arrival span. */
    at: 0.5,
  },
  build(o, seed) {
    const name = 'scale-out';
    const plan = agentic.build(agenticOptions(o), seed);
    const toRanks = optInt(name, o, 'toRanks', 1);
    const at = optNum(name, o, 'at', 0);
    const atMs = Math.round(lastSessionStartMs(plan) * at);
    return { ...plan, scenario: name, events: [{ atMs, kind: 'set-ranks', ranks: toRanks }] };
  },
};
