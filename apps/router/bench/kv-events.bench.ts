// KV event ingest on one core: msgpack EventBatch payloads as vLLM publishes them (8 events a
// batch; BlockStored of 4 x 16-token blocks chained per sequence, 64-bit hashes as vLLM's
// sha256-derived ints; a BlockRemoved of 4 blocks for every 4 stored once a rank holds 50k)
// decoded and applied to the events index through the router's own path
// (decodeKvEventBatch + applyKvEventBatch). Target: >= 200,000 block events/s.
// Run: pnpm --filter @kvroute/router bench:kv-events   (env BENCH_MS, default 1000)
import { loadavg } from 'node:os';
import { KvBlockIndex } from '@kvroute/policy';
import {
  decodeKvEventBatch,
  encodeKvEventBatch,
  type KvCacheEvent,
} from '@kvroute/protocol/kv-events';
import { checkBenchArgs } from '../../../scripts/bench-args.ts';
import { applyKvEventBatch } from '../src/kv-events/feed.ts';

checkBenchArgs(
  'usage: pnpm --filter @kvroute/router bench:kv-events\n\nKV event ingest (decode + index) on one core against the target. No flags; env BENCH_MS:\nmilliseconds of CPU to measure (default 1000).',
  {},
);
const BENCH_MS = Number(process.env.BENCH_MS ?? 1000);
if (!(BENCH_MS > 0)) {
  console.error(
    `BENCH_MS must be a positive number of milliseconds, got '${process.env.BENCH_MS}'`,
  );
  process.exit(2);
}
const RANKS = 16;
const BLOCK = 16;

let seed = 7;
const next = () => {
  seed = (Math.imul(seed, 1103515245) + 12345) >>> 0;
  return seed;
};
const hash = () => (BigInt(next()) << 32n) | BigInt(next()) | (1n << 63n);

// Pre-encode the stream per rank (encoding is the engine's cost, not the router's).
interface Payload {
  rank: number;
  bytes: Buffer;
  blocks: number;
}
const payloads: Payload[] = [];
const held: bigint[][] = Array.from({ length: RANKS }, () => []);
const parent: (bigint | null)[] = new Array(RANKS).fill(null);
let totalBlocks = 0;
for (let b = 0; b < 20_000; b++) {
  const rank = b % RANKS;
  const events: KvCacheEvent[] = [];
  let blocks = 0;
  for (let e = 0; e < 8; e++) {
    const hashes = [hash(), hash(), hash(), hash()];
    events.push({
      type: 'BlockStored',
      blockHashes: hashes.map(String),
      parentBlockHash: e % 4 === 0 ? null : String(parent[rank]),
      tokenIds: Array.from({ length: 4 * BLOCK }, () => next() % 150_000),
      blockSize: BLOCK,
      loraId: null,
      medium: 'GPU',
    });
    parent[rank] = hashes[3] as bigint;
    (held[rank] as bigint[]).push(...hashes);
    blocks += 4;
    if ((held[rank] as bigint[]).length > 50_000) {
      events.push({
        type: 'BlockRemoved',
        blockHashes: (held[rank] as bigint[]).splice(0, 4).map(String),
        medium: 'GPU',
      });
      blocks += 4;
    }
  }
  payloads.push({ rank, bytes: encodeKvEventBatch({ ts: 1.7e9, events }), blocks });
  totalBlocks += blocks;
}

const cpuMs = () => {
  const u = process.cpuUsage();
  return (u.user + u.system) / 1000;
};

function run(ms: number): { blocks: number; cpu: number; wall: number } {
  const index = new KvBlockIndex();
  let blocks = 0;
  let i = 0;
  const c0 = cpuMs();
  const w0 = performance.now();
  while (cpuMs() - c0 < ms) {
    for (let k = 0; k < 200; k++, i++) {
      if (i === payloads.length) {
        i = 0;
        for (let r = 0; r < RANKS; r++) index.clearRank(r);
      }
      const p = payloads[i] as Payload;
      applyKvEventBatch(index, p.rank, decodeKvEventBatch(p.bytes));
      blocks += p.blocks;
    }
  }
  return { blocks, cpu: (cpuMs() - c0) / 1000, wall: (performance.now() - w0) / 1000 };
}

run(300);
const r = run(BENCH_MS);
const bytes = payloads.reduce((n, p) => n + p.bytes.length, 0) / totalBlocks;
const perSec = r.blocks / r.cpu;
console.log(
  `router KV event ingest (decode + index), one thread, load avg ${(loadavg()[0] ?? 0).toFixed(2)}, ${BENCH_MS} ms of CPU`,
);
console.log(
  `${Math.round(perSec).toLocaleString('en-US')} block events per CPU-second (${Math.round(r.blocks / r.wall).toLocaleString('en-US')}/s wall); ${bytes.toFixed(1)} payload bytes per block; target >= 200,000 -> ${perSec >= 200_000 ? 'met' : 'NOT met'}`,
);
