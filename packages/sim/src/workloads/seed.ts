// The seed scenarios: the prefix_match proposal's measurements. One 22,651-token
// system + tools prefix on 16 ranks; `seed-sequential` is one client, `seed-concurrent` four
// agents whose sessions grow every turn.
import { optBool, optInt, optRange, WorkloadOptionError } from './options.ts';
import { concat, stream } from './random.ts';
import { buildSession } from './session.ts';
import type { ScenarioDefinition, WorkloadRequest } from './types.ts';

export const SEED_PREFIX_TOKENS = 22_651;

export const seedSequential: ScenarioDefinition = {
  name: 'seed-sequential',
  description:
    'one closed-loop client, 30 requests over one 22,651-token system+tools prefix, each with a distinct short user turn (accumulate=true: an agent session carrying earlier turns and replies)',
  defaults: {
    requests: 30,
    prefixTokens: SEED_PREFIX_TOKENS,
    turnMinTokens: 32,
    turnMaxTokens: 96,
    outputMinTokens: 64,
    outputMaxTokens: 192,
    thinkMinMs: 1000,
    thinkMaxMs: 3000,
    accumulate: false,
    ranks: 16,
  },
  build(o, seed) {
    const name = 'seed-sequential';
    const n = optInt(name, o, 'requests', 1);
    const prefixTokens = optInt(name, o, 'prefixTokens', 1);
    const [turnMin, turnMax] = optRange(name, o, 'turnMinTokens', 'turnMaxTokens', 1);
    const [outMin, outMax] = optRange(name, o, 'outputMinTokens', 'outputMaxTokens', 1);
    const [thinkMin, thinkMax] = optRange(name, o, 'thinkMinMs', 'thinkMaxMs', 0);
    const accumulate = optBool(name, o, 'accumulate');
    const ranks = optInt(name, o, 'ranks', 1);
    const content = stream(seed, `${name}:content`);
    const timing = stream(seed, `${name}:timing`);
    const prefix = content.tokens(prefixTokens);
    const requests: WorkloadRequest[] = [];
    if (accumulate) {
      const turns = buildSession(content, {
        prefix,
        turns: n,
        firstUserTokens: () => content.int(turnMin, turnMax),
        replyTokens: () => content.int(outMin, outMax),
        appendTokens: () => content.int(turnMin, turnMax),
      });
      for (const [i, t] of turns.entries()) {
        requests.push({
          id: i,
          clientId: 0,
          inputIds: t.inputIds,
          outputIds: t.outputIds,
          outputTokens: t.outputTokens,
          thinkMs: i === 0 ? 0 : timing.int(thinkMin, thinkMax),
          routingKey: 'session-0',
          sessionKey: 'session-0',
        });
      }
    } else {
      for (let i = 0; i < n; i++) {
        requests.push({
          id: i,
          clientId: 0,
          inputIds: concat([prefix, content.tokens(content.int(turnMin, turnMax))]),
          outputTokens: content.int(outMin, outMax),
          thinkMs: i === 0 ? 0 : timing.int(thinkMin, thinkMax),
          routingKey: `turn-${i}`,
          sessionKey: 'seed-prefix',
        });
      }
    }
    return { scenario: name, mode: 'closed', ranks, clients: [requests], requests: [], events: [] };
  },
};

export const seedConcurrent: ScenarioDefinition = {
  name: 'seed-concurrent',
  description:
    '4 closed-loop agents over the same 22,651-token prefix, each a multi-turn session growing by the reply and tool output every turn; requests/s after a warm-up',
  defaults: {
    agents: 4,
    prefixTokens: SEED_PREFIX_TOKENS,
    turnsPerSession: 20,
    userMinTokens: 32,
    userMaxTokens: 96,
    outputMinTokens: 64,
    outputMaxTokens: 192,
    // A coding agent's observations (file views, command and test output) run to one or two
    // thousand tokens; with 20 turns a session grows from 22.6k to ~50k tokens.
    toolMinTokens: 500,
    toolMaxTokens: 2500,
    thinkMinMs: 500,
    thinkMaxMs: 2000,
    durationMs: 1_200_000,
    warmupMs: 300_000,
    requestsPerAgent: 400,
    ranks: 16,
  },
  build(o, seed) {
    const name = 'seed-concurrent';
    const agents = optInt(name, o, 'agents', 1);
    const prefixTokens = optInt(name, o, 'prefixTokens', 1);
    const turns = optInt(name, o, 'turnsPerSession', 1);
    const [userMin, userMax] = optRange(name, o, 'userMinTokens', 'userMaxTokens', 1);
    const [outMin, outMax] = optRange(name, o, 'outputMinTokens', 'outputMaxTokens', 1);
    const [toolMin, toolMax] = optRange(name, o, 'toolMinTokens', 'toolMaxTokens', 0);
    const [thinkMin, thinkMax] = optRange(name, o, 'thinkMinMs', 'thinkMaxMs', 0);
    const durationMs = optInt(name, o, 'durationMs', 1);
    const warmupMs = optInt(name, o, 'warmupMs', 0);
    const perAgent = optInt(name, o, 'requestsPerAgent', 1);
    const ranks = optInt(name, o, 'ranks', 1);
    if (warmupMs >= durationMs) {
      throw new WorkloadOptionError(
        `${name}: warmupMs (${warmupMs}) must be < durationMs (${durationMs})`,
      );
    }
    const prefix = stream(seed, `${name}:prefix`).tokens(prefixTokens);
    const clients: WorkloadRequest[][] = [];
    let id = 0;
    for (let a = 0; a < agents; a++) {
      const content = stream(seed, `${name}:agent-${a}`);
      const timing = stream(seed, `${name}:agent-${a}:timing`);
      const list: WorkloadRequest[] = [];
      for (let s = 0; list.length < perAgent; s++) {
        const session = buildSession(content, {
          prefix,
          turns,
          firstUserTokens: () => content.int(userMin, userMax),
          replyTokens: () => content.int(outMin, outMax),
          appendTokens: () => content.int(toolMin, toolMax),
        });
        const key = `agent-${a}-session-${s}`;
        for (const t of session) {
          if (list.length >= perAgent) break;
          list.push({
            id: id++,
            clientId: a,
            inputIds: t.inputIds,
            outputIds: t.outputIds,
            outputTokens: t.outputTokens,
            // Agents start staggered by one think time, as four people starting agents would.
            thinkMs: timing.int(thinkMin, thinkMax),
            routingKey: key,
            sessionKey: key,
          });
        }
      }
      clients.push(list);
    }
    return {
      scenario: name,
      mode: 'closed',
      ranks,
      clients,
      requests: [],
      events: [],
      durationMs,
      warmupMs,
    };
  },
};
