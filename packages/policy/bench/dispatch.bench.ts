// Decisions per second for every registered method: at 16 ranks with 4,096- and
// 32,768-token prompts, and across rank counts (16, 256, 1,024, 4,096) at 1,024 tokens.
// Run: pnpm --filter @kvroute/policy bench [--json FILE]   (env BENCH_MS=<ms per case>, default 400)
// Prints a table; writes JSON only where --json says (nothing tracked is rewritten). The host
// loop is included: a dispatch ticket per decision, closed 64 decisions later, as the sim and
// the router run it.
import { writeFileSync } from 'node:fs';
import { cpus, loadavg } from 'node:os';
import { performance } from 'node:perf_hooks';
import { checkBenchArgs } from '../../../scripts/bench-args.ts';
import {
  createDispatcher,
  createLoadTracker,
  type Dispatcher,
  type DispatcherConfig,
  type LoadTracker,
  maglevTable,
  methodNames,
  type RouteRequest,
} from '../src/index.ts';

checkBenchArgs(
  `usage: pnpm --filter @kvroute/policy bench [-- --only METHOD,... --json FILE]

Decisions per second of every method (or --only these), at 4,096 and 32,768 prompt tokens on
16 ranks and at 1,024 tokens on 16 to 4,096 ranks, against the targets; --json writes the
figures. Env BENCH_MS: milliseconds per case (default 400).`,
  { values: ['--only', '--json'], flags: [] },
);
const SIZES = [4096, 32_768];
const SCALING_RANKS = [16, 256, 1024, 4096];
const SCALING_TOKENS = 1024;
const PROMPTS = 64;
const MAX_NEW_TOKENS = 256;
const BENCH_MS = Number(process.env.BENCH_MS ?? 400);

function argValue(flag: string): string | undefined {
  const args = process.argv.slice(2).filter((a) => a !== '--');
  const i = args.indexOf(flag);
  if (i < 0) return undefined;
  const v = args[i + 1];
  if (v === undefined) throw new Error(`${flag} needs a value`);
  return v;
}
const jsonOut = argValue('--json');
const only = argValue('--only');

const LOAD_ONLY = ['round_robin', 'total_requests', 'total_tokens', 'follow_bootstrap_room'];

/** Decisions/s each method must reach. */
function targetFor(method: string, tokens: number, ranks: number): number | undefined {
  if (ranks === 1024) {
    if (method === 'total_tokens') return 1_000_000;
    if ((method === 'consistent_hash' || method === 'cache_aware') && tokens === 1024)
      return 50_000;
    return undefined;
  }
  if (ranks !== 16) return undefined;
  if (LOAD_ONLY.includes(method)) return 1_000_000;
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
    const request: RouteRequest & { maxNewTokens: number } = {
      inputIds: asArray ? Array.from(ids) : ids,
      bootstrapRoom: next(),
      maxNewTokens: MAX_NEW_TOKENS,
    };
    if (withKeys) request.routingKey = `session-${i % 24}`;
    return request;
  });
}

/** Rank names as the router gives them (worker URL and DP rank), one worker per rank. */
function workerNames(ranks: number): string[] {
  return Array.from({ length: ranks }, (_, r) => `http://10.0.${r >> 8}.${r & 255}:30000#0`);
}

