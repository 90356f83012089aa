// The fault and abuse campaign, measured and printed (never asserted): the router (an esbuild
// bundle run by plain node, as it ships) in front of four loopback workers, one misbehaving.
//   pnpm --filter @kvroute/router fault-bench [-- --duration 20 --concurrency 32 --modes a,b]
// Prints, per fault mode: requests, ok, explicit errors, lost, garbage 200s, the share ok
// where the failure preceded any client byte, the time from the bad worker's first failure to
// its ejection, and the slowest answer (the hung-rank mode runs with a 20 s client). Then:
// max_tokens poisoning (status, in-flight gauges, spread of a hot prefix), 2,000 slow-body
// connections (each one's time from its own headers to its close, p50/p99/max, and how many
// were still open when the body timeout had passed for them), 16 concurrent 30 MiB bodies
// (router RSS, their statuses, good requests' latency meanwhile).
import { type ChildProcess, spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { connect, type Socket } from 'node:net';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Agent, request } from 'undici';
import { parseBenchOptions, positiveArg } from '../../../scripts/bench-args.ts';
import { chatOnce, runLoad } from '../test/helpers/fault-client.ts';
import {
  FAULT_MODES,
  type FaultMode,
  type FaultyWorker,
  failsBeforeClientBytes,
  startFaultyWorker,
} from '../test/helpers/faulty-worker.ts';

const here = dirname(fileURLToPath(import.meta.url));
const routerRoot = join(here, '..');
const HELP = `usage: pnpm --filter @kvroute/router fault-bench [-- flags]

The fault and abuse campaign: the router (an esbuild bundle) in front of four loopback
workers, one misbehaving, loaded by clients at once; prints per fault mode the requests
served, lost and garbled, the time to eject the bad worker and the slowest answer, then the
max_tokens poisoning, slow-body and huge-body abuse runs. Measures, never asserts.

  --duration S         seconds of load per fault mode (default 20)
  --concurrency N      clients at once (default 32)
  --modes LIST         fault modes to run (default all: ${FAULT_MODES.join(', ')})
  --slow-bodies N      connections trickling a body in the slow-body run (default 2000)
  --body-timeout-ms MS the router's --body-timeout-ms in the slow-body run (default 10000)
  --skip LIST          parts to leave out: modes, poison, slow, huge
  -h, --help           this help
`;
const values = parseBenchOptions(HELP, {
  options: {
    duration: { type: 'string', default: '20' },
    concurrency: { type: 'string', default: '32' },
    modes: { type: 'string', default: FAULT_MODES.join(',') },
    'slow-bodies': { type: 'string', default: '2000' },
    'body-timeout-ms': { type: 'string', default: '10000' },
    skip: { type: 'string', default: '' },
    help: { type: 'boolean', short: 'h', default: false },
  },
});
const durationMs = positiveArg('duration', values.duration, HELP) * 1000;
const concurrency = Math.round(positiveArg('concurrency', values.concurrency, HELP));
for (const m of values.modes.split(',').filter(Boolean)) {
  if (!(FAULT_MODES as readonly string[]).includes(m)) {
    console.error(`--modes: unknown fault mode '${m}' (${FAULT_MODES.join(', ')})`);
    process.exit(2);
  }
}
const skip = new Set(values.skip.split(',').filter(Boolean));
for (const part of skip) {
  if (!['modes', 'poison', 'slow', 'huge'].includes(part)) {
    console.error(`--skip: unknown part '${part}' (modes, poison, slow, huge)`);
    process.exit(2);
  }
}

const { build } = await import('esbuild');
const bundle = join(routerRoot, 'bundle', 'bench', 'kvroute-router-fault.mjs');
await build({
  bundle: true,
  platform: 'node',
  format: 'esm',
  target: 'node20',
  // The workspace packages' TypeScript source, as the package's bundle script takes it.
  conditions: ['@kvroute/source'],
  logLevel: 'warning',
  banner: {
    js: "import{createRequire as __kvrCreateRequire}from'module';const require=__kvrCreateRequire(import.meta.url);",
  },
  entryPoints: [join(routerRoot, 'src/server.ts')],
  outfile: bundle,
  // A native addon: loaded from node_modules at run time, not bundled.
  external: ['zeromq'],
});

interface Running {
  child: ChildProcess;
  url: string;
  /** Log time (ms) of the router's first 'worker ejected' or 'worker marked down' line. */
  takenOutAt(): number | undefined;
}

