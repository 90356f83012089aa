// Attribution of the replicas e2e's lost cache hits, request by request (scripts/replicas-trace.ts).
// A request's reusable prefix is the longest prefix of its prompt any worker had published as
// stored before the client sent it (what an index with no lag could have known). Tokens below
// that and not served from cache are lost, and put in one of these bins:
//   moved        a later turn went to another rank than its session's previous turn
//                (split by whether the same replica routed the previous turn, and by how long
//                before the send the previous turn's blocks were published)
//   other        anything else (eviction, a hot rank avoided)
// and, with no reusable prefix at send time:
//   first-race   a session's first turn whose tenant's system prompt was being computed for
//                another session (sent earlier, not yet published): one router's own record
//                sends it to that rank, replicas other than that session's cannot know.
import { chainedBlockKeys } from '@kvroute/policy';
import type { RequestTrace, Workload } from './replicas.ts';

/** Per rank: block key -> Date.now() it was first published as stored. */
export type Published = readonly Map<number, number>[];

export interface TraceAnalysis {
  requests: number;
  promptTokens: number;
  cachedTokens: number;
  reusableTokens: number;
  /** Later turns routed to another rank than the previous turn's. */
  moved: number;
  movedSameReplica: number;
  lostMovedTokens: number;
  /** Lost tokens of moved turns, by the age of the previous turn's blocks at send (ms). */
  lostMovedByAge: Record<string, number>;
  movedByAge: Record<string, number>;
  /** Later turns by age of the previous turn's blocks at send (all, moved or not). */
  turnsByAge: Record<string, number>;
  firstRaces: number;
  lostFirstRaceTokens: number;
  lostOtherTokens: number;
  /** Reasons of moved turns. */
  movedReasons: Record<string, number>;
}

const AGE_BINS = [10, 25, 50, 100, 250, 1000] as const;
function ageBin(ms: number): string {
  if (!Number.isFinite(ms)) return 'unpublished';
  for (const b of AGE_BINS) if (ms < b) return `<${b}`;
  return `>=${AGE_BINS[AGE_BINS.length - 1]}`;
}

/** Leading keys of `keys` published on `m` before `t`. */
function publishedPrefix(keys: readonly number[], m: Map<number, number>, t: number): number {
  let n = 0;
  while (n < keys.length && (m.get(keys[n] as number) ?? Infinity) < t) n++;
  return n;
}

