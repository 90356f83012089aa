// Many agent sessions: each tenant has its own system + tools prefix, tenants are Zipf
// popular, sessions arrive as a Poisson process and run several turns, each turn appending
// the model's reply and the tool's output to the session history.
import { optInt, optNum, optPositive, optRange } from './options.ts';
import { stream, zipfSampler } from './random.ts';
import { buildSession } from './session.ts';
import type { ScenarioDefinition, WorkloadRequest } from './types.ts';

export const agentic: ScenarioDefinition = {
  name: 'agentic',
  description:
    'Poisson-arriving multi-turn agent sessions over per-tenant system+tools prefixes with Zipf tenant popularity; each turn appends the reply and tool output',
  defaults: {
    sessions: 200,
    sessionsPerS: 0.5,
    tenants: 8,
    zipfS: 1.1,
    prefixMinTokens: 4000,
    prefixMaxTokens: 16000,
    turnsMin: 3,
    turnsMax: 12,
    userMinTokens: 32,
    userMaxTokens: 256,
    outputMinTokens: 64,
    outputMaxTokens: 400,
    toolMinTokens: 100,
    toolMaxTokens: 2000,
    thinkMinMs: 500,
    thinkMaxMs: 3000,
    ranks: 16,
  },
  build(o, seed) {
    const name = 'agentic';
    const sessions = optInt(name, o, 'sessions', 1);
    const rate = optPositive(name, o, 'sessionsPerS');
    const tenants = optInt(name, o, 'tenants', 1);
    const zipfS = optNum(name, o, 'zipfS', 0);
    const [pMin, pMax] = optRange(name, o, 'prefixMinTokens', 'prefixMaxTokens', 1);
    const [tMin, tMax] = optRange(name, o, 'turnsMin', 'turnsMax', 1);
    const [uMin, uMax] = optRange(name, o, 'userMinTokens', 'userMaxTokens', 1);
    const [outMin, outMax] = optRange(name, o, 'outputMinTokens', 'outputMaxTokens', 1);
    const [toolMin, toolMax] = optRange(name, o, 'toolMinTokens', 'toolMaxTokens', 0);
    const [thinkMin, thinkMax] = optRange(name, o, 'thinkMinMs', 'thinkMaxMs', 0);
    const ranks = optInt(name, o, 'ranks', 1);
    const prefixes = stream(seed, `${name}:prefixes`);
    const tenantPrefix = Array.from({ length: tenants }, () =>
      prefixes.tokens(prefixes.int(pMin, pMax)),
    );
    const pick = zipfSampler(tenants, zipfS);
    const arrivals = stream(seed, `${name}:arrivals`);
    const content = stream(seed, `${name}:content`);
    const timing = stream(seed, `${name}:timing`);
    const clients: WorkloadRequest[][] = [];
    let t = 0;
    let id = 0;
    for (let s = 0; s < sessions; s++) {
      t += arrivals.exp(1000 / rate);
      const tenant = pick(arrivals());
      const turns = buildSession(content, {
        prefix: tenantPrefix[tenant]!,
        turns: content.int(tMin, tMax),
        firstUserTokens: () => content.int(uMin, uMax),
        replyTokens: () => content.int(outMin, outMax),
        appendTokens: () => content.int(toolMin, toolMax),
      });
      const key = `session-${s}`;
      clients.push(
        turns.map((turn, i) => ({
          id: id++,
          clientId: s,
          inputIds: turn.inputIds,
          outputIds: turn.outputIds,
          outputTokens: turn.outputTokens,
          // The first request's delay from t=0 is the session's arrival time.
          thinkMs: i === 0 ? Math.round(t) : timing.int(thinkMin, thinkMax),
          routingKey: key,
          sessionKey: key,
          tenant: `tenant-${tenant}`,
        })),
      );
    }
    return { scenario: name, mode: 'closed', ranks, clients, requests: [], events: [] };
  },
};
