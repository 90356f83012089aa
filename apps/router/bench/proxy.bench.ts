// What the router adds on top of a worker: autocannon against one mock worker directly
// (--time-scale 0, so the worker answers as fast as it can), then against the router in front
// of the same worker, same concurrency and body. The worker and the router each run in their
// own process, as in production; autocannon runs in this one. Prints added latency (p50, p99)
// and the throughput ratio against the targets (added p99 <= 2 ms, throughput >= 50% of
// direct). On a shared 2-core machine all three processes compete for the CPUs, so read the
// figures as an upper bound on the router's cost.
//
//   pnpm --filter @kvroute/router bench [-- --duration 10 --connections 32 --stream]
// Runs: direct and routed at saturation (closed loop), then both at a fixed rate of half the
// routed throughput, where latency shows per-request cost rather than queueing.
import { type ChildProcess, spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { cpus, loadavg } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';

import autocannon, { type AutocannonResult } from 'autocannon';
import { request } from 'undici';

const here = dirname(fileURLToPath(import.meta.url));
const routerRoot = join(here, '..');
const repoRoot = join(routerRoot, '..', '..');

const { values } = parseArgs({
  // pnpm forwards its own `--` separator.
  args: process.argv.slice(2).filter((a) => a !== '--'),
  options: {
    duration: { type: 'string', default: '10' },
    warmup: { type: 'string', default: '2' },
    connections: { type: 'string', default: '32' },
    stream: { type: 'boolean', default: false },
    tsx: { type: 'boolean', default: false },
  },
});
const duration = Number(values.duration);
const warmup = Number(values.warmup);
const connections = Number(values.connections);

// Both servers run as esbuild bundles with plain node, the form the router ships in (tsx
// adds a loader and per-closure helpers to every request; --tsx measures the sources instead).
// KVROUTE_BENCH_BUNDLE_DIR: use bundles built elsewhere (kvroute-router.mjs,
// kvroute-mock-worker.mjs), for machines without node_modules.
async function buildBundles(): Promise<string | undefined> {
  if (process.env.KVROUTE_BENCH_BUNDLE_DIR) return process.env.KVROUTE_BENCH_BUNDLE_DIR;
  if (values.tsx) return undefined;
  const { build } = await import('esbuild');
  const outdir = join(routerRoot, 'bundle', 'bench');
  const common = {
    bundle: true,
    platform: 'node',
    format: 'esm',
    target: 'node20',
    conditions: ['@kvroute/source'] as string[],
    // As the package's bundle script: zeromq (native) loads only if KV events are configured.
    alias: { zeromq: join(routerRoot, '../../packages/protocol/scripts/zeromq-lazy.mjs') },
    logLevel: 'warning',
    banner: {
      js: "import{createRequire as __kvrouteRequire}from'module';const require=__kvrouteRequire(import.meta.url);",
    },
  } as const;
  await build({
    ...common,
    entryPoints: [join(routerRoot, 'src/server.ts')],
    outfile: join(outdir, 'kvroute-router.mjs'),
  });
  await build({
    ...common,
    entryPoints: [join(repoRoot, 'apps/mock-worker/src/server.ts')],
    outfile: join(outdir, 'kvroute-mock-worker.mjs'),
  });
  return outdir;
}
const bundleDir = await buildBundles();

function startProcess(
  name: string,
  args: string[],
  cwd: string,
): Promise<{ child: ChildProcess; url: string }> {
  return new Promise((resolve, reject) => {
    const child = spawn(
      process.execPath,
      bundleDir ? args : ['--conditions=@kvroute/source', '--import', 'tsx', ...args],
      {
        cwd,
        stdio: ['ignore', 'pipe', 'pipe'],
      },
    );
    let out = '';
    const onData = (d: Buffer): void => {
      out += d.toString();
      const m = /listening on (http:\/\/[0-9.:]+)/.exec(out);
      if (m) {
        child.stdout?.off('data', onData);
        child.stdout?.resume();
        resolve({ child, url: m[1]! });
      }
    };
    child.stdout?.on('data', onData);
    child.stderr?.on('data', (d: Buffer) => {
      out += d.toString();
    });
    child.once('exit', (code) => reject(new Error(`${name} exited with ${code}:\n${out}`)));
  });
}

const body = JSON.stringify({
  model: 'kvroute-mock',
  messages: [
    { role: 'system', content: 'You are a careful coding agent. '.repeat(30) },
    { role: 'user', content: 'Summarize the failing test and propose a fix.' },
  ],
  max_tokens: 16,
  stream: values.stream,
});

/** Closed loop (each connection sends as soon as its previous answer arrived), or a fixed rate. */
async function load(url: string, seconds: number, rate?: number): Promise<AutocannonResult> {
  return autocannon({
    url: `${url}/v1/chat/completions`,
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body,
    connections,
    pipelining: 1,
    duration: seconds,
    ...(rate ? { overallRate: rate } : {}),
  });
}

/** One request at a time: latency without queueing, to the microsecond (autocannon rounds to ms). */
async function sequential(url: string, n: number): Promise<{ p50: number; p99: number }> {
  const lat: number[] = [];
  for (let i = 0; i < n + 200; i++) {
    const t0 = performance.now();
    const res = await request(`${url}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body,
    });
    await res.body.text();
    if (i >= 200) lat.push(performance.now() - t0);
  }
  lat.sort((a, b) => a - b);
  const q = (p: number): number => lat[Math.floor(p * (lat.length - 1))]!;
  return { p50: q(0.5), p99: q(0.99) };
}

function row(name: string, r: AutocannonResult): string {
  return `${name.padEnd(8)} ${r.requests.average.toFixed(0).padStart(8)} req/s   p50 ${r.latency.p50.toFixed(2).padStart(6)} ms   p90 ${r.latency.p90.toFixed(2).padStart(6)} ms   p99 ${r.latency.p99.toFixed(2).padStart(6)} ms   non-2xx ${r.non2xx}  errors ${r.errors}`;
}

/** CPU seconds (user + system) a child has used; Linux /proc only, undefined elsewhere. */
function cpuSeconds(child: ChildProcess): number | undefined {
  try {
    const fields = readFileSync(`/proc/${child.pid}/stat`, 'utf8').split(') ')[1]!.split(' ');
    return (Number(fields[11]) + Number(fields[12])) / 100;
  } catch {
    return undefined;
  }
}

function cpuPerRequest(
  child: ChildProcess,
  run: () => Promise<AutocannonResult>,
): Promise<[AutocannonResult, number | undefined]> {
  const before = cpuSeconds(child);
  return run().then((r) => {
    const after = cpuSeconds(child);
    const us =
      before === undefined || after === undefined
        ? undefined
        : ((after - before) * 1e6) / r.requests.total;
    return [r, us];
  });
}

const children: ChildProcess[] = [];
try {
  const worker = await startProcess(
    'mock worker',
    [
      bundleDir
        ? join(bundleDir, 'kvroute-mock-worker.mjs')
        : join(repoRoot, 'apps/mock-worker/src/server.ts'),
      '--time-scale',
      '0',
      '--port',
      '0',
    ],
    bundleDir ?? join(repoRoot, 'apps/mock-worker'),
  );
  children.push(worker.child);
  const router = await startProcess(
    'router',
    [
      bundleDir ? join(bundleDir, 'kvroute-router.mjs') : join(routerRoot, 'src/server.ts'),
      '--worker-urls',
      worker.url,
      '--port',
      '0',
      '--load-balance-method',
      'prefix_match',
    ],
    bundleDir ?? routerRoot,
  );
  children.push(router.child);

  console.log(
    `kvroute router proxy benchmark: ${connections} connections, ${duration}s per run (+${warmup}s warm-up), ${values.stream ? 'streaming' : 'non-streaming'} chat, body ${body.length} bytes, ${bundleDir ? 'esbuild bundles' : 'tsx sources'}`,
  );
  console.log(
    `machine: ${cpus().length} CPUs, load average ${loadavg()
      .map((l) => l.toFixed(2))
      .join(' ')}`,
  );
  await load(worker.url, warmup);
  const [direct, workerCpuDirect] = await cpuPerRequest(worker.child, () =>
    load(worker.url, duration),
  );
  await load(router.url, warmup);
  const routerCpuBefore = cpuSeconds(router.child);
  const [routed, workerCpuRouted] = await cpuPerRequest(worker.child, () =>
    load(router.url, duration),
  );
  const routerCpuAfter = cpuSeconds(router.child);

  console.log(row('direct', direct));
  console.log(row('router', routed));
  const addedP50 = routed.latency.p50 - direct.latency.p50;
  const addedP99 = routed.latency.p99 - direct.latency.p99;
  const ratio = routed.requests.average / direct.requests.average;
  const verdict = (ok: boolean): string => (ok ? 'met' : 'MISSED');
  console.log(
    `added latency at saturation: p50 ${addedP50.toFixed(2)} ms, p99 ${addedP99.toFixed(2)} ms (target <= 2 ms: ${verdict(addedP99 <= 2)})`,
  );
  console.log(
    `throughput ratio ${(ratio * 100).toFixed(1)}% of direct (target >= 50%: ${verdict(ratio >= 0.5)})`,
  );
  // At saturation, closed-loop latency is mostly queueing (Little's law: connections /
  // throughput), so it doubles when throughput halves whatever the per-request cost. The
  // router's own added latency shows at a rate both can sustain: half the routed throughput.
  const rate = Math.max(50, Math.round(routed.requests.average / 2));
  const directAtRate = await load(worker.url, duration, rate);
  const routedAtRate = await load(router.url, duration, rate);
  console.log(`at a fixed ${rate} req/s (same ${connections} connections):`);
  console.log(row('direct', directAtRate));
  console.log(row('router', routedAtRate));
  const fixedP99 = routedAtRate.latency.p99 - directAtRate.latency.p99;
  console.log(
    `added latency at ${rate} req/s: p50 ${(routedAtRate.latency.p50 - directAtRate.latency.p50).toFixed(2)} ms, p99 ${fixedP99.toFixed(2)} ms (target <= 2 ms: ${verdict(fixedP99 <= 2)})`,
  );
  const seqDirect = await sequential(worker.url, 2000);
  const seqRouted = await sequential(router.url, 2000);
  const seqP99 = seqRouted.p99 - seqDirect.p99;
  console.log(
    `one request at a time: direct p50 ${seqDirect.p50.toFixed(3)} ms p99 ${seqDirect.p99.toFixed(3)} ms, router p50 ${seqRouted.p50.toFixed(3)} ms p99 ${seqRouted.p99.toFixed(3)} ms: added p50 ${(seqRouted.p50 - seqDirect.p50).toFixed(3)} ms, p99 ${seqP99.toFixed(3)} ms (target <= 2 ms: ${verdict(seqP99 <= 2)})`,
  );
  if (routerCpuBefore !== undefined && routerCpuAfter !== undefined) {
    const routerUs = ((routerCpuAfter - routerCpuBefore) * 1e6) / routed.requests.total;
    console.log(
      `CPU per request: router ${routerUs.toFixed(0)} us, worker ${workerCpuRouted?.toFixed(0)} us behind the router / ${workerCpuDirect?.toFixed(0)} us direct (less sensitive to other load than req/s)`,
    );
  }
  const all = [direct, routed, directAtRate, routedAtRate];
  if (all.some((r) => r.non2xx + r.errors > 0)) {
    console.log('warning: some requests failed; the figures above include them');
  }
} finally {
  for (const c of children) c.kill('SIGTERM');
}