function startRouter(argv: string[]): Promise<Running> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [bundle, '--port', '0', ...argv], {
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let out = '';
    let takenOut: number | undefined;
    let partial = '';
    const watch = (d: Buffer): void => {
      if (takenOut !== undefined) return;
      const lines = (partial + d.toString()).split('\n');
      partial = lines.pop() ?? '';
      for (const line of lines) {
        if (
          line.includes('"msg":"worker ejected"') ||
          line.includes('"msg":"worker marked down"')
        ) {
          takenOut = (JSON.parse(line) as { time: number }).time;
          return;
        }
      }
    };
    const onData = (d: Buffer): void => {
      out += d.toString();
      const m = /listening on (http:\/\/[0-9.:]+)/.exec(out);
      if (m) {
        child.stdout?.off('data', onData);
        child.stdout?.on('data', watch);
        resolve({ child, url: m[1]!, takenOutAt: () => takenOut });
      }
    };
    child.stdout?.on('data', onData);
    child.stderr?.on('data', (d: Buffer) => {
      out += d.toString();
    });
    child.once('exit', (code) => reject(new Error(`router exited with ${code}:\n${out}`)));
  });
}

function stop(child: ChildProcess): Promise<void> {
  return new Promise((r) => {
    child.removeAllListeners('exit');
    child.once('exit', () => r());
    child.kill('SIGKILL');
  });
}

function rssMb(pid: number): number {
  const m = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
  return m ? Number(m[1]) / 1024 : Number.NaN;
}

const pct = (xs: number[], p: number): number => {
  if (xs.length === 0) return Number.NaN;
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))]!;
};
const f1 = (x: number): string => (Number.isFinite(x) ? x.toFixed(1) : '-');

async function metricsText(url: string): Promise<string> {
  const r = await request(`${url}/metrics`);
  return r.body.text();
}

const agent = new Agent({ connections: 256, keepAliveTimeout: 10_000 });

// ---- fault modes -------------------------------------------------------------------------
console.log(
  `# fault modes: 4 workers, rank 0 misbehaving, concurrency ${concurrency}, ${values.duration} s each, client timeout 20 s, router defaults`,
);
console.log(
  'mode                  requests      ok  explicit  lost  garbage200  ok%-before-bytes  ejected-after-ms  max-ms',
);
for (const mode of values.modes.split(',') as FaultMode[]) {
  if (skip.has('modes')) break;
  const ws: FaultyWorker[] = await Promise.all([0, 1, 2, 3].map(() => startFaultyWorker('ok')));
  const bad = ws[0]!;
  const origMode = mode;
  const router = await startRouter([
    '--worker-urls',
    ...ws.map((w) => w.url),
    '--log-level',
    'info',
  ]);
  bad.mode = origMode;
  const outcomes = await runLoad(router.url, {
    durationMs,
    concurrency,
    dispatcher: agent,
    timeoutMs: 20_000,
  });
  const ejectedAt = router.takenOutAt() ?? 0;
  const firstFault = bad.firstFaultAt ?? 0;
  const before = outcomes.filter((o) => failsBeforeClientBytes(mode, o.stream));
  const okBefore = before.length
    ? (100 * before.filter((o) => o.ok).length) / before.length
    : Number.NaN;
  console.log(
    [
      mode.padEnd(20),
      String(outcomes.length).padStart(9),
      String(outcomes.filter((o) => o.ok).length).padStart(7),
      String(outcomes.filter((o) => o.explicitError).length).padStart(9),
      String(outcomes.filter((o) => o.lost).length).padStart(5),
      String(outcomes.filter((o) => o.garbage200).length).padStart(11),
      (before.length ? f1(okBefore) : 'n/a').padStart(17),
      (ejectedAt && firstFault
        ? String(ejectedAt - firstFault)
        : mode === 'slow-trickle'
          ? 'not ejected'
          : 'never'
      ).padStart(17),
      f1(Math.max(...outcomes.map((o) => o.ms))).padStart(7),
    ].join(' '),
  );
  await stop(router.child);
  await Promise.all(ws.map((w) => w.close()));
}

