// What the recorder and the live cache model add to one request, in process and in CPU time
// (process.cpuUsage, the best of 7 rounds): steadier on a loaded machine than a load test,
// and it shows where the cost is. For each chat body size: reading the body for routing
// (the method's 16384-token prefix, as cache_aware reads it) against reading the whole prompt
// (what a recorded request or --shadow-profile needs), the block ids of the prompt (the same
// prompt again: memoized; each with its own last turn: one new block; a fresh hasher: every
// block an HMAC), the hand-over on the request path (record()), one line built (ids of a new
// last turn and the text), the whole recorder per request (hand-over, the drain after the
// turn, the batched file writes; CPU of every thread, 8 requests a turn as under load, less
// the same loop unrecorded, median of 5), and one pass through the cache model.
// The side-by-side throughput figure is the proxy benchmark's --variants record,shadow.
//
//   pnpm --filter @kvroute/router bench:recording [-- --sizes 1,16,120,136]
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { scanRequest } from '@kvroute/protocol';
import { Registry } from 'prom-client';
import { parseBenchOptions } from '../../../scripts/bench-args.ts';
import { BlockHasher } from '../src/recording/block-hasher.ts';
import { type RecordedRequest, requestLine, TraceRecorder } from '../src/recording/recorder.ts';
import { ShadowCacheModel } from '../src/shadow/shadow-cache.ts';

const HELP = `usage: pnpm --filter @kvroute/router bench:recording [-- --sizes LIST]

What the recorder and the live cache model add to one request, in CPU time, per chat body
size (best of 7 rounds; see the file's header for each figure).

  --sizes LIST   body sizes in KB (default 1,16,120,136)
  -h, --help     this help
`;
const values = parseBenchOptions(HELP, {
  options: {
    sizes: { type: 'string', default: '1,16,120,136' },
    help: { type: 'boolean', short: 'h', default: false },
  },
});
const sizes = values.sizes.split(',').map(Number);
if (sizes.some((n) => !(n > 0))) {
  console.error(`--sizes takes positive KB sizes, got '${values.sizes}'`);
  process.exit(2);
}

/** The proxy benchmark's agent body of about `kb` KB, its last turn numbered `n`. */
function body(kb: number, n: number): Buffer {
  const line = 'You are a careful coding agent; read the tool output before acting.\n';
  const content = line.repeat(Math.max(1, Math.floor((kb * 1024) / (line.length + 1))));
  return Buffer.from(
    JSON.stringify({
      model: 'kvroute-mock',
      messages: [
        { role: 'system', content },
        { role: 'user', content: `Summarize the failing test and propose a fix. #${n}` },
      ],
      max_tokens: 16,
    }),
  );
}

/** CPU microseconds per call, the best of 7 rounds of `n` calls. */
function cpuUs(n: number, f: (i: number) => void): number {
  let best = Number.POSITIVE_INFINITY;
  let k = 0;
  for (let round = 0; round < 7; round++) {
    const t = process.cpuUsage();
    for (let i = 0; i < n; i++) f(k++);
    const u = process.cpuUsage(t);
    best = Math.min(best, (u.user + u.system) / n);
  }
  return best;
}

const dir = mkdtempSync(join(tmpdir(), 'kvroute-recording-bench-'));
let files = 0;
async function startRecorder(): Promise<TraceRecorder> {
  const rec = new TraceRecorder({
    policy: () => ({ method: 'cache_aware', options: {} }),
    ranks: () => 1,
    tokenizer: 'approximate',
    registry: new Registry(),
    log: { warn: () => {}, info: () => {} },
  });
  await rec.start({
    path: join(dir, `trace-${files++}.jsonl`),
    blockTokens: 512,
    sampleRate: 1,
    rotateBytes: 0,
    rotateMs: 0,
    queueBytes: 64 * 1024 * 1024,
  });
  return rec;
}
const recorder = await startRecorder();

/** A finished request as the proxy hands it over. */
function finished(ids: Uint32Array): RecordedRequest {
  const now = performance.now();
  return {
    receivedAt: now - 2,
    ids,
    rank: 0,
    reason: 'prefix-hash',
    usage: { promptTokens: ids.length, cachedTokens: 512, outputTokens: 16 },
    ttftAt: now - 1,
    endAt: now,
    status: 200,
    model: 'kvroute-mock',
    stream: false,
  };
}