interface Row {
  case: string;
  method: string;
  ranks: number;
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

interface Open {
  done(): void;
}

/** The host's path: a ticket per decision where the dispatcher has them. */
function opener(dispatcher: Dispatcher, tracker: LoadTracker, cost: number) {
  const begin = (dispatcher as { begin?: unknown }).begin as
    | ((r: RouteRequest, t: LoadTracker, c: { nowMs: number }) => Open)
    | undefined;
  if (begin)
    return (r: RouteRequest, nowMs: number): Open => begin.call(dispatcher, r, tracker, { nowMs });
  return (r: RouteRequest, nowMs: number): Open => {
    const d = dispatcher.dispatch(r, tracker.ranks, { nowMs });
    tracker.onDispatch(d.rank, cost);
    return { done: () => tracker.onComplete(d.rank, cost) };
  };
}

function bench(
  config: DispatcherConfig,
  ranks: number,
  tokens: number,
  asArray: boolean,
  label: string,
  named = false,
): Row {
  const requests = makeRequests(tokens, asArray, config.affinity !== undefined);
  const dispatcher = createDispatcher(config);
  // A host that names its ranks by worker (the router does): the hash methods key on names.
  if (named) dispatcher.nameRanks(workerNames(ranks));
  const tracker = createLoadTracker(ranks, { kvCapacityTokens: 945_000 });
  const open = opener(dispatcher, tracker, tokens + MAX_NEW_TOKENS);
  const ring: (Open | undefined)[] = new Array(64).fill(undefined);
  let i = 0;
  const step = (budgetMs: number): [number, number] => {
    let count = 0;
    const start = performance.now();
    let now = start;
    while (now - start < budgetMs) {
      for (let k = 0; k < 64; k++, i++) {
        const ticket = open(requests[i % PROMPTS] as RouteRequest, i);
        const slot = i & 63;
        ring[slot]?.done();
        ring[slot] = ticket;
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
    config.affinity === undefined && !asArray ? targetFor(config.method, tokens, ranks) : undefined;
  const row: Row = {
    case: label,
    method: config.method,
    ranks,
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
const methods = methodNames().filter((m) => only === undefined || only.split(',').includes(m));
if (only === undefined || only.includes('16')) {
  for (const tokens of SIZES) {
    for (const method of methods) rows.push(bench({ method }, 16, tokens, false, method));
    if (only === undefined) {
      rows.push(
        bench({ method: 'prefix_match' }, 16, tokens, true, 'prefix_match (number[] input)'),
      );
      rows.push(
        bench(
          { method: 'prefix_match', affinity: { kind: 'routing_key' } },
          16,
          tokens,
          false,
          'prefix_match + routing_key affinity',
        ),
      );
    }
  }
}
for (const ranks of SCALING_RANKS) {
  for (const method of methods) rows.push(bench({ method }, ranks, SCALING_TOKENS, false, method));
  if (methods.includes('consistent_hash')) {
    const label = 'consistent_hash (named ranks)';
    rows.push(bench({ method: 'consistent_hash' }, ranks, SCALING_TOKENS, false, label, true));
  }
}
// Named ranks pay a Maglev table build when the set of workers changes (not per decision):
// the median of 5 builds per rank count.
const maglevBuildMs = methods.includes('consistent_hash')
  ? SCALING_RANKS.map((ranks) => {
      const names = workerNames(ranks);
      const ms = Array.from({ length: 5 }, () => {
        const t0 = performance.now();
        maglevTable(names);
        return performance.now() - t0;
      }).sort((a, b) => a - b);
      return { ranks, ms: Number((ms[2] as number).toFixed(2)) };
    })
  : [];
const loadAfter = loadavg();

const fmt = (n: number) => n.toLocaleString('en-US');
const header = ['case', 'ranks', 'tokens', 'decisions/s', 'us/decision', 'target', 'met'];
const table = rows.map((r) => [
  r.case,
  String(r.ranks),
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
console.log(`@kvroute/policy dispatch benchmark: ${BENCH_MS} ms per case`);
console.log(
  `node ${process.version}, ${cpus().length} CPUs, load average ${loadBefore.map((l) => l.toFixed(2)).join(' ')}`,
);
console.log(line(header));
console.log(widths.map((w) => '-'.repeat(w)).join('  '));
for (const row of table) console.log(line(row));
if (maglevBuildMs.length > 0) {
  console.log(
    `Maglev table build (named ranks, once per change of the workers): ${maglevBuildMs.map((b) => `${b.ms} ms at ${fmt(b.ranks)}`).join(', ')}`,
  );
}

if (jsonOut !== undefined) {
  const results = {
    generatedAt: new Date().toISOString(),
    node: process.version,
    cpus: cpus().length,
    cpuModel: cpus()[0]?.model,
    loadAverageBefore: loadBefore,
    loadAverageAfter: loadAfter,
    msPerCase: BENCH_MS,
    note: 'Shared machine: figures vary with other load; host accounting is inside the loop.',
    results: rows,
    maglevBuildMs,
  };
  writeFileSync(jsonOut, `${JSON.stringify(results, null, 2)}\n`);
  console.log(`wrote ${jsonOut}`);
}
