// The CPU cost of building a PD pair's two bodies from a client's chat body (`pnpm --filter
// @kvroute/router bench:pd-bodies`): the router's withMembers (one structural walk and one copy
// per body) against the way it was first written (one walk per member set or dropped, and a
// copy per cut), median of alternating rounds so machine load falls on both alike.
import { topLevelSpans, withRoutedRank } from '@kvroute/protocol';
import { type Members, withMembers } from '../src/pd/body.ts';

const arg = process.argv.slice(2).find((a) => a !== '--');
if (arg === '--help' || arg === '-h') {
  console.log(
    'usage: pnpm --filter @kvroute/router bench:pd-bodies [-- TURNS]\n\nTURNS: turns in the chat body (a positive whole number, default 40)',
  );
  process.exit(0);
}
const turns = Number(arg ?? 40);
if (!Number.isInteger(turns) || turns <= 0) {
  console.error(`TURNS must be a positive whole number of chat turns, got '${arg}'`);
  process.exit(2);
}
const msgs = Array.from({ length: turns }, (_, i) => ({
  role: i % 2 ? 'assistant' : 'user',
  content: `turn ${i} ${'lorem ipsum dolor sit amet '.repeat(60)}`,
}));
const raw = Buffer.from(
  JSON.stringify({
    model: 'm',
    messages: msgs,
    max_tokens: 256,
    stream: true,
    stream_options: { include_usage: true },
  }),
);

function perMember(body: Buffer, members: Members, drop: string[] = []): Buffer {
  for (const key of [...Object.keys(members), ...drop]) {
    const spans = topLevelSpans(body, key);
    if (spans.length > 0) body = withRoutedRank(body, spans, undefined);
  }
  return Buffer.concat([body.subarray(0, 1), Buffer.from('"bootstrap_room":1,'), body.subarray(1)]);
}

const prefill: Members = {
  bootstrap_host: '10.0.0.1',
  bootstrap_port: 8998,
  bootstrap_room: 5n,
  routed_dp_rank: 1,
  stream: false,
};
const decode: Members = {
  bootstrap_host: '10.0.0.1',
  bootstrap_port: 8998,
  bootstrap_room: 5n,
  routed_dp_rank: 0,
  disagg_prefill_dp_rank: 1,
};
const before = () => {
  perMember(raw, prefill, ['stream_options']);
  perMember(raw, decode);
};
const now = () => {
  withMembers(raw, prefill, ['stream_options']);
  withMembers(raw, decode);
};
for (let i = 0; i < 300; i++) {
  before();
  now();
}
const a: number[] = [];
const b: number[] = [];
for (let r = 0; r < 40; r++) {
  let t = performance.now();
  for (let i = 0; i < 50; i++) before();
  a.push((performance.now() - t) / 50);
  t = performance.now();
  for (let i = 0; i < 50; i++) now();
  b.push((performance.now() - t) / 50);
}
const median = (x: number[]) => ([...x].sort((p, q) => p - q)[x.length >> 1] ?? Number.NaN) * 1000;
console.log(
  `PD pair bodies from a ${raw.length}-byte chat body (${turns} turns), median of 40 alternating rounds: one walk and one copy per body ${median(b).toFixed(0)} us, a walk per member ${median(a).toFixed(0)} us`,
);
