// The router's added latency in PD mode: per streaming request, the client's time to its first
// content token through the router, minus the decode worker's own TTFT (from its arrival to its
// first output token, stamped by the mock in the same process, so one clock).
//
// The yardstick for the target (the router adds no more than one extra round trip) is taken
// the same way at the same moment: the client drives the pair itself, straight to the workers,
// with the same requests the router would send. For the SGLang style that is both requests at
// once (bootstrap fields added), so client TTFT minus decode TTFT is exactly one client-worker
// round trip with its HTTP and SSE handling. For the vLLM style it is vLLM's own two steps (the
// prefill with max_tokens 1 and kv_transfer_params, its answer awaited, then the decode with
// the returned kv_transfer_params), as vLLM's proxy runs them, which by design holds the
// prefill's whole round trip before the decode leaves; the router cannot send the decode any
// earlier either, so the yardstick holds it too. The router's extra = its added latency minus
// that direct figure: what putting the router between the client and the workers costs, one
// extra hop (client-router) plus the router's own work; the target is that extra within one
// round trip (the direct figure).
//
// Router and direct requests alternate (which one goes first alternates too), so load from
// other processes on a shared machine falls on both alike. Percentiles are per distribution;
// the extra is compared at the same percentile.
import type { PdCluster } from './pd-cluster.ts';

export type PdStyle = 'sglang' | 'vllm';

interface Pcts {
  p50: number;
  p90: number;
  p99: number;
}

export interface AddedLatency {
  style: PdStyle;
  requests: number;
  /** Through the router: client TTFT minus the decode side's own TTFT. */
  addedMs: Pcts & { max: number };
  /** The client driving the pair itself: client TTFT minus decode TTFT (one round trip). */
  directRoundTripMs: Pcts;
  /** Client TTFT through the router and driving the pair itself (what a client sees). */
  clientTtftMs: { router: Pcts; direct: Pcts };
  decodeTtftMs: { router: Pcts; direct: Pcts };
  loopbackRttMs: { p50: number };
}

const pct = (xs: number[], p: number): number => {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor(p * s.length))] ?? Number.NaN;
};
const pcts = (xs: number[]): Pcts => ({ p50: pct(xs, 0.5), p90: pct(xs, 0.9), p99: pct(xs, 0.99) });

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

interface Sample {
  clientTtft: number;
  decodeTtft: number;
}

/** The one decode record a request (sent alone) added on any decode worker. */
function newRecord(c: PdCluster, before: number[]) {
  const fresh = c.decode.flatMap((d, k) => d.app.mockPd.transfers.slice(before[k] ?? 0));
  if (fresh.length !== 1) throw new Error(`expected one new decode record, got ${fresh.length}`);
  const r = fresh[0]!;
  if (r.firstTokenAt === undefined) throw new Error(`decode record ${r.room} has no first token`);
  return r;
}

const counts = (c: PdCluster) => c.decode.map((d) => d.app.mockPd.transfers.length);
const init = { method: 'POST', headers: { 'content-type': 'application/json' } };

async function viaRouter(c: PdCluster, i: number): Promise<Sample> {
  const before = counts(c);
  const sent = performance.now();
  const res = await fetch(`${c.url}/v1/chat/completions`, { ...init, body: body(i) });
  if (res.status !== 200) throw new Error(`request ${i}: ${res.status} ${await res.text()}`);
  const first = await firstContentAt(res);
  const r = newRecord(c, before);
  return { clientTtft: first - sent, decodeTtft: (r.firstTokenAt as number) - r.arrivalAt };
}

