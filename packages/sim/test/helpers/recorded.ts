// Shared fixtures of the recorded-trace tests: a small cost profile written where the CLI can
// read it, and agents' traffic as Mooncake hash ids (a shared system prefix, growing
// histories), the shape the router's recordings take.
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { CostProfileSpec } from '../../src/cost/cost-model.ts';

/** Tokens per hash id in these traces. */
export const BLOCK = 64;

/** A fresh folder with the test profile `name` written in it as profile.json. */
export function recordingFixture(prefix: string, name: string) {
  const dir = mkdtempSync(join(tmpdir(), prefix));
  const profile: CostProfileSpec = {
    format: 'kvroute-cost-profile/v1',
    name,
    description: '',
    prefill: { floorMs: 20, perTokenMs: 0.05, attnMsPerMTokenPairs: 4, perKCachedTokenMs: 2 },
    decode: { floorMs: 8, perSeqMs: 1, perKContextTokenMs: 0.5 },
    overheadMs: 15,
    kvCapacityTokens: 60_000,
    chunkedPrefillSize: 512,
  };
  const profileFile = join(dir, 'profile.json');
  writeFileSync(profileFile, JSON.stringify(profile));
  return { dir, profile, profileFile };
}

/**
 * Agents with a shared system prefix and growing histories, as Mooncake hash ids: `agents`
 * agents, `turns` turns 400 ms apart, agent a sending `step` x a ms into its turn; `salt`
 * gives another set of ids and shifts the times.
 */
export function agentLines(
  salt = 0,
  agents = 5,
  turns = 8,
  step = Math.floor(360 / agents),
): Record<string, unknown>[] {
  const lines: Record<string, unknown>[] = [];
  let next = 1000 + salt * 100_000;
  const system = [1, 2, 3, 4, 5, 6].map((b) => b + salt * 100_000);
  const hist = Array.from({ length: agents }, () => [...system]);
  for (let turn = 0; turn < turns; turn++) {
    hist.forEach((h, a) => {
      const grow = 1 + ((turn * 7 + a * 3) % 4);
      for (let g = 0; g < grow; g++) h.push(next++);
      lines.push({
        timestamp: turn * 400 + a * step + salt * 11,
        input_length: h.length * BLOCK - ((a * 11) % BLOCK),
        output_length: 4 + ((turn + a) % 9),
        hash_ids: [...h],
      });
    });
  }
  return lines;
}
