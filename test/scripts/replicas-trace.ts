// Where router replicas lose hit rate against one router, request by request: runs the
// replicas e2e (helpers/replicas.ts) with a per-request trace (which replica, which rank, the
// router's reason, cached tokens) and a record of when each worker published each block, then
// attributes every token one router would have reused and this setup did not.
// Run: pnpm --filter @kvroute/e2e replicas:trace [-- --setups 1:learned,3:events --out FILE
//        --router-args='--cold-pick least-load']   (extra flags for every router process)
import { writeFileSync } from 'node:fs';
import { resolve } from 'node:path';
import { parseArgs } from 'node:util';
import { approximateTokenIds } from '@kvroute/protocol';
import {
  DEFAULT_WORKLOAD,
  EVENT_BLOCK_SIZE,
  type IndexSource,
  runReplicas,
  sessionsOf,
  startEventWorkers,
  turnPrompts,
} from '../helpers/replicas.ts';
import { analyseTrace, formatAnalysis } from '../helpers/replicas-trace.ts';

const { values } = parseArgs({
  args: process.argv.slice(2).filter((a, i) => !(i === 0 && a === '--')),
  options: {
    setups: { type: 'string', default: '1:learned,3:learned,3:events' },
    out: { type: 'string' },
    'router-args': { type: 'string', default: '' },
  },
});
const setups = (values.setups as string).split(',').map((s) => {
  const [n, source] = s.split(':');
  const replicas = Number(n);
  if (
    !Number.isInteger(replicas) ||
    replicas < 1 ||
    (source !== 'learned' && source !== 'events')
  ) {
    throw new Error(`--setups: expected REPLICAS:learned|events, got ${JSON.stringify(s)}`);
  }
  return { replicas, source: source as IndexSource };
});

const w = await startEventWorkers();
const BS = EVENT_BLOCK_SIZE;

const prompts = new Map<string, Uint32Array>();
for (const s of sessionsOf(DEFAULT_WORKLOAD)) {
  turnPrompts(s, DEFAULT_WORKLOAD).forEach((text, turn) => {
    prompts.set(`${s.id}:${turn}`, approximateTokenIds(text));
  });
}

const out: unknown[] = [];
try {
  for (const { replicas, source } of setups) {
    const r = await runReplicas(w, replicas, source, DEFAULT_WORKLOAD, {
      trace: true,
      routerArgs: (values['router-args'] as string).split(' ').filter((a) => a !== ''),
    });
    const a = analyseTrace(r.trace ?? [], prompts, w.published, BS, DEFAULT_WORKLOAD);
    console.log(
      `\n## ${r.label}: hit rate ${(100 * r.hitRate).toFixed(1)}%, mean event lag ${r.eventLagMs.toFixed(1)} ms`,
    );
    console.log(
      `timing: send -> store ${r.sendToStoreMs.toFixed(1)} ms, store -> answer ${r.storeToAnswerMs.toFixed(1)} ms (mean TTFT ${r.ttftMeanMs.toFixed(1)} ms)`,
    );
    console.log(formatAnalysis(a));
    out.push({
      label: r.label,
      hitRate: r.hitRate,
      eventLagMs: r.eventLagMs,
      analysis: a,
      trace: r.trace,
    });
  }
} finally {
  await w.close();
}
if (values.out !== undefined) {
  const file = resolve(process.env.INIT_CWD ?? process.cwd(), values.out);
  writeFileSync(file, `${JSON.stringify(out)}\n`);
  console.log(`trace written to ${file}`);
}