export function analyseTrace(
  trace: readonly RequestTrace[],
  prompts: ReadonlyMap<string, Uint32Array>,
  published: Published,
  blockSize: number,
  workload: Workload,
): TraceAnalysis {
  const a: TraceAnalysis = {
    requests: trace.length,
    promptTokens: 0,
    cachedTokens: 0,
    reusableTokens: 0,
    moved: 0,
    movedSameReplica: 0,
    lostMovedTokens: 0,
    lostMovedByAge: {},
    movedByAge: {},
    turnsByAge: {},
    firstRaces: 0,
    lostFirstRaceTokens: 0,
    lostOtherTokens: 0,
    movedReasons: {},
  };
  const bump = (o: Record<string, number>, k: string, v = 1) => {
    o[k] = (o[k] ?? 0) + v;
  };
  const byKey = new Map<string, RequestTrace>();
  for (const r of trace) byKey.set(`${r.session}:${r.turn}`, r);
  const sorted = [...trace].sort((x, y) => x.sentAt - y.sentAt);
  for (const r of sorted) {
    const ids = prompts.get(`${r.session}:${r.turn}`);
    if (!ids) throw new Error(`no prompt for session ${r.session} turn ${r.turn}`);
    const keys = chainedBlockKeys(ids, blockSize, ids.length);
    let reusable = 0;
    for (const m of published) reusable = Math.max(reusable, publishedPrefix(keys, m, r.sentAt));
    reusable *= blockSize;
    a.promptTokens += r.promptTokens;
    a.cachedTokens += r.cachedTokens;
    a.reusableTokens += reusable;
    const lost = Math.max(0, reusable - r.cachedTokens);
    if (r.turn > 0) {
      const prev = byKey.get(`${r.session}:${r.turn - 1}`);
      if (!prev) throw new Error(`trace lacks session ${r.session} turn ${r.turn - 1}`);
      const prevIds = prompts.get(`${r.session}:${r.turn - 1}`) as Uint32Array;
      const prevKeys = chainedBlockKeys(prevIds, blockSize, prevIds.length);
      const last = prevKeys[prevKeys.length - 1];
      const pubAt =
        last === undefined
          ? Number.NaN
          : (published[prev.rank]?.get(last) ?? Number.POSITIVE_INFINITY);
      const age = ageBin(r.sentAt - pubAt);
      bump(a.turnsByAge, age);
      if (r.rank !== prev.rank) {
        a.moved++;
        if (r.replica === prev.replica) a.movedSameReplica++;
        bump(a.movedByAge, age);
        bump(a.lostMovedByAge, age, lost);
        bump(a.movedReasons, r.reason);
        a.lostMovedTokens += lost;
        continue;
      }
      a.lostOtherTokens += lost;
      continue;
    }
    // A first turn: did another session of its tenant send its first turn earlier, whose
    // system prompt was not yet published anywhere?
    const tenant = Math.floor(r.session / workload.sessionsPerTenant);
    let raced = false;
    for (
      let s = tenant * workload.sessionsPerTenant;
      s < (tenant + 1) * workload.sessionsPerTenant;
      s++
    ) {
      const o = byKey.get(`${s}:0`);
      if (o && o.session !== r.session && o.sentAt <= r.sentAt && reusable === 0) raced = true;
    }
    if (raced) {
      // What it could have reused on the other session's rank: the system prompt's blocks.
      const sys = byKey.get(`${r.session}:0`);
      const firstOther = sorted.find(
        (o) =>
          o.turn === 0 &&
          o.session !== r.session &&
          Math.floor(o.session / workload.sessionsPerTenant) === tenant,
      );
      const otherIds = firstOther && prompts.get(`${firstOther.session}:0`);
      let common = 0;
      if (otherIds) {
        const ok = chainedBlockKeys(otherIds, blockSize, otherIds.length);
        while (common < keys.length && common < ok.length && keys[common] === ok[common]) common++;
      }
      if (sys && r.rank !== firstOther?.rank) {
        a.firstRaces++;
        a.lostFirstRaceTokens += Math.max(0, common * blockSize - r.cachedTokens);
      }
      continue;
    }
    a.lostOtherTokens += lost;
  }
  return a;
}

export function formatAnalysis(a: TraceAnalysis): string {
  const pct = (x: number) => `${((100 * x) / a.promptTokens).toFixed(1)} pt`;
  const bins = (o: Record<string, number>) =>
    Object.entries(o)
      .map(([k, v]) => `${k}: ${v}`)
      .join(', ');
  return [
    `requests ${a.requests}, prompt tokens ${a.promptTokens}, cached ${a.cachedTokens} (${pct(a.cachedTokens)}), reusable at send ${a.reusableTokens}`,
    `later turns by age of the previous turn's blocks at send (ms): ${bins(a.turnsByAge)}`,
    `moved to another rank than the previous turn: ${a.moved} (${a.movedSameReplica} by the same replica), reasons ${bins(a.movedReasons)}; lost ${a.lostMovedTokens} tokens (${pct(a.lostMovedTokens)})`,
    `  moved by age: ${bins(a.movedByAge)}; lost tokens by age: ${bins(a.lostMovedByAge)}`,
    `first turns racing their tenant's other session to another rank: ${a.firstRaces}, lost ${a.lostFirstRaceTokens} tokens (${pct(a.lostFirstRaceTokens)})`,
    `other lost tokens: ${a.lostOtherTokens} (${pct(a.lostOtherTokens)})`,
  ].join('\n');
}
