// The router's added latency in PD mode: per streaming request, the client's time to its first
// content token through the router, minus the decode worker's own TTFT (from its arrival to its
// first output token, stamped by the mock in the same process, so one clock).
// The yardstick for the target (the router adds no more than one extra round trip) is measured
// the same way on the same machine at the same moment: the client drives the pair itself,
// straight to the workers (prefill and decode requests with bootstrap fields, as the router
// would send them), so client TTFT minus decode TTFT is exactly one client-worker round trip
// with its HTTP and SSE handling. The router's extra = its added latency minus that round trip.
// Also printed: a bare GET /health round trip.
import type { PdCluster } from './pd-cluster.ts';

export interface AddedLatency {
  requests: number;
  addedMs: { p50: number; p90: number; max: number };
  decodeTtftMs: { p50: number };
  clientTtftMs: { p50: number };
  loopbackRttMs: { p50: number };
  /** Client TTFT minus decode TTFT with the client driving the pair itself (one round trip). */
  directRoundTripMs: { p50: number; p90: number };
}

const pct = (xs: number[], p: number): number => {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor(p * s.length))] ?? Number.NaN;
};

const body = (i: number, extra: Record<string, unknown> = {}) =>
  JSON.stringify({
    model: 'm',
    messages: [
      { role: 'user', content: `Measure the added latency, request ${i}. ${'x '.repeat(64)}` },
    ],
    max_tokens: 4,
    stream: true,
    ...extra,
  });

async function firstContentAt(res: Response): Promise<number> {
  const reader = res.body?.getReader();
  if (!reader) throw new Error('no body');
  const dec = new TextDecoder();
  let buf = '';
  let at = Number.NaN;
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    buf += dec.decode(value, { stream: true });
    if (Number.isNaN(at) && /"content":"[^"]/.test(buf)) at = performance.now();
  }
  return at;
}

export async function measureAddedLatency(c: PdCluster, n: number): Promise<AddedLatency> {
  const before = new Set(c.decode.flatMap((d) => d.app.mockPd.transfers));
  const client: { sent: number; first: number }[] = [];
  for (let i = 0; i < n; i++) {
    const sent = performance.now();
    const res = await fetch(`${c.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: body(i),
    });
    if (res.status !== 200) throw new Error(`request ${i}: ${res.status} ${await res.text()}`);
    client.push({ sent, first: await firstContentAt(res) });
  }
  const records = c.decode
    .flatMap((d) => d.app.mockPd.transfers)
    .filter((t) => !before.has(t))
    .sort((a, b) => a.arrivalAt - b.arrivalAt);
  if (records.length !== n) throw new Error(`expected ${n} decode records, got ${records.length}`);
  const added: number[] = [];
  const decodeTtft: number[] = [];
  const clientTtft: number[] = [];
  records.forEach((r, i) => {
    const cl = client[i] as { sent: number; first: number };
    const own = (r.firstTokenAt ?? Number.NaN) - r.arrivalAt;
    decodeTtft.push(own);
    clientTtft.push(cl.first - cl.sent);
    added.push(cl.first - cl.sent - own);
  });
  const direct = await directRoundTrips(c, n);
  const rtt: number[] = [];
  const d0 = c.decode[0]?.url as string;
  for (let i = 0; i < n; i++) {
    const t = performance.now();
    await (await fetch(`${d0}/health`)).text();
    rtt.push(performance.now() - t);
  }
  return {
    requests: n,
    addedMs: { p50: pct(added, 0.5), p90: pct(added, 0.9), max: Math.max(...added) },
    decodeTtftMs: { p50: pct(decodeTtft, 0.5) },
    clientTtftMs: { p50: pct(clientTtft, 0.5) },
    loopbackRttMs: { p50: pct(rtt, 0.5) },
    directRoundTripMs: { p50: pct(direct, 0.5), p90: pct(direct, 0.9) },
  };
}

/** The client drives pairs itself (no router): client TTFT minus decode TTFT, per request. */
async function directRoundTrips(c: PdCluster, n: number): Promise<number[]> {
  const p = c.prefill[0];
  const d = c.decode[0];
  if (!p || !d) throw new Error('need a prefill and a decode worker');
  const out: number[] = [];
  for (let i = 0; i < n; i++) {
    const room = 1_000_000 + i;
    const boot = `"bootstrap_host":"127.0.0.1","bootstrap_port":${p.app.mockPd.bootstrap?.port},"bootstrap_room":${room}`;
    const withBoot = (b: string) => `{${boot},${b.slice(1)}`;
    const sent = performance.now();
    const init = { method: 'POST', headers: { 'content-type': 'application/json' } };
    const [pr, dr] = await Promise.all([
      fetch(`${p.url}/v1/chat/completions`, { ...init, body: withBoot(body(i)) }),
      fetch(`${d.url}/v1/chat/completions`, { ...init, body: withBoot(body(i)) }),
    ]);
    const first = await firstContentAt(dr);
    await pr.text();
    const t = d.app.mockPd.transfers.find((x) => x.room === String(room));
    if (!t?.firstTokenAt) throw new Error(`no decode record for room ${room}`);
    out.push(first - sent - (t.firstTokenAt - t.arrivalAt));
  }
  return out;
}

export function formatAddedLatency(style: string, m: AddedLatency): string {
  const f = (x: number) => x.toFixed(2);
  return `PD ${style}: router added latency over the decode side's own TTFT, ${m.requests} streams: p50 ${f(m.addedMs.p50)} ms, p90 ${f(m.addedMs.p90)} ms, max ${f(m.addedMs.max)} ms; one client-worker round trip (client driving the pair itself) p50 ${f(m.directRoundTripMs.p50)} ms, p90 ${f(m.directRoundTripMs.p90)} ms; router extra over it p50 ${f(m.addedMs.p50 - m.directRoundTripMs.p50)} ms (client TTFT p50 ${f(m.clientTtftMs.p50)} ms, decode TTFT p50 ${f(m.decodeTtftMs.p50)} ms, bare GET round trip p50 ${f(m.loopbackRttMs.p50)} ms)`;
}
