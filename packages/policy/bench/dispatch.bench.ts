// Decisions per second for every registered method, 16 ranks, 4,096- and 32,768-token inputs.
// Run: pnpm --filter @kvroute/policy bench   (env BENCH_MS=<ms per case>, default 400)
// Prints a table and writes bench/results.json. The host loop is included (LoadTracker
// onDispatch on every decision, onComplete 64 decisions later), as the sim and router run it.
import { writeFileSync } from 'node:fs';
import { cpus, loadavg } from 'node:os';
import { performance } from 'node:perf_hooks';
import {
  createDispatcher,
  createLoadTracker,
  type DispatcherConfig,
  methodNames,
  type RouteRequest,
} from '../src/index.ts';

const RANKS = 16;
const SIZES = [4096, 32_768];
const PROMPTS = 64;
const BENCH_MS = Number(process.env.BENCH_MS ?? 400);

/** Decisions/s each method must reach at each size (issue 2; issue 5 for the new methods). */
function targetFor(method: string, tokens: number): number | undefined {
  if (['round_robin', 'total_requests', 'total_tokens', 'follow_bootstrap_room'].includes(method)) {
    return 1_000_000;
  }
  if (method === 'prefix_match' && tokens === 4096) return 25_000;
  if ((method === 'consistent_hash' || method === 'cache_aware') && tokens === 4096) return 10_000;
  return undefined;
}

// Deterministic inputs: 8 shared system prefixes, each prompt = prefix + its own tail.
function makeRequests(tokens: number, asArray: boolean, withKeys: boolean): RouteRequest[] {
  let seed = 12345;
  const next = () => {
    seed = (Math.imul(seed, 1103515245) + 12345) >>> 0;
    return seed;
  };
  const prefixes = Array.from({ length: 8 }, () =>
    Uint32Array.from({ length: tokens / 2 }, () => 1 + (next() % 29_999)),
  );
  return Array.from({ length: PROMPTS }, (_, i) => {
    const ids = new Uint32Array(tokens);
    ids.set(prefixes[i % 8] as Uint32Array);
    for (let t = tokens / 2; t < tokens; t++) ids[t] = 1 + (next() % 29_999);
    const request: RouteRequest = {
      inputIds: asArray ? Array.from(ids) : ids,
      bootstrapRoom: next(),
    };
    if (withKeys) request.routingKey = `session-${i % 24}`;
    return request;
  });
}

interface Row {
  case: string;
  method: string;
  inputTokens: number;
  input: 'Uint32Array' | 'number[]';
  affinity: boolean;
  decisions: number;
  seconds: number;
  decisionsPerSec: number;
  usPerDecision: number;
  target?: number;
  met?: boolean;
}

function bench(config: DispatcherConfig, tokens: number, asArray: boolean, label: string): Row {
  const requests = makeRequests(tokens, asArray, config.affinity !== undefined);
  const dispatcher = createDispatcher(config);
  const tracker = createLoadTracker(RANKS, { kvCapacityTokens: 945_000 });
  const ring = new Int32Array(64).fill(-1);
  const cost = tokens + 256;
  let i = 0;
  const step = (budgetMs: number): [number, number] => {
    let count = 0;
    const start = performance.now();
    let now = start;
    while (now - start < budgetMs) {
      for (let k = 0; k < 64; k++, i++) {
        const request = requests[i % PROMPTS] as RouteRequest;
        const d = dispatcher.dispatch(request, tracker.ranks, { nowMs: i });
        tracker.onDispatch(d.rank, cost);
        const slot = i & 63;
        const old = ring[slot] as number;
        if (old >= 0) tracker.onComplete(old, cost);
        ring[slot] = d.rank;
      }
      count += 64;
      now = performance.now();
    }
    return [count, (now - start) / 1000];
  };
  step(Math.min(150, BENCH_MS / 2)); // warm up the JIT and stateful indexes
  const [decisions, seconds] = step(BENCH_MS);
  const rate = decisions / seconds;
  const target =
    config.affinity === undefined && !asArray ? targetFor(config.method, tokens) : undefined;
  const row: Row = {
    case: label,
    method: config.method,
    inputTokens: tokens,
    input: asArray ? 'number[]' : 'Uint32Array',
    affinity: config.affinity !== undefined,
    decisions,
    seconds: Number(seconds.toFixed(3)),
    decisionsPerSec: Math.round(rate),
    usPerDecision: Number((1e6 / rate).toFixed(3)),
  };
  if (target !== undefined) {
    row.target = target;
    row.met = rate >= target;
  }
  return row;
}

const loadBefore = loadavg();
const rows: Row[] = [];
for (const tokens of SIZES) {
  for (const method of methodNames()) rows.push(bench({ method }, tokens, false, method));
  rows.push(bench({ method: 'prefix_match' }, tokens, true, 'prefix_match (number[] input)'));
  rows.push(
    bench(
      { method: 'prefix_match', affinity: { kind: 'routing_key' } },
      tokens,
      false,
      'prefix_match + routing_key affinity',
    ),
  );
}
const loadAfter = loadavg();

const fmt = (n: number) => n.toLocaleString('en-US');
const header = ['case', 'tokens', 'decisions/s', 'us/decision', 'target', 'met'];
const table = rows.map((r) => [
  r.case,
  String(r.inputTokens),
  fmt(r.decisionsPerSec),
  r.usPerDecision.toFixed(3),
  r.target === undefined ? '' : fmt(r.target),
  r.met === undefined ? '' : r.met ? 'yes' : 'NO',
]);
const widths = header.map((h, c) =>
  Math.max(h.length, ...table.map((row) => (row[c] ?? '').length)),
);
const line = (cells: string[]) =>
  cells
    .map((cell, c) => (c === 0 ? cell.padEnd(widths[c] ?? 0) : cell.padStart(widths[c] ?? 0)))
    .join('  ');
console.log(`@kvroute/policy dispatch benchmark: ${RANKS} ranks, ${BENCH_MS} ms per case`);
console.log(
  `node ${process.version}, ${cpus().length} CPUs, load average ${loadBefore.map((l) => l.toFixed(2)).join(' ')}`,
);
console.log(line(header));
console.log(widths.map((w) => '-'.repeat(w)).join('  '));
for (const row of table) console.log(line(row));

const results = {
  generatedAt: new Date().toISOString(),
  node: process.version,
  cpus: cpus().length,
  cpuModel: cpus()[0]?.model,
  loadAverageBefore: loadBefore,
  loadAverageAfter: loadAfter,
  ranks: RANKS,
  msPerCase: BENCH_MS,
  note: 'Shared machine: figures vary with other load; host accounting (LoadTracker) is inside the loop.',
  results: rows,
};
writeFileSync(new URL('./results.json', import.meta.url), `${JSON.stringify(results, null, 2)}\n`);
console.log('wrote bench/results.json');