const turn = (): Promise<void> => new Promise((r) => setImmediate(r));

/**
 * The whole recorder's CPU per request, every thread (the file writes run in the thread
 * pool): requests handed over 8 a turn, then the recording stopped (what is left written),
 * less the same loop without recording; the median of 5.
 */
async function wholeRecorderUs(all: Uint32Array[]): Promise<number> {
  const once = async (on: boolean): Promise<number> => {
    const rec = on ? await startRecorder() : undefined;
    const t = process.cpuUsage();
    for (let i = 0; i < all.length; i++) {
      const r = finished(all[i]!);
      rec?.record(r);
      if (i % 8 === 7) await turn();
    }
    await rec?.stop();
    const u = process.cpuUsage(t);
    return (u.user + u.system) / all.length;
  };
  const runs: number[] = [];
  for (let k = 0; k < 5; k++) {
    const off = await once(false);
    runs.push((await once(true)) - off);
  }
  return runs.sort((a, b) => a - b)[2]!;
}
const secret = Buffer.alloc(32, 7);
const f = (us: number): string => us.toFixed(1).padStart(9);
console.log(
  'CPU us per request (best of 7 rounds); "+record" = what a recorded request adds to routing',
);
console.log(
  [
    'body',
    'tokens',
    'scan prefix',
    'scan whole',
    'ids same',
    'ids new turn',
    'ids no memo',
    'hand-over',
    'line',
    'recorder',
    'shadow',
    '+record',
    '+shadow',
  ]
    .map((h, i) => (i < 2 ? h.padEnd(8) : h.padStart(13)))
    .join(''),
);
try {
  for (const kb of sizes) {
    const n = kb >= 100 ? 40 : kb >= 10 ? 200 : 1000;
    const bodies = Array.from({ length: 7 * n + 1 }, (_, i) => body(kb, i));
    const ids = bodies.map((b) => scanRequest('chat', b, {}).inputIds);
    const prefix = cpuUs(n, (i) => scanRequest('chat', bodies[i]!, { maxPromptTokens: 16384 }));
    const wholeScan = cpuUs(n, (i) => scanRequest('chat', bodies[i]!, {}));
    const hasher = new BlockHasher({ secret, blockTokens: 512 });
    hasher.hashIds(ids[0]!);
    const same = cpuUs(n, () => hasher.hashIds(ids[0]!));
    const newTurn = cpuUs(n, (i) => hasher.hashIds(ids[i]!));
    const noMemo = cpuUs(Math.max(5, n / 10), (i) =>
      new BlockHasher({ secret, blockTokens: 512, memoBytes: 0 }).hashIds(ids[i]!),
    );
    const requests = ids.map(finished);
    const handOver = cpuUs(n, (i) => recorder.record(requests[i]!));
    await turn();
    const lineHasher = new BlockHasher({ secret, blockTokens: 512 });
    lineHasher.hashIds(ids[0]!);
    const line = cpuUs(n, (i) => requestLine(requests[i]!, 0, lineHasher));
    const whole = await wholeRecorderUs(ids);
    const shadow = new ShadowCacheModel(
      { profile: 'h200-llama-3.1-8b', pageSize: 1, window: 1000 },
      new Registry(),
    );
    const model = cpuUs(n, (i) =>
      shadow
        .begin(0, 'w', ids[i]!, 16)
        .done({ promptTokens: ids[i]!.length, cachedTokens: 1 }, true),
    );
    // Whole-prompt read instead of the prefix, plus the whole recorder.
    const extraScan = Math.max(0, wholeScan - prefix);
    console.log(
      [
        `${kb} KB`.padEnd(8),
        String(ids[0]!.length).padEnd(8),
        f(prefix),
        f(wholeScan),
        f(same),
        f(newTurn),
        f(noMemo),
        f(handOver),
        f(line),
        f(whole),
        f(model),
        f(extraScan + whole),
        f(extraScan + model),
      ].join(''),
    );
    await new Promise((r) => setImmediate(r));
  }
  console.log(
    '"line" includes the ids (new last turn, memoized prefix); "recorder" is hand-over, line and file writes together; compare "+record" and "+shadow" with the router CPU per request the proxy benchmark prints',
  );
} finally {
  await recorder.stop();
  rmSync(dir, { recursive: true, force: true });
}
