// SGLang's generated-shared-prefix benchmark: groups of prompts, each group sharing one
// system prompt, each prompt adding its own question; requests shuffled and sent open loop.
import { optInt, optNum } from './options.ts';
import { concat, stream } from './random.ts';
import type { ScenarioDefinition, WorkloadRequest } from './types.ts';

export const sharedPrefix: ScenarioDefinition = {
  name: 'shared-prefix',
  description:
    "groups x prompts per group sharing one system prompt per group, like SGLang's generated-shared-prefix benchmark; Poisson arrivals",
  defaults: {
    groups: 64,
    promptsPerGroup: 16,
    systemPromptTokens: 2048,
    questionTokens: 128,
    outputTokens: 256,
    requestsPerS: 16,
    ranks: 16,
  },
  build(o, seed) {
    const name = 'shared-prefix';
    const groups = optInt(name, o, 'groups', 1);
    const per = optInt(name, o, 'promptsPerGroup', 1);
    const sys = optInt(name, o, 'systemPromptTokens', 1);
    const q = optInt(name, o, 'questionTokens', 1);
    const out = optInt(name, o, 'outputTokens', 1);
    const rate = optNum(name, o, 'requestsPerS', 0);
    const ranks = optInt(name, o, 'ranks', 1);
    const content = stream(seed, `${name}:content`);
    const order = stream(seed, `${name}:order`);
    const arrivals = stream(seed, `${name}:arrivals`);
    const all: { group: number; ids: Uint32Array }[] = [];
    for (let g = 0; g < groups; g++) {
      const system = content.tokens(sys);
      for (let p = 0; p < per; p++)
        all.push({ group: g, ids: concat([system, content.tokens(q)]) });
    }
    for (let i = all.length - 1; i > 0; i--) {
      const j = Math.floor(order() * (i + 1));
      [all[i], all[j]] = [all[j]!, all[i]!];
    }
    let t = 0;
    const requests: WorkloadRequest[] = all.map((r, i) => {
      // Rate 0 sends everything at t=0 (SGLang's request-rate=inf).
      if (rate > 0 && i > 0) t += arrivals.exp(1000 / rate);
      return {
        id: i,
        clientId: i,
        inputIds: r.ids,
        outputTokens: out,
        arrivalMs: t,
        sessionKey: `group-${r.group}`,
      };
    });
    return { scenario: name, mode: 'open', ranks, clients: [], requests, events: [] };
  },
};
