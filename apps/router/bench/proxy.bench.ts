// What the router costs next to a reference proxy: one mock worker (--time-scale 0, so it
// answers as fast as it can), kvroute in front of it, and nginx / HAProxy in front of the same
// worker when installed, each in its own process as in production; autocannon runs in this
// one. For each body size and mode: throughput against direct, and each proxy's CPU per
// request from /proc (on a shared 2-core machine the steadiest figure), with kvroute's ratios
// to the reference and the targets. --latency adds the added-latency runs at 1 KB (a fixed
// rate, where latency shows per-request cost rather than queueing, and one at a time).
//
//   pnpm --filter @kvroute/router bench [-- --help]
import { type ChildProcess, spawn } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { type AddressInfo, connect, createServer as createNetServer } from 'node:net';
import { cpus, loadavg, tmpdir } from 'node:os';
import { dirname, join, resolve as resolvePath } from 'node:path';
import { fileURLToPath } from 'node:url';

import autocannon, { type AutocannonResult } from 'autocannon';
import { Pool, request } from 'undici';
import { parseBenchOptions, positiveArg } from '../../../scripts/bench-args.ts';

const here = dirname(fileURLToPath(import.meta.url));
const routerRoot = join(here, '..');
const repoRoot = join(routerRoot, '..', '..');

const HELP = `usage: pnpm --filter @kvroute/router bench [-- flags]

Starts one mock worker (--time-scale 0), kvroute in front of it, and nginx and HAProxy in front
of the same worker when they are installed (round robin, keep-alive upstreams, access logs off,
one worker process / thread each, like the router's one event loop). For each body size and
mode it loads the worker directly and through each proxy with autocannon (closed loop) and
prints throughput, the proxy's CPU per request (from /proc, the steadiest figure on a shared
machine) and kvroute's ratios to the reference proxy and to direct. Then the targets: CPU per
request at 1 KB <= 2x nginx's, throughput >= 0.7x direct, CPU per extra KB <= 3 us, CPU at
136 KB <= 1.3x that at 120 KB.

  --duration S      seconds per measured run (default 3)
  --rounds N        measured runs per target and body, interleaved with the other targets'
                    so a change in the machine's load hits them all alike (default 3)
  --warmup S        seconds of warm-up per target and body (default 1)
  --warmup-requests N  requests per target and mode (1 KB) before anything is measured, so
                    V8 has compiled the hot path: a router measured in its first few thousand
                    requests is measured while it runs unoptimised code and pays for its JIT
                    (default 20000; 0 = off)
  --connections N   concurrent connections (default 32)
  --sizes LIST      body sizes in KB (default 1,16,120,136)
  --modes LIST      plain,stream (default both)
  --proxies LIST    reference proxies to try: nginx,haproxy,node (default all three; nginx and
                    HAProxy are skipped if absent; node is bench/node-floor-proxy.mjs, node:http
                    in front of undici with nothing else, the floor any Node proxy pays;
                    none: kvroute and direct only)
  --method NAME     kvroute's --load-balance-method (default cache_aware)
  --latency         also the added-latency runs at 1 KB (fixed rate, one at a time), the
                    reference proxies and variants taking their turns beside kvroute
  --rate N          the fixed rate of the latency runs, requests/s in all, shared by the
                    targets taking turns (direct, kvroute, variants, reference proxies), so the worker
                    behind them gets all of it; default: half the router's closed-loop
                    throughput just measured (a rate the machine cannot sustain measures its
                    queues, not what the router adds to a request)
  --variants LIST   also kvroute with record (--record-trace, every request) and/or shadow
                    (--shadow-profile), each its own process measured beside plain kvroute in the
                    same run; prints each one's cost in throughput and CPU per request
  --unique-tail     every request's last message ends with its own number (one new block per
                    request for the recorder's hashing, as an agent's next turn) instead of
                    every request sending the same body
  --baseline FILE   also a kvroute bundle built elsewhere (e.g. from another commit: esbuild
                    apps/router/src/server.ts as the bundle script does), measured as kv+base beside
                    kvroute in the same run: a before/after comparison on one machine load
  --node-args=ARGS also kvroute's own bundle under these node flags (space-separated, e.g.
                    --node-args='--max-semi-space-size=64'), measured as kv+node beside kvroute in the same
                    run: what a runtime setting is worth under one machine load
  --cpu-prof DIR    run the routers (plain, each variant, the baseline) and the Node floor under
                    node --cpu-prof, profiles written to DIR (one per process, named with its pid)
  --tsx             run the TypeScript sources through tsx instead of esbuild bundles
  -h, --help        this help
`;