// ---- max_tokens poisoning ----------------------------------------------------------------
if (!skip.has('poison')) {
  const ws = await Promise.all([0, 1, 2, 3].map(() => startFaultyWorker('ok')));
  for (const w of ws) w.eventGapMs = 200;
  const router = await startRouter([
    '--worker-urls',
    ...ws.map((w) => w.url),
    '--log-level',
    'info',
  ]);
  const statuses: number[] = [];
  for (let i = 0; i < 16; i++) {
    const r = await request(`${router.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({
        model: 'm',
        messages: [{ role: 'user', content: `p${i}` }],
        max_tokens: Number.MAX_VALUE,
      }),
      dispatcher: agent,
    });
    statuses.push(r.statusCode);
    await r.body.text();
  }
  const gauges = (await metricsText(router.url))
    .split('\n')
    .filter((l) => l.startsWith('kvroute_router_in_flight_'))
    .map((l) => Number(l.split(' ').at(-1)));
  // A hot prefix under load: 64 concurrent streams sharing a long system prompt.
  const prefix = 'You are a careful coding agent with a long shared system prompt. '.repeat(240);
  const ranks = new Map<string, number>();
  await Promise.all(
    Array.from({ length: 64 }, async (_, i) => {
      const r = await request(`${router.url}/v1/chat/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({
          model: 'm',
          messages: [
            { role: 'system', content: prefix },
            { role: 'user', content: `task ${i}` },
          ],
          max_tokens: 8,
          stream: true,
        }),
        dispatcher: agent,
      });
      const rank = String(r.headers['x-kvroute-rank']);
      ranks.set(rank, (ranks.get(rank) ?? 0) + 1);
      await r.body.text();
    }),
  );
  const after = (await metricsText(router.url))
    .split('\n')
    .filter((l) => l.startsWith('kvroute_router_in_flight_'))
    .map((l) => Number(l.split(' ').at(-1)));
  console.log('\n# max_tokens = Number.MAX_VALUE x 16, then a hot prefix (64 concurrent streams)');
  console.log(
    `statuses: ${[...new Set(statuses)].map((s) => `${s} x${statuses.filter((x) => x === s).length}`).join(', ')}`,
  );
  console.log(
    `in-flight gauges after: all finite ${gauges.every(Number.isFinite)}, max ${Math.max(...gauges)}; after the hot prefix: max ${Math.max(...after)}`,
  );
  console.log(
    `hot prefix per rank: ${[...ranks]
      .sort()
      .map(([r, n]) => `rank ${r}: ${n}`)
      .join(', ')}`,
  );
  await stop(router.child);
  await Promise.all(ws.map((w) => w.close()));
}