/** The client drives one pair itself (no router), as the router would in `style`. */
async function direct(c: PdCluster, style: PdStyle, i: number): Promise<Sample> {
  const p = c.prefill[0];
  const d = c.decode[0];
  if (!p || !d) throw new Error('need a prefill and a decode worker');
  const before = counts(c);
  let first: number;
  let sent: number;
  if (style === 'sglang') {
    const room = 1_000_000 + i;
    const boot = `"bootstrap_host":"127.0.0.1","bootstrap_port":${p.app.mockPd.bootstrap?.port},"bootstrap_room":${room}`;
    const withBoot = (b: string) => `{${boot},${b.slice(1)}`;
    sent = performance.now();
    const [pr, dr] = await Promise.all([
      fetch(`${p.url}/v1/chat/completions`, {
        ...init,
        body: withBoot(body(i, { stream: false })),
      }),
      fetch(`${d.url}/v1/chat/completions`, { ...init, body: withBoot(body(i)) }),
    ]);
    first = await firstContentAt(dr);
    await pr.text();
  } else {
    sent = performance.now();
    const pr = await fetch(`${p.url}/v1/chat/completions`, {
      ...init,
      body: body(i, {
        stream: false,
        max_tokens: 1,
        kv_transfer_params: {
          do_remote_decode: true,
          do_remote_prefill: false,
          remote_engine_id: null,
          remote_block_ids: null,
          remote_host: null,
          remote_port: null,
        },
      }),
    });
    const kv = ((await pr.json()) as { kv_transfer_params?: unknown }).kv_transfer_params;
    const dr = await fetch(`${d.url}/v1/chat/completions`, {
      ...init,
      body: body(i, { kv_transfer_params: kv }),
    });
    first = await firstContentAt(dr);
  }
  const r = newRecord(c, before);
  return { clientTtft: first - sent, decodeTtft: (r.firstTokenAt as number) - r.arrivalAt };
}

export async function measureAddedLatency(
  c: PdCluster,
  n: number,
  style: PdStyle = 'sglang',
): Promise<AddedLatency> {
  const routed: Sample[] = [];
  const straight: Sample[] = [];
  for (let i = 0; i < n; i++) {
    if (i % 2 === 0) {
      routed.push(await viaRouter(c, i));
      straight.push(await direct(c, style, i));
    } else {
      straight.push(await direct(c, style, i));
      routed.push(await viaRouter(c, i));
    }
  }
  const rtt: number[] = [];
  const d0 = c.decode[0]?.url as string;
  for (let i = 0; i < Math.min(n, 100); i++) {
    const t = performance.now();
    await (await fetch(`${d0}/health`)).text();
    rtt.push(performance.now() - t);
  }
  const added = routed.map((s) => s.clientTtft - s.decodeTtft);
  return {
    style,
    requests: n,
    addedMs: { ...pcts(added), max: Math.max(...added) },
    directRoundTripMs: pcts(straight.map((s) => s.clientTtft - s.decodeTtft)),
    clientTtftMs: {
      router: pcts(routed.map((s) => s.clientTtft)),
      direct: pcts(straight.map((s) => s.clientTtft)),
    },
    decodeTtftMs: {
      router: pcts(routed.map((s) => s.decodeTtft)),
      direct: pcts(straight.map((s) => s.decodeTtft)),
    },
    loopbackRttMs: { p50: pct(rtt, 0.5) },
  };
}

export function formatAddedLatency(m: AddedLatency): string {
  const f = (x: number) => x.toFixed(2);
  const within = (p: 'p50' | 'p99') => {
    const extra = m.addedMs[p] - m.directRoundTripMs[p];
    return `${f(extra)} ms (${extra <= m.directRoundTripMs[p] ? 'within' : 'MORE than'} one round trip)`;
  };
  return [
    `PD ${m.style}, ${m.requests} streams, router and direct alternating:`,
    `  added over the decode side's own TTFT, through the router: p50 ${f(m.addedMs.p50)} ms, p90 ${f(m.addedMs.p90)} ms, p99 ${f(m.addedMs.p99)} ms, max ${f(m.addedMs.max)} ms`,
    `  one round trip (the client driving the pair itself${m.style === 'vllm' ? ", vLLM's two steps" : ''}): p50 ${f(m.directRoundTripMs.p50)} ms, p90 ${f(m.directRoundTripMs.p90)} ms, p99 ${f(m.directRoundTripMs.p99)} ms`,
    `  router extra over it: p50 ${within('p50')}, p99 ${within('p99')}`,
    `  client TTFT router/direct: p50 ${f(m.clientTtftMs.router.p50)}/${f(m.clientTtftMs.direct.p50)} ms, p99 ${f(m.clientTtftMs.router.p99)}/${f(m.clientTtftMs.direct.p99)} ms; decode TTFT router/direct p50 ${f(m.decodeTtftMs.router.p50)}/${f(m.decodeTtftMs.direct.p50)} ms; bare GET round trip p50 ${f(m.loopbackRttMs.p50)} ms`,
  ].join('\n');
}