const values = parseBenchOptions(HELP, {
  options: {
    duration: { type: 'string', default: '3' },
    rounds: { type: 'string', default: '3' },
    warmup: { type: 'string', default: '1' },
    'warmup-requests': { type: 'string', default: '20000' },
    connections: { type: 'string', default: '32' },
    sizes: { type: 'string', default: '1,16,120,136' },
    modes: { type: 'string', default: 'plain,stream' },
    proxies: { type: 'string', default: 'nginx,haproxy,node' },
    method: { type: 'string', default: 'cache_aware' },
    latency: { type: 'boolean', default: false },
    variants: { type: 'string', default: '' },
    'unique-tail': { type: 'boolean', default: false },
    'cpu-prof': { type: 'string' },
    baseline: { type: 'string' },
    'node-args': { type: 'string' },
    rate: { type: 'string' },
    tsx: { type: 'boolean', default: false },
    help: { type: 'boolean', short: 'h', default: false },
  },
});
const positive = (flag: string, v: string): number => positiveArg(flag, v, HELP);
const duration = positive('duration', values.duration);
const rounds = Math.round(positive('rounds', values.rounds));
const warmup = Number(values.warmup);
const warmupRequests = Number(values['warmup-requests']);
if (!Number.isInteger(warmupRequests) || warmupRequests < 0) {
  console.error(
    `--warmup-requests must be a whole number >= 0, got '${values['warmup-requests']}'`,
  );
  process.exit(2);
}
const connections = positive('connections', values.connections);
const fixedRate = values.rate !== undefined ? positive('rate', values.rate) : undefined;
const sizes = values.sizes.split(',').map((v) => positive('sizes', v));
const modes = values.modes.split(',').map((m) => {
  if (m !== 'plain' && m !== 'stream') {
    console.error(`--modes takes plain and/or stream, got '${m}'`);
    process.exit(2);
  }
  return m;
});
const wantProxies = values.proxies.split(',').filter((p) => p !== '' && p !== 'none');
if (values.baseline !== undefined && !existsSync(values.baseline)) {
  console.error(`--baseline: no such file '${resolvePath(values.baseline)}'`);
  process.exit(2);
}
// kvroute with one opt-in feature on, measured beside plain kvroute: its extra flags.
const VARIANTS: Record<string, (dir: string) => string[]> = {
  record: (dir) => ['--record-trace', join(dir, 'bench-trace.jsonl')],
  shadow: () => ['--shadow-profile', 'h200-llama-3.1-8b'],
};
const variants = values.variants.split(',').filter((v) => v !== '');
for (const v of variants) {
  if (!VARIANTS[v]) {
    console.error(`--variants takes ${Object.keys(VARIANTS).join(', ')}, got '${v}'`);
    process.exit(2);
  }
}

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
    logLevel: 'warning',
    // A native addon (KV events): loaded from node_modules at run time, not bundled.
    external: ['zeromq'] as string[],
    banner: {
      js: "import{createRequire as __kvrCreateRequire}from'module';const require=__kvrCreateRequire(import.meta.url);",
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
  viaTsx = bundleDir === undefined,
): Promise<{ child: ChildProcess; url: string }> {
  return new Promise((resolve, reject) => {
    const child = spawn(
      process.execPath,
      viaTsx ? ['--conditions=@kvroute/source', '--import', 'tsx', ...args] : args,
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

/** A chat body of about `kb` KB: an agent's system prompt (with newlines, so escapes) + a turn. */
function chatBody(kb: number, stream: boolean): string {
  const line = 'You are a careful coding agent; read the tool output before acting.\n';
  const base = JSON.stringify({
    model: 'kvroute-mock',
    messages: [
      { role: 'system', content: '' },
      { role: 'user', content: 'Summarize the failing test and propose a fix.' },
    ],
    max_tokens: 16,
    stream,
  });
  const room = Math.max(0, Math.round(kb * 1024) - base.length);
  // Each line is one byte longer in JSON (\n is two characters there).
  let content = line.repeat(Math.floor(room / (line.length + 1)));
  content += 'x'.repeat(Math.max(0, room - JSON.stringify(content).length + 2));
  return JSON.stringify({
    model: 'kvroute-mock',
    messages: [
      { role: 'system', content },
      { role: 'user', content: `Summarize the failing test and propose a fix. ${TAIL}` },
    ],
    max_tokens: 16,
    stream,
  });
}

/** Replaced, with --unique-tail, by each request's own number (same length). */
const TAIL = '#000000000';
let requestNo = 0;

/** Closed loop (each connection sends as soon as its previous answer arrived), or a fixed rate. */
async function load(
  url: string,
  body: string,
  seconds: number,
  rate?: number,
): Promise<AutocannonResult> {
  const at = body.lastIndexOf(TAIL);
  return autocannon({
    url: `${url}/v1/chat/completions`,
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body,
    ...(values['unique-tail']
      ? {
          requests: [
            {
              setupRequest: (req: Record<string, unknown>) => ({
                ...req,
                body: `${body.slice(0, at)}#${String(++requestNo).padStart(9, '0')}${body.slice(at + TAIL.length)}`,
              }),
            },
          ],
        }
      : {}),
    connections,
    pipelining: 1,
    duration: seconds,
    ...(rate ? { overallRate: rate } : {}),
  });
}

interface OpenLoopResult {
  rate: number;
  sent: number;
  failed: number;
  p50: number;
  p90: number;
  p99: number;
}

/** The `p` quantile of ascending `sorted` (NaN when empty). */
function quantile(sorted: readonly number[], p: number): number {
  return sorted[Math.floor(p * (sorted.length - 1))] ?? Number.NaN;
}

/**
 * An open loop at a fixed rate with evenly spaced sends over `connections` keep-alive
 * connections per target, each request's latency counted from the moment it was due (as wrk2
 * does, so a stall that delays sends is charged to the requests it delayed). autocannon's own
 * fixed rate is not this: each connection sends its per-second quota back to back and then
 * idles until the next second, so its "fixed rate" runs are bursts at saturation and their
 * tail is queueing, the same as a closed loop's.
 *
 * The targets take turns request by request, `rate` in all (each gets rate / targets, and the
 * worker behind them all of it), for `seconds` of sends each: a stall of the shared machine
 * (its other tenants, the load generator's own pauses, a timer slice: 10-30 ms several times
 * a second here) delays requests of every target alike. Measured one after the other, a few
 * seconds each, the direct path's own p99 moved between 6 and 14 ms from run to run on the
 * 2-core development machine and the difference of two such p99s between -3 and +39 ms; in
 * quarter-second turns a stall still fell on one target's turn; taking turns at each target's
 * full rate doubled the worker's load and put the machine in its queueing range.
 */
async function openLoop(
  urls: readonly string[],
  body: string,
  seconds: number,
  rate: number,
): Promise<OpenLoopResult[]> {
  const pools = urls.map((url) => new Pool(url, { connections, pipelining: 1 }));
  const lats: number[][] = urls.map(() => []);
  const failed: number[] = urls.map(() => 0);
  let sent = 0;
  const targetOf = (i: number): number => i % urls.length;
  // The first second runs at the same rate unmeasured: it opens the
  // connections (on both sides of a proxy) and lets the generator's own code compile, which
  // otherwise lands as a burst of queued requests in the measured tail.
  const warm = Math.round(rate);
  const total = warm + Math.round(rate * seconds) * urls.length;
  const pending: Promise<void>[] = [];
  const one = async (i: number, due: number): Promise<void> => {
    const t = targetOf(i);
    try {
      const res = await pools[t]!.request({
        path: '/v1/chat/completions',
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body,
      });
      await res.body.text();
      if (res.statusCode !== 200) failed[t]!++;
      else if (i >= warm) lats[t]!.push(performance.now() - due);
    } catch {
      failed[t]!++;
    }
  };
  const t0 = performance.now() + 5;
  await new Promise<void>((done) => {
    const tick = (): void => {
      const now = performance.now();
      const due = Math.min(total, Math.floor(((now - t0) * rate) / 1000) + 1);
      for (; sent < due; sent++) pending.push(one(sent, t0 + (sent * 1000) / rate));
      if (sent >= total) done();
      else setTimeout(tick, 1);
    };
    setTimeout(tick, 5);
  });
  await Promise.all(pending);
  await Promise.all(pools.map((p) => p.close()));
  return lats.map((lat, t) => {
    lat.sort((a, b) => a - b);
    return {
      rate,
      sent: lat.length + failed[t]!,
      failed: failed[t]!,
      p50: quantile(lat, 0.5),
      p90: quantile(lat, 0.9),
      p99: quantile(lat, 0.99),
    };
  });
}

function openRow(name: string, r: OpenLoopResult): string {
  return `${name.padEnd(8)} ${r.sent.toString().padStart(8)} sent    p50 ${r.p50.toFixed(2).padStart(6)} ms   p90 ${r.p90.toFixed(2).padStart(6)} ms   p99 ${r.p99.toFixed(2).padStart(6)} ms   failed ${r.failed}`;
}

/**
 * One request at a time, latency without queueing to the microsecond (autocannon rounds to
 * ms): `n` requests to each URL, taking turns request by request, so the machine's slow
 * moments fall on both.
 */
async function sequential(
  urls: readonly string[],
  body: string,
  n: number,
): Promise<{ p50: number; p99: number }[]> {
  const lats: number[][] = urls.map(() => []);
  for (let i = 0; i < n + 200; i++) {
    for (const [t, url] of urls.entries()) {
      const t0 = performance.now();
      const res = await request(`${url}/v1/chat/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body,
      });
      await res.body.text();
      if (i >= 200) lats[t]!.push(performance.now() - t0);
    }
  }
  return lats.map((lat) => {
    lat.sort((a, b) => a - b);
    return { p50: quantile(lat, 0.5), p99: quantile(lat, 0.99) };
  });
}

function row(name: string, r: AutocannonResult): string {
  return `${name.padEnd(8)} ${r.requests.average.toFixed(0).padStart(8)} req/s   p50 ${r.latency.p50.toFixed(2).padStart(6)} ms   p90 ${r.latency.p90.toFixed(2).padStart(6)} ms   p99 ${r.latency.p99.toFixed(2).padStart(6)} ms   non-2xx ${r.non2xx}  errors ${r.errors}`;
}

/** CPU seconds (user + system) of a process; Linux /proc only, undefined elsewhere. */
function cpuSeconds(pid: number | undefined): number | undefined {
  try {
    const fields = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]!.split(' ');
    return (Number(fields[11]) + Number(fields[12])) / 100;
  } catch {
    return undefined;
  }
}

interface Measured {
  /** Requests answered per second over all rounds. */
  reqPerSec: number;
  /** The median of the rounds' p99 latencies, ms. */
  p99: number;
  /** Non-2xx answers and errors. */
  failed: number;
  /** The measured process's CPU per request in microseconds, over all rounds. */
  cpuUs: number | undefined;
  workerCpuUs: number | undefined;
}

interface Target {
  name: string;
  url: string;
  /** The process whose CPU is counted (undefined: direct, only the worker's). */
  pid: number | undefined;
}

/**
 * Every target on one body: a warm-up each, then `rounds` runs of duration/rounds seconds per
 * target, interleaved (the order reversed every other round), CPU and requests summed.
 */
async function measureAll(
  targets: Target[],
  body: string,
  workerPid: number | undefined,
): Promise<Measured[]> {
  for (const t of targets) await load(t.url, body, warmup);
  const acc = targets.map(() => ({
    requests: 0,
    cpu: 0 as number | undefined,
    workerCpu: 0 as number | undefined,
    p99: [] as number[],
    failed: 0,
  }));
  for (let r = 0; r < rounds; r++) {
    const order = targets.map((_, i) => (r % 2 === 0 ? i : targets.length - 1 - i));
    for (const i of order) {
      const t = targets[i]!;
      const a = acc[i]!;
      const p0 = cpuSeconds(t.pid);
      const w0 = cpuSeconds(workerPid);
      // Each run as long as --duration: a run shorter than a large body's latency on a loaded
      // machine would complete no request at all.
      const result = await load(t.url, body, duration);
      const p1 = cpuSeconds(t.pid);
      const w1 = cpuSeconds(workerPid);
      a.requests += result.requests.total;
      a.cpu =
        p0 === undefined || p1 === undefined || a.cpu === undefined ? undefined : a.cpu + p1 - p0;
      a.workerCpu =
        w0 === undefined || w1 === undefined || a.workerCpu === undefined
          ? undefined
          : a.workerCpu + w1 - w0;
      a.p99.push(result.latency.p99);
      a.failed += result.non2xx + result.errors;
    }
  }
  return acc.map((a) => {
    const perRequest = (cpu: number | undefined) =>
      cpu === undefined || a.requests === 0 ? undefined : (cpu * 1e6) / a.requests;
    a.p99.sort((x, y) => x - y);
    return {
      reqPerSec: a.requests / (duration * rounds),
      p99: a.p99[Math.floor(a.p99.length / 2)]!,
      failed: a.failed,
      cpuUs: perRequest(a.cpu),
      workerCpuUs: perRequest(a.workerCpu),
    };
  });
}

async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const srv = createNetServer();
    srv.once('error', reject);
    srv.listen(0, '127.0.0.1', () => {
      const port = (srv.address() as AddressInfo).port;
      srv.close(() => resolve(port));
    });
  });
}

async function waitForPort(port: number, child: ChildProcess, name: string): Promise<void> {
  for (let i = 0; i < 100; i++) {
    if (child.exitCode !== null) throw new Error(`${name} exited with ${child.exitCode}`);
    const ok = await new Promise<boolean>((resolve) => {
      const s = connect(port, '127.0.0.1');
      s.once('connect', () => {
        s.destroy();
        resolve(true);
      });
      s.once('error', () => resolve(false));
    });
    if (ok) return;
    await new Promise((r) => setTimeout(r, 50));
  }
  throw new Error(`${name} did not listen on ${port}`);
}

interface RefProxy {
  name: string;
  url: string;
  child: ChildProcess;
}

/**
 * The Node floor (bench/node-floor-proxy.mjs): node:http in front of undici's dispatch with
 * nothing else, the least any Node router pays; kvroute's own code is what it costs above it.
 * Needs undici from node_modules (skipped with KVROUTE_BENCH_BUNDLE_DIR).
 */
async function startNodeFloor(workerUrl: string): Promise<RefProxy | undefined> {
  if (process.env.KVROUTE_BENCH_BUNDLE_DIR) return undefined;
  // Profiled beside the routers under --cpu-prof: the side-by-side profile is what tells
  // kvroute's own cost from the runtime's.
  const profDir = values['cpu-prof'];
  const p = await startProcess(
    'node floor proxy',
    [
      ...(profDir ? ['--cpu-prof', '--cpu-prof-dir', profDir] : []),
      join(here, 'node-floor-proxy.mjs'),
      '--worker-url',
      workerUrl,
    ],
    routerRoot,
    false,
  );
  return { name: 'node', url: p.url, child: p.child };
}

/** nginx in the foreground, one process, round robin over keep-alive upstream connections. */
async function startNginx(workerUrl: string, dir: string): Promise<RefProxy | undefined> {
  const bin = '/usr/sbin/nginx';
  if (!existsSync(bin)) return undefined;
  const port = await freePort();
  const upstream = new URL(workerUrl).host;
  const conf = join(dir, 'nginx.conf');
  writeFileSync(
    conf,
    `daemon off; master_process off; worker_processes 1; pid ${dir}/nginx.pid;
error_log ${dir}/nginx-error.log error;
events { worker_connections 4096; }
http {
  access_log off;
  client_body_temp_path ${dir}/nginx-body; proxy_temp_path ${dir}/nginx-proxy;
  fastcgi_temp_path ${dir}/nginx-fcgi; uwsgi_temp_path ${dir}/nginx-uwsgi; scgi_temp_path ${dir}/nginx-scgi;
  upstream workers { server ${upstream}; keepalive 128; }
  server {
    listen 127.0.0.1:${port};
    client_max_body_size 64m; client_body_buffer_size 512k;
    location / {
      proxy_pass http://workers; proxy_http_version 1.1; proxy_set_header Connection "";
      proxy_buffering off;
    }
  }
}
`,
  );
  const child = spawn(bin, ['-c', conf, '-p', dir, '-e', join(dir, 'nginx-error.log')], {
    stdio: 'ignore',
  });
  await waitForPort(port, child, 'nginx');
  return { name: 'nginx', url: `http://127.0.0.1:${port}`, child };
}

/** HAProxy in the foreground, one thread, round robin, connections reused. */
async function startHaproxy(workerUrl: string, dir: string): Promise<RefProxy | undefined> {
  const bin = '/usr/sbin/haproxy';
  if (!existsSync(bin)) return undefined;
  const port = await freePort();
  const upstream = new URL(workerUrl).host;
  const conf = join(dir, 'haproxy.cfg');
  writeFileSync(
    conf,
    `global
  nbthread 1
  maxconn 4096
defaults
  mode http
  timeout connect 5s
  timeout client 120s
  timeout server 120s
  option http-keep-alive
frontend bench
  bind 127.0.0.1:${port}
  default_backend workers
backend workers
  balance roundrobin
  http-reuse always
  server w1 ${upstream}
`,
  );
  const child = spawn(bin, ['-f', conf, '-db'], { stdio: 'ignore' });
  await waitForPort(port, child, 'haproxy');
  return { name: 'haproxy', url: `http://127.0.0.1:${port}`, child };
}

const fmt = (v: number | undefined, digits = 0): string =>
  v === undefined || !Number.isFinite(v) ? '-' : v.toFixed(digits);

const children: ChildProcess[] = [];
const tmp = mkdtempSync(join(tmpdir(), 'kvroute-bench-'));
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
  const profDir = values['cpu-prof'];
  // Every router under test: the same worker, method and profiling, its own script and flags.
  const routerArgs = (script: string, extra: string[] = []) => [
    ...(profDir ? ['--cpu-prof', '--cpu-prof-dir', profDir] : []),
    script,
    '--worker-urls',
    worker.url,
    '--port',
    '0',
    '--load-balance-method',
    values.method,
    ...extra,
  ];
  const routerScript = bundleDir
    ? join(bundleDir, 'kvroute-router.mjs')
    : join(routerRoot, 'src/server.ts');
  const router = await startProcess('router', routerArgs(routerScript), bundleDir ?? routerRoot);
  children.push(router.child);
  const variantRouters: [string, { child: ChildProcess; url: string }][] = [];
  for (const v of variants) {
    const r = await startProcess(
      `router (${v})`,
      routerArgs(routerScript, VARIANTS[v]!(tmp)),
      bundleDir ?? routerRoot,
    );
    children.push(r.child);
    variantRouters.push([`kv+${v}`, r]);
  }
  if (values.baseline) {
    // Relative to where the bench was started, not to the directory the bundle runs in.
    const baseline = resolvePath(values.baseline);
    const r = await startProcess('router (baseline)', routerArgs(baseline), dirname(baseline));
    children.push(r.child);
    variantRouters.push(['kv+base', r]);
  }
  const nodeArgs = values['node-args']?.split(/\s+/).filter((a) => a !== '');
  if (nodeArgs !== undefined && nodeArgs.length > 0) {
    const r = await startProcess(
      `router (${nodeArgs.join(' ')})`,
      [...nodeArgs, ...routerArgs(routerScript)],
      bundleDir ?? routerRoot,
    );
    children.push(r.child);
    variantRouters.push(['kv+node', r]);
  }
  const refs: RefProxy[] = [];
  for (const name of wantProxies) {
    const start =
      name === 'nginx'
        ? startNginx
        : name === 'haproxy'
          ? startHaproxy
          : name === 'node'
            ? startNodeFloor
            : undefined;
    if (!start) throw new Error(`--proxies: unknown proxy '${name}' (nginx, haproxy, node)`);
    const p = await start(worker.url, tmp);
    if (p) {
      refs.push(p);
      children.push(p.child);
    } else console.log(`${name}: not installed, skipped`);
  }

  if (warmupRequests > 0) {
    // V8 compiles a function once it is hot; until then the router runs interpreted code and
    // its background compiler threads count in its CPU. Every target gets the same warm-up.
    const all = [
      worker.url,
      router.url,
      ...variantRouters.map(([, r]) => r.url),
      ...refs.map((r) => r.url),
    ];
    for (const mode of modes) {
      const body = chatBody(1, mode === 'stream');
      for (const url of all) {
        await autocannon({
          url: `${url}/v1/chat/completions`,
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body,
          connections,
          amount: warmupRequests,
        });
      }
    }
  }
  console.log(
    `kvroute proxy benchmark: ${connections} connections, ${rounds} interleaved rounds of ${duration}s per body (+${warmup}s warm-up per body, ${warmupRequests} requests per target and mode first), method ${values.method}, ${bundleDir ? 'esbuild bundles' : 'tsx sources'}; reference: ${refs.map((r) => r.name).join(', ') || 'none'}${variants.length > 0 ? `; kvroute variants: ${variants.join(', ')}` : ''}; bodies: ${values['unique-tail'] ? 'each with its own tail' : 'identical'}`,
  );
  console.log(
    `machine: ${cpus().length} CPUs, load average ${loadavg()
      .map((l) => l.toFixed(2))
      .join(' ')} (autocannon, the worker and the proxy share them: compare within a row)`,
  );
  const head = [
    'body',
    'mode',
    'target',
    'req/s',
    'x direct',
    'CPU us/req',
    'worker us/req',
    'p99 ms',
  ];
  console.log(head.map((h, i) => (i < 3 ? h.padEnd(8) : h.padStart(13))).join(''));
  const kvCpu = new Map<string, number | undefined>();
  const nginxCpu = new Map<string, number | undefined>();
  const kvRatio = new Map<string, number>();
  const variantCost = new Map<string, { thr: number; cpu: number }>();
  let failed = 0;
  for (const mode of modes) {
    for (const kb of sizes) {
      const body = chatBody(kb, mode === 'stream');
      const targets: Target[] = [
        { name: 'direct', url: worker.url, pid: undefined },
        { name: 'kvroute', url: router.url, pid: router.child.pid },
        ...variantRouters.map(([n, r]) => ({ name: n, url: r.url, pid: r.child.pid })),
        ...refs.map((r) => ({ name: r.name, url: r.url, pid: r.child.pid })),
      ];
      const measured = await measureAll(targets, body, worker.child.pid);
      const results = targets.map((t, i): [string, Measured] => [t.name, measured[i]!]);
      const direct = measured[0]!;
      for (const [name, m] of results) {
        failed += m.failed;
        const ratio = m.reqPerSec / direct.reqPerSec;
        console.log(
          [
            `${kb} KB`.padEnd(8),
            mode.padEnd(8),
            name.padEnd(8),
            fmt(m.reqPerSec).padStart(13),
            fmt(ratio, 2).padStart(13),
            (name === 'direct' ? '' : fmt(m.cpuUs)).padStart(13),
            fmt(m.workerCpuUs).padStart(13),
            fmt(m.p99, 1).padStart(13),
          ].join(''),
        );
        const key = `${mode}:${kb}`;
        if (name === 'kvroute') {
          kvCpu.set(key, m.cpuUs);
          kvRatio.set(key, ratio);
        }
        if (name === 'nginx') nginxCpu.set(key, m.cpuUs);
      }
      const kv = results.find(([n]) => n === 'kvroute')![1];
      for (const [n, m] of results) {
        if (!n.startsWith('kv+')) continue;
        const thr = m.reqPerSec / kv.reqPerSec;
        const cpu = (m.cpuUs ?? Number.NaN) / (kv.cpuUs ?? Number.NaN);
        variantCost.set(`${n}:${mode}:${kb}`, { thr, cpu });
        console.log(
          `  ${n} vs kvroute: throughput ${fmt(thr, 3)}x (cost ${fmt((1 - thr) * 100, 1)}%), CPU/request ${fmt(cpu, 3)}x (+${fmt((m.cpuUs ?? Number.NaN) - (kv.cpuUs ?? Number.NaN), 0)} us)`,
        );
      }
      const ratios = results
        .filter(([n]) => n !== 'direct' && n !== 'kvroute' && !n.startsWith('kv+'))
        .map(
          ([n, m]) =>
            `${n}: CPU ${fmt((kv.cpuUs ?? Number.NaN) / (m.cpuUs ?? Number.NaN), 2)}x, throughput ${fmt(kv.reqPerSec / m.reqPerSec, 2)}x`,
        );
      if (ratios.length > 0) console.log(`  kvroute vs ${ratios.join('; ')}`);
    }
  }
  const verdict = (ok: boolean | undefined): string =>
    ok === undefined ? 'not measured' : ok ? 'met' : 'MISSED';
  console.log('targets:');
  for (const mode of modes) {
    const at = (kb: number) => kvCpu.get(`${mode}:${kb}`);
    const small = at(1);
    const ng = nginxCpu.get(`${mode}:1`);
    const x = small !== undefined && ng !== undefined ? small / ng : undefined;
    console.log(
      `  ${mode}: CPU/request at 1 KB ${fmt(small)} us = ${fmt(x, 2)}x nginx's ${fmt(ng)} us (target <= 2x: ${verdict(x === undefined ? undefined : x <= 2)})`,
    );
    const r1 = kvRatio.get(`${mode}:1`);
    console.log(
      `  ${mode}: throughput at 1 KB ${fmt(r1, 2)}x direct at ${connections} connections (target >= 0.7x: ${verdict(r1 === undefined ? undefined : r1 >= 0.7)})`,
    );
    const c120 = at(120);
    const c136 = at(136);
    if (small !== undefined && c120 !== undefined) {
      const perKb = (c120 - small) / 119;
      console.log(
        `  ${mode}: CPU per extra KB (1 -> 120 KB) ${fmt(perKb, 2)} us (target <= 3 us: ${verdict(perKb <= 3)})`,
      );
    }
    if (c120 !== undefined && c136 !== undefined) {
      const step = c136 / c120;
      console.log(
        `  ${mode}: CPU at 136 KB / at 120 KB ${fmt(step, 2)} (target <= 1.3: ${verdict(step <= 1.3)})`,
      );
    }
  }

  for (const [n] of variantRouters) {
    const costs = [...variantCost.entries()].filter(([k]) => k.startsWith(`${n}:`));
    const thr = costs.map(([, c]) => c.thr).filter((c) => Number.isFinite(c));
    const cpu = costs.map(([, c]) => c.cpu).filter((c) => Number.isFinite(c));
    const mean = (xs: number[]) => xs.reduce((a, b) => a + b, 0) / xs.length;
    const worst = Math.min(...thr);
    console.log(
      `  ${n}: throughput cost vs kvroute ${fmt((1 - mean(thr)) * 100, 1)}% on average, ${fmt((1 - worst) * 100, 1)}% at worst; CPU/request +${fmt((mean(cpu) - 1) * 100, 1)}% on average${n === 'kv+record' ? ` (target <= 5% throughput: ${verdict(1 - mean(thr) <= 0.05)})` : ''}`,
    );
  }

  if (values.latency) {
    // At saturation, closed-loop latency is mostly queueing (Little's law: connections /
    // throughput), so it doubles when throughput halves whatever the per-request cost; it is
    // printed for the record. The router's own added latency shows in an open loop at a rate
    // both sustain (half the routed saturation throughput), evenly spaced, with direct and
    // router taking turns request by request, so a change in the machine's load hits both
    // alike.
    const body = chatBody(1, false);
    const satDirect = await load(worker.url, body, duration);
    const satRouted = await load(router.url, body, duration);
    console.log(`at saturation (closed loop, ${connections} connections, 1 KB):`);
    console.log(row('direct', satDirect));
    console.log(row('router', satRouted));
    console.log(
      `added latency at saturation: p50 ${(satRouted.latency.p50 - satDirect.latency.p50).toFixed(2)} ms, p99 ${(satRouted.latency.p99 - satDirect.latency.p99).toFixed(2)} ms (queueing: throughput ${(satRouted.requests.average / satDirect.requests.average).toFixed(2)}x direct)`,
    );
    const rate = fixedRate ?? Math.max(50, Math.round(satRouted.requests.average / 2));
    const added: number[] = [];
    // The variants (--baseline, --node-args, --variants) and the reference proxies take their
    // turns in the same rounds: a change's effect on the tail, and what a proxy that is not
    // Node.js adds on this machine, measured beside the router under one machine load.
    const others: [string, { url: string }][] = [
      ...variantRouters,
      ...refs.map((r): [string, { url: string }] => [r.name, r]),
    ];
    const targets = 2 + others.length;
    const variantAdded = new Map<string, number[]>(others.map(([n]) => [n, []]));
    for (let i = 0; i < rounds; i++) {
      const [directAtRate, routedAtRate, ...variantsAtRate] = await openLoop(
        [worker.url, router.url, ...others.map(([, r]) => r.url)],
        body,
        duration,
        rate,
      );
      console.log(
        `open loop at ${rate} req/s in all, evenly spaced, 1 KB, ${targets} targets taking turns request by request (${fmt(rate / targets)} req/s and ${connections} connections each), round ${i + 1}:`,
      );
      console.log(openRow('direct', directAtRate!));
      console.log(openRow('router', routedAtRate!));
      added.push(routedAtRate!.p99 - directAtRate!.p99);
      failed += directAtRate!.failed + routedAtRate!.failed;
      for (const [k, [name]] of others.entries()) {
        const v = variantsAtRate[k]!;
        console.log(openRow(name, v));
        variantAdded.get(name)!.push(v.p99 - directAtRate!.p99);
        failed += v.failed;
      }
    }
    const median = (xs: number[]) =>
      [...xs].sort((a, b) => a - b)[Math.floor((xs.length - 1) / 2)]!;
    const fixedP99 = median(added);
    console.log(
      `added p99 at ${rate} req/s in all (${fmt(rate / targets)} req/s through the router), per round: ${added.map((a) => a.toFixed(2)).join(', ')} ms; median ${fixedP99.toFixed(2)} ms (target <= 2 ms: ${verdict(fixedP99 <= 2)})`,
    );
    for (const [name, xs] of variantAdded) {
      console.log(
        `  ${name}: added p99 per round ${xs.map((a) => a.toFixed(2)).join(', ')} ms; median ${median(xs).toFixed(2)} ms`,
      );
    }
    const [seqDirect, seqRouted, ...seqRefs] = await sequential(
      [worker.url, router.url, ...refs.map((r) => r.url)],
      body,
      1000,
    );
    const seqP99 = seqRouted!.p99 - seqDirect!.p99;
    console.log(
      `one request at a time, direct, router${refs.map((r) => `, ${r.name}`).join('')} taking turns: direct p50 ${seqDirect!.p50.toFixed(3)} ms p99 ${seqDirect!.p99.toFixed(3)} ms, router p50 ${seqRouted!.p50.toFixed(3)} ms p99 ${seqRouted!.p99.toFixed(3)} ms: added p50 ${(seqRouted!.p50 - seqDirect!.p50).toFixed(3)} ms, p99 ${seqP99.toFixed(3)} ms (target <= 2 ms: ${verdict(seqP99 <= 2)})`,
    );
    for (const [k, r] of refs.entries()) {
      const v = seqRefs[k]!;
      console.log(
        `  ${r.name}: added p50 ${(v.p50 - seqDirect!.p50).toFixed(3)} ms, p99 ${(v.p99 - seqDirect!.p99).toFixed(3)} ms`,
      );
    }
  }
  if (failed > 0) console.log(`warning: ${failed} requests failed; the figures above include them`);
  console.log(
    `load average after: ${loadavg()
      .map((l) => l.toFixed(2))
      .join(' ')}`,
  );
} finally {
  for (const c of children) c.kill('SIGTERM');
  rmSync(tmp, { recursive: true, force: true });
}
