// A workload designed to be fitted from (`kvroute-sim fit`): requests that run alone on an
// idle worker, so each TTFT is one request's prefill plus the per-request overhead, and
// bursts of requests that decode together, so decode step time is seen at several batch
// sizes and contexts. Open loop (the default): arrivals are spaced by gapMs (lone requests)
// and burstGapMs (bursts) so the worker drains in between; make them longer than the target
// takes. Closed loop (`clients=N`): N clients send their lone requests one at a time, each
// on a rank of its own, and every burst group gets a rank too, so the whole probe runs side
// by side on N + contexts x bursts ranks and takes about as long as its slowest client.
import { optBool, optInt } from './options.ts';
import { concat, stream } from './random.ts';
import type { ScenarioDefinition, WorkloadPlan, WorkloadRequest } from './types.ts';

export const fitProbe: ScenarioDefinition = {
  name: 'fit-probe',
  description:
    'lone requests (cold, and a short suffix on cached prefixes of several lengths) then bursts of 2-16 requests on a shared cached context, spaced so each runs on an idle worker (or, with clients=N, N closed-loop clients on ranks of their own): input for kvroute-sim fit',
  defaults: {
    singles: 24,
    minTokens: 64,
    maxTokens: 4096,
    suffixTokens: 64,
    suffixMaxTokens: 0,
    singleOutputTokens: 8,
    bursts: '2,4,8,16',
    burstContextTokens: '512,3072',
    burstSuffixTokens: 32,
    burstOutputTokens: 32,
    gapMs: 3000,
    burstGapMs: 6000,
    ranks: 1,
    routingKeys: false,
    clients: 0,
    followUps: 1,
    thinkMs: 20,
    burstDelayMs: 2500,
  },
  build(o, seed) {
    const name = 'fit-probe';
    const singles = optInt(name, o, 'singles', 0);
    const minT = optInt(name, o, 'minTokens', 2);
    const maxT = optInt(name, o, 'maxTokens', minT);
    const suffix = optInt(name, o, 'suffixTokens', 1);
    const suffixMax = Math.max(suffix, optInt(name, o, 'suffixMaxTokens', 0));
    const singleOut = optInt(name, o, 'singleOutputTokens', 2);
    const burstOut = optInt(name, o, 'burstOutputTokens', 2);
    const gap = optInt(name, o, 'gapMs', 1);
    const burstGap = optInt(name, o, 'burstGapMs', 1);
    const ranks = optInt(name, o, 'ranks', 1);
    const keyed = optBool(name, o, 'routingKeys');
    const list = (key: string) =>
      String(o[key])
        .split(',')
        .map((s) => optInt(name, { [key]: s.trim() }, key, 1));
    const bursts = list('bursts');
    const burstContexts = list('burstContextTokens');
    const burstSuffix = optInt(name, o, 'burstSuffixTokens', 1);
    const clients = optInt(name, o, 'clients', 0);
    const think = optInt(name, o, 'thinkMs', 0);
    const followUps = optInt(name, o, 'followUps', 0);
    const burstDelay = optInt(name, o, 'burstDelayMs', 1);
    const content = stream(seed, `${name}:content`);
    const pick = stream(seed, `${name}:sizes`);
    const logUniformOf = (lo: number, hi: number) =>
      lo === hi ? lo : Math.round(Math.exp(Math.log(lo) + pick() * (Math.log(hi) - Math.log(lo))));
    if (clients > 0) {
      return closedLoop({
        name,
        ranks,
        clients,
        followUps,
        think,
        singles,
        minT,
        maxT,
        suffix,
        suffixMax,
        singleOut,
        bursts,
        burstContexts,
        burstSuffix,
        burstOut,
        burstDelay,
        tokens: (n) => content.tokens(n),
        logUniform: logUniformOf,
      });
    }
    const requests: WorkloadRequest[] = [];
    let t = 0;
    // With routingKeys, a request that needs an earlier one's cache carries its key, so a
    // target with several ranks and routing-key affinity serves the pair on one rank, and
    // gapMs can be the per-rank gap divided by the rank count.
    const add = (ids: Uint32Array, out: number, at: number, key: string, routing?: string) =>
      requests.push({
        id: requests.length,
        clientId: requests.length,
        inputIds: ids,
        outputTokens: out,
        arrivalMs: at,
        sessionKey: key,
        ...(keyed ? { routingKey: routing ?? key } : {}),
      });
    // Lone requests: even ones cold, odd ones the previous prompt plus a short fresh suffix,
    // so cached prefixes take every length the cold prompts had while the new tokens stay
    // few: reading the cache then shows apart from attention over new tokens. With
    // suffixMaxTokens the suffix length varies too (log-uniform up to it): cold prompts alone
    // charge attention and cached reads both by the square of the length, and only new
    // tokens on a cached prefix, in varied numbers, tell the two apart.
    const logUniform = logUniformOf;
    let prev: Uint32Array | null = null;
    const lone: { ids: Uint32Array; at: number; key: string }[] = [];
    // One rank, or no routing keys: one request per gap. Several ranks with routing keys: the
    // pairs of a round go to `ranks` different ranks (a new key goes to an idle rank), their
    // cold prompts one gap apart and the cached follow-ups a round later, so each rank still
    // sees one request per `ranks` gaps.
    const spread = keyed ? ranks : 1;
    for (let i = 0; i < singles; i++) {
      // Log-uniform sizes cover short (launch-bound) and long (compute-bound) prompts.
      const n = logUniform(minT, maxT);
      const ids: Uint32Array =
        i % 2 === 1 && prev !== null
          ? concat([prev, content.tokens(logUniform(suffix, suffixMax))])
          : content.tokens(n);
      const pair = i >> 1;
      const slot =
        spread === 1
          ? i
          : Math.floor(pair / spread) * 2 * spread + (i % 2) * spread + (pair % spread);
      lone.push({ ids, at: t + slot * gap, key: `single-${pair}` });
      prev = ids;
    }
    lone.sort((a, b) => a.at - b.at);
    for (const l of lone) add(l.ids, singleOut, l.at, l.key);
    if (lone.length > 0) t = lone[lone.length - 1]!.at + gap * spread;
    // Bursts share a cached context (sent once alone first) and differ by a short suffix:
    // their prefills are short and batch together, so their decode windows see no prefill,
    // while the context they decode over is long enough to show its cost.
    for (const len of burstContexts) {
      const context = content.tokens(len);
      add(context, 2, t, `burst-context-${len}`, `burst-${len}`);
      t += gap;
      for (const b of bursts) {
        for (let k = 0; k < b; k++) {
          add(
            concat([context, content.tokens(burstSuffix)]),
            burstOut,
            t,
            `burst-${len}-${b}`,
            `burst-${len}`,
          );
        }
        t += burstGap;
      }
    }
    return { scenario: name, mode: 'open', ranks, clients: [], requests, events: [] };
  },
};

