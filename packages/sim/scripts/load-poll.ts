// What the router replicas' load poll is worth, and what its staleness costs: the agentic
// scenario through 3 router replicas (requests spread round-robin) while each replica polls
// the ranks' request counts every P ms (the router's --load-poll-interval) and adds the
// others' requests, as of its last poll, to its own. Against one router (sees everything)
// and replicas that never poll (each sees a third of the load).
// Run: pnpm --filter @kvroute/sim load-poll [-- --ranks 8 --sessions-per-s 2 --seeds 1,2,3]
import { parseArgs } from 'node:util';
import { getProfile } from '../src/cost/profiles.ts';
import { simulatePlan } from '../src/simulate.ts';
import { buildWorkload } from '../src/workloads/registry.ts';

const { values } = parseArgs({
  args: process.argv.slice(2).filter((a, i) => !(i === 0 && a === '--')),
  options: {
    ranks: { type: 'string', default: '8' },
    sessions: { type: 'string', default: '200' },
    'sessions-per-s': { type: 'string', default: '2' },
    replicas: { type: 'string', default: '3' },
    seeds: { type: 'string', default: '1,2,3' },
    policies: { type: 'string', default: 'total_requests,cache_aware' },
    polls: { type: 'string', default: '2000,500,100,20,0' },
  },
});
function num(name: string, raw: string | undefined, min: number): number {
  const n = Number(raw);
  if (raw === undefined || raw.trim() === '' || !Number.isFinite(n) || n < min) {
    throw new Error(`--${name} must be a number >= ${min}, got "${raw}"`);
  }
  return n;
}
const ranks = num('ranks', values.ranks, 1);
const replicas = num('replicas', values.replicas, 2);
const options = {
  sessions: num('sessions', values.sessions, 1),
  sessionsPerS: num('sessions-per-s', values['sessions-per-s'], 0.001),
  ranks,
};
const seeds = (values.seeds as string).split(',');
const polls = (values.polls as string).split(',').map((x) => num('polls', x, 0));
const profile = getProfile('h200-llama-3.1-8b');
const plans = seeds.map((seed) => ({ seed, plan: buildWorkload('agentic', options, seed) }));

const rows: string[] = [
  '| policy | routers | load poll | hit rate | TTFT p50 | TTFT p99 | queueing p99 | imbalance |',
  '| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |',
];
for (const method of (values.policies as string).split(',')) {
  // Means over the seeds: one seed's p99 is a handful of requests.
  const run = (label: string, poll: string, o: { replicas?: number; loadPollMs?: number }) => {
    const m = { hit: 0, p50: 0, p99: 0, q99: 0, imb: 0 };
    for (const { seed, plan } of plans) {
      const s = simulatePlan(plan, { policy: { method }, profile, seed, ...o }).summary;
      m.hit += s.hitRate / plans.length;
      m.p50 += s.ttftMs.p50 / plans.length;
      m.p99 += s.ttftMs.p99 / plans.length;
      m.q99 += s.queueingMs.p99 / plans.length;
      m.imb += s.imbalance / plans.length;
    }
    rows.push(
      `| ${method} | ${label} | ${poll} | ${(100 * m.hit).toFixed(1)}% | ${m.p50.toFixed(0)} ms | ${m.p99.toFixed(0)} ms | ${m.q99.toFixed(0)} ms | ${m.imb.toFixed(2)} |`,
    );
  };
  run('1', '-', {});
  run(String(replicas), 'none', { replicas });
  for (const p of polls) {
    run(String(replicas), p === 0 ? 'live' : `${p} ms`, { replicas, loadPollMs: p });
  }
}
console.log(
  `load poll staleness: agentic (${options.sessions} sessions, ${options.sessionsPerS}/s), ${ranks} ranks, h200-llama-3.1-8b, mean of seeds ${seeds.join(', ')}; requests spread round-robin over the replicas, learned index`,
);
console.log(rows.join('\n'));
