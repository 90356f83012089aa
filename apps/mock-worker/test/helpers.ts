import type { FastifyInstance } from 'fastify';
import { buildMockWorker } from '../src/app.ts';
import type { MockWorkerOptions } from '../src/options.ts';

// biome-ignore lint/suspicious/noExplicitAny: response JSON in tests is checked by assertions, not types
export type Json = any;

const apps: FastifyInstance[] = [];

/** A worker at time scale 0 (instant) unless the test says otherwise; closed after each test. */
export function worker(opts: MockWorkerOptions = {}): FastifyInstance {
  const app = buildMockWorker({ timeScale: 0, ...opts });
  apps.push(app);
  return app;
}

export async function closeAll(): Promise<void> {
  await Promise.all(apps.splice(0).map((a) => a.close()));
}

export async function post(
  app: FastifyInstance,
  url: string,
  payload: unknown,
  headers: Record<string, string> = {},
) {
  const res = await app.inject({
    method: 'POST',
    url,
    payload: typeof payload === 'string' ? payload : JSON.stringify(payload),
    headers: { 'content-type': 'application/json', ...headers },
  });
  return { status: res.statusCode, body: res.json() as Record<string, Json>, res };
}

/** The `data:` payloads of an SSE body, `[DONE]` as the string. */
export function sseEvents(text: string): unknown[] {
  return text
    .split('\n\n')
    .filter((b) => b.startsWith('data: '))
    .map((b) => b.slice(6))
    .map((d) => (d === '[DONE]' ? d : JSON.parse(d)));
}

/** A prompt of `n` approximate tokens (4 bytes each). */
export const textOfTokens = (n: number, fill = 'abcd') => fill.repeat(n);