interface ClosedLoopSpec {
  name: string;
  ranks: number;
  clients: number;
  followUps: number;
  think: number;
  singles: number;
  minT: number;
  maxT: number;
  suffix: number;
  suffixMax: number;
  singleOut: number;
  bursts: number[];
  burstContexts: number[];
  burstSuffix: number;
  burstOut: number;
  burstDelay: number;
  tokens(n: number): Uint32Array;
  logUniform(lo: number, hi: number): number;
}

/**
 * The probe as closed-loop clients, each keeping to one rank through its routing key: a
 * client sends its next lone request `thinkMs` after the previous one ended, so every lone
 * request finds its rank idle without a gap sized for the longest one, and `clients` ranks
 * take them side by side. Each (context, burst size) pair is a group of its own (one key,
 * so one more rank): its context alone at 0, then the burst's requests together
 * `burstDelayMs` later. With `clients + contexts x bursts` ranks every part runs at once.
 */
function closedLoop(s: ClosedLoopSpec): WorkloadPlan {
  const lists: WorkloadRequest[][] = [];
  let id = 0;
  const req = (
    clientId: number,
    ids: Uint32Array,
    out: number,
    thinkMs: number,
    sessionKey: string,
    routingKey: string,
  ): WorkloadRequest => ({
    id: id++,
    clientId,
    inputIds: ids,
    outputTokens: out,
    thinkMs,
    sessionKey,
    routingKey,
  });
  for (let c = 0; c < s.clients; c++) lists.push([]);
  // Lone requests in chains (a cold prompt, then `followUps` requests that each add a fresh
  // suffix to the one before), the chains dealt to the clients in turn; sizes are drawn in
  // chain order so they do not depend on the client count.
  let prev: Uint32Array | null = null;
  const chain = s.followUps + 1;
  for (let i = 0; i < s.singles; i++) {
    const pair = Math.floor(i / chain);
    const ids: Uint32Array =
      i % chain !== 0 && prev !== null
        ? concat([prev, s.tokens(s.logUniform(s.suffix, s.suffixMax))])
        : s.tokens(s.logUniform(s.minT, s.maxT));
    prev = ids;
    const c = pair % s.clients;
    const list = lists[c]!;
    list.push(
      req(c, ids, s.singleOut, list.length === 0 ? 0 : s.think, `single-${pair}`, `probe-${c}`),
    );
  }
  for (const len of s.burstContexts) {
    for (const b of s.bursts) {
      const key = `burst-${len}-${b}`;
      const context = s.tokens(len);
      lists.push([req(lists.length, context, 2, 0, `burst-context-${len}-${b}`, key)]);
      for (let k = 0; k < b; k++) {
        const ids = concat([context, s.tokens(s.burstSuffix)]);
        lists.push([req(lists.length, ids, s.burstOut, s.burstDelay, key, key)]);
      }
    }
  }
  const clients = lists.filter((l) => l.length > 0);
  clients.forEach((l, i) => {
    for (const r of l) r.clientId = i;
  });
  return {
    scenario: s.name,
    mode: 'closed',
    ranks: s.ranks,
    clients,
    requests: [],
    events: [],
  };
}