// ---- slow bodies -------------------------------------------------------------------------
if (!skip.has('slow')) {
  const ws = await Promise.all([0, 1, 2, 3].map(() => startFaultyWorker('ok')));
  const bodyTimeout = Number(values['body-timeout-ms']);
  const router = await startRouter([
    '--worker-urls',
    ...ws.map((w) => w.url),
    '--body-timeout-ms',
    String(bodyTimeout),
    '--log-level',
    'info',
  ]);
  const port = Number(new URL(router.url).port);
  const n = Number(values['slow-bodies']);
  // The bench's own event-loop lag: a close it notices late reads as a late close.
  let benchLag = 0;
  let lagLast = performance.now();
  const lagProbe = setInterval(() => {
    const now = performance.now();
    benchLag = Math.max(benchLag, now - lagLast - 20);
    lagLast = now;
  }, 20);
  const t0 = Date.now();
  const closedAt: number[] = [];
  // Per connection: when its headers went out (its own start), when it closed, what it got.
  const conns: { sentAt: number; closedAt: number; got: string }[] = [];
  const sockets: Socket[] = [];
  let allSentAt = 0;
  await new Promise<void>((resolve) => {
    let opened = 0;
    for (let i = 0; i < n; i++) {
      const c = { sentAt: 0, closedAt: 0, got: '' };
      conns.push(c);
      const s = connect(port, '127.0.0.1', () => {
        c.sentAt = Date.now();
        s.write(
          'POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n{',
        );
        if (++opened === n) {
          allSentAt = Date.now();
          resolve();
        }
      });
      s.on('data', (d: Buffer) => {
        if (c.got.length < 1024) c.got += d.toString('latin1');
      });
      s.on('error', () => {});
      s.on('close', () => {
        c.closedAt = Date.now();
        // From this connection's headers to its close: what --body-timeout-ms bounds.
        closedAt.push(c.closedAt - (c.sentAt || t0));
      });
      sockets.push(s);
    }
    setTimeout(resolve, 10_000);
  });
  const trickle = setInterval(() => {
    for (const s of sockets) if (!s.destroyed) s.write(' ');
  }, 1000);
  // Good requests meanwhile.
  const good: number[] = [];
  const goodEnd = Date.now() + bodyTimeout;
  while (Date.now() < goodEnd) {
    const o = await chatOnce(router.url, false, { dispatcher: agent });
    if (o.ok) good.push(o.ms);
    await new Promise((r) => setTimeout(r, 20));
  }
  for (let i = 0; i < 200 && closedAt.length < n; i++) await new Promise((r) => setTimeout(r, 100));
  clearInterval(trickle);
  clearInterval(lagProbe);
  const sent = conns.filter((c) => c.sentAt > 0);
  const own = sent.filter((c) => c.closedAt > 0).map((c) => c.closedAt - c.sentAt);
  const openAt = (ms: number): number =>
    sent.filter((c) => c.closedAt === 0 || c.closedAt - c.sentAt > ms).length;
  const answered = conns.filter(
    (c) => /^HTTP\/1\.1 408 /.test(c.got) && c.got.includes('"code":"request_timeout"'),
  ).length;
  console.log(`\n# ${n} connections trickling a body (1 byte/s), --body-timeout-ms ${bodyTimeout}`);
  console.log(
    `closed by the router: ${closedAt.length}/${n}; each closed ${f1(pct(closedAt, 50) / 1000)} s (median) / ${f1(Math.max(...closedAt) / 1000)} s (max) after its headers; router RSS ${f1(rssMb(router.child.pid!))} MB; good requests meanwhile: ${good.length}, p50 ${f1(pct(good, 50))} ms, p99 ${f1(pct(good, 99))} ms`,
  );
  console.log(
    `per connection, from its own headers to its close: p50 ${pct(own, 50)} ms, p99 ${pct(own, 99)} ms, max ${Math.max(...own)} ms; still open at +${bodyTimeout} ms: ${openAt(bodyTimeout)}, at +${bodyTimeout + 1000} ms: ${openAt(bodyTimeout + 1000)}; answered 408 request_timeout: ${answered}/${n}; the bench opened all ${sent.length} and sent their headers in ${allSentAt ? allSentAt - t0 : Number.NaN} ms, its own event loop lagged up to ${f1(benchLag)} ms (a close noticed late reads as late)`,
  );
  for (const s of sockets) s.destroy();
  await stop(router.child);
  await Promise.all(ws.map((w) => w.close()));
}

// ---- huge bodies -------------------------------------------------------------------------
if (!skip.has('huge')) {
  const ws = await Promise.all([0, 1, 2, 3].map(() => startFaultyWorker('ok')));
  const router = await startRouter([
    '--worker-urls',
    ...ws.map((w) => w.url),
    '--log-level',
    'info',
  ]);
  const pid = router.child.pid!;
  const rss0 = rssMb(pid);
  let rssMax = rss0;
  const sampler = setInterval(() => {
    rssMax = Math.max(rssMax, rssMb(pid));
  }, 20);
  const huge = JSON.stringify({
    model: 'm',
    messages: [{ role: 'user', content: 'x'.repeat(30 * 1024 * 1024) }],
    max_tokens: 8,
  });
  const good: number[] = [];
  let stopGood = false;
  const goodLoop = (async () => {
    while (!stopGood) {
      const o = await chatOnce(router.url, false, { dispatcher: agent });
      if (o.ok) good.push(o.ms);
    }
  })();
  const hugeAgent = new Agent({ connections: 32 });
  const statuses = await Promise.all(
    Array.from({ length: 16 }, async () => {
      try {
        const r = await request(`${router.url}/v1/chat/completions`, {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body: huge,
          dispatcher: hugeAgent,
        });
        await r.body.text();
        return r.statusCode;
      } catch {
        return 0;
      }
    }),
  );
  await new Promise((r) => setTimeout(r, 500));
  stopGood = true;
  await goodLoop;
  clearInterval(sampler);
  console.log(
    '\n# 16 concurrent 30 MiB bodies (default --body-memory-bytes), good requests meanwhile',
  );
  console.log(
    `router RSS: ${f1(rss0)} MB before, ${f1(rssMax)} MB max; huge statuses: ${[...new Set(statuses)].map((s) => `${s} x${statuses.filter((x) => x === s).length}`).join(', ')}; good: ${good.length}, p50 ${f1(pct(good, 50))} ms, p99 ${f1(pct(good, 99))} ms`,
  );
  await hugeAgent.close();
  await stop(router.child);
  await Promise.all(ws.map((w) => w.close()));
}

await agent.close();
process.exit(0);
