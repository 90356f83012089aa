// Sends chat requests the way a client would and judges each answer (faulty-worker.ts judge):
// used by the fault-injection tests and the fault benchmark.
import { type Dispatcher, request } from 'undici';
import { judge, type Outcome } from './faulty-worker.ts';

export async function chatOnce(
  url: string,
  stream: boolean,
  opts: { dispatcher?: Dispatcher; timeoutMs?: number; prompt?: string } = {},
): Promise<Outcome> {
  const t0 = performance.now();
  try {
    const res = await request(`${url}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({
        model: 'm',
        messages: [{ role: 'user', content: opts.prompt ?? `hello ${Math.random()}` }],
        max_tokens: 8,
        stream,
      }),
      ...(opts.dispatcher ? { dispatcher: opts.dispatcher } : {}),
      signal: AbortSignal.timeout(opts.timeoutMs ?? 20_000),
    });
    const text = await res.body.text();
    return judge(stream, res.statusCode, text, performance.now() - t0);
  } catch {
    // Connection cut, reset, or no answer within the client's patience: lost.
    return {
      stream,
      status: 0,
      ok: false,
      explicitError: false,
      garbage200: false,
      lost: true,
      ms: performance.now() - t0,
    };
  }
}

/** `total` requests, `concurrency` at a time, alternating plain and streamed. */
export async function runLoad(
  url: string,
  opts: {
    total?: number;
    durationMs?: number;
    concurrency: number;
    dispatcher?: Dispatcher;
    timeoutMs?: number;
  },
): Promise<Outcome[]> {
  const out: Outcome[] = [];
  let issued = 0;
  const deadline = opts.durationMs !== undefined ? Date.now() + opts.durationMs : Infinity;
  const more = (): boolean =>
    (opts.total === undefined || issued < opts.total) && Date.now() < deadline;
  await Promise.all(
    Array.from({ length: opts.concurrency }, async () => {
      while (more()) {
        const stream = issued++ % 2 === 1;
        out.push(await chatOnce(url, stream, opts));
      }
    }),
  );
  return out;
}
