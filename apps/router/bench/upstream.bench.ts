// The worker hop's client alone: undici's Agent.dispatch against the router's own keep-alive
// client (src/proxy/upstream.ts), both driving the same do-nothing dispatch handler against one
// node:http worker in its own process, 32 requests in flight, the headers the router sends.
// Prints this process's CPU (user + system) per request, median of interleaved runs: the part of
// the router's per-request cost that the client accounts for.
//
//   pnpm --filter @kvroute/router bench:upstream [-- --sizes 1,16,128 --requests 20000 --rounds 6]
import { spawn } from 'node:child_process';
import { parseArgs } from 'node:util';
import { Agent } from 'undici';
import { type UpstreamDispatcher, UpstreamPool } from '../src/proxy/upstream.ts';

const { values } = parseArgs({
  args: process.argv.slice(2).filter((a) => a !== '--'),
  options: {
    sizes: { type: 'string', default: '1,16,128' },
    requests: { type: 'string', default: '20000' },
    rounds: { type: 'string', default: '6' },
    help: { type: 'boolean', short: 'h', default: false },
  },
});
if (values.help) {
  console.log(
    'usage: pnpm --filter @kvroute/router bench:upstream [-- --sizes KB,.. --requests N --rounds N]',
  );
  process.exit(0);
}
function positiveInt(flag: string, v: string): number {
  const n = Number(v);
  if (!Number.isInteger(n) || n <= 0) {
    console.error(`--${flag} must be a positive whole number, got '${v}'`);
    process.exit(2);
  }
  return n;
}
const sizes = values.sizes.split(',').map((v) => positiveInt('sizes', v));
const perRun = positiveInt('requests', values.requests);
const rounds = positiveInt('rounds', values.rounds);

// An OpenAI-shaped answer of the size the mock worker sends at max_tokens 16.
const worker = spawn(
  process.execPath,
  [
    '-e',
    `const http = require('node:http');
const answer = JSON.stringify({ id: 'x', object: 'chat.completion', choices: [{ index: 0,
  message: { role: 'assistant', content: 'hello '.repeat(16) }, finish_reason: 'length' }],
  usage: { prompt_tokens: 250, completion_tokens: 16, total_tokens: 266 } });
const s = http.createServer((q, r) => { q.resume(); q.on('end', () => {
  r.setHeader('content-type', 'application/json'); r.end(answer); }); });
s.keepAliveTimeout = 60000;
s.listen(0, '127.0.0.1', () => console.log(s.address().port));`,
  ],
  { stdio: ['ignore', 'pipe', 'inherit'] },
);
const port = await new Promise<number>((resolve) =>
  worker.stdout!.once('data', (d) => resolve(Number(String(d).trim()))),
);
const origin = `http://127.0.0.1:${port}`;
const clients: Record<string, UpstreamDispatcher> = {
  undici: new Agent({ keepAliveTimeout: 30_000, connections: null, pipelining: 1 }),
  kvroute: new UpstreamPool(),
};

async function load(client: UpstreamDispatcher, body: Buffer, n: number): Promise<void> {
  const headers = {
    'content-type': 'application/json',
    'content-length': String(body.length),
    'user-agent': 'autocannon',
    accept: '*/*',
    'x-forwarded-for': '127.0.0.1',
    traceparent: '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01',
  };
  let left = n;
  const one = (): Promise<void> =>
    new Promise((resolve, reject) => {
      client.dispatch(
        {
          origin,
          path: '/v1/chat/completions',
          method: 'POST',
          headers,
          body,
          headersTimeout: 0,
          bodyTimeout: 0,
        },
        {
          onConnect() {},
          onHeaders: () => true,
          onData: () => true,
          onComplete: () => resolve(),
          onError: reject,
        },
      );
    });
  await Promise.all(
    Array.from({ length: 32 }, async () => {
      while (left-- > 0) await one();
    }),
  );
}

console.log(
  `worker-hop client CPU per request (this process, user + system), 32 in flight, median of ${rounds} interleaved runs of ${perRun} requests`,
);
for (const kb of sizes) {
  const body = Buffer.alloc(kb * 1024, 'a');
  // Warm both (V8 compiles the hot path) before anything is measured.
  for (const c of Object.values(clients)) await load(c, body, perRun);
  const runs: Record<string, number[]> = { undici: [], kvroute: [] };
  for (let r = 0; r < rounds; r++) {
    const order = r % 2 === 0 ? ['undici', 'kvroute'] : ['kvroute', 'undici'];
    for (const name of order) {
      const c0 = process.cpuUsage();
      await load(clients[name]!, body, perRun);
      const c = process.cpuUsage(c0);
      runs[name]!.push((c.user + c.system) / perRun);
    }
  }
  const median = (xs: number[]): number => [...xs].sort((a, b) => a - b)[xs.length >> 1]!;
  const u = median(runs.undici!);
  const k = median(runs.kvroute!);
  console.log(
    `${String(kb).padStart(4)} KB body: undici ${u.toFixed(1)} us, kvroute client ${k.toFixed(1)} us (${(k / u).toFixed(2)}x; runs ${runs.kvroute!.map((x) => x.toFixed(0)).join(' ')} vs ${runs.undici!.map((x) => x.toFixed(0)).join(' ')})`,
  );
}
worker.kill();
await (clients.kvroute as UpstreamPool).destroy();
await (clients.undici as Agent).destroy();
