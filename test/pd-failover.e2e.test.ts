// PD mode under failure: a prefill worker, then a decode worker, is killed (its listener and
// open connections dropped, as a dead process) in the middle of a run at bounded concurrency.
// Every request must still be answered: pairs that lose a side before the client saw a byte
// are retried on other ranks. Non-streaming requests, since a stream already flowing from a
// decode server that dies cannot be saved by any router (it ends with an error event).
import { afterEach, describe, expect, it } from 'vitest';
import { type PdCluster, startPdCluster } from './helpers/pd-cluster.ts';

let cluster: PdCluster | undefined;
afterEach(async () => {
  await cluster?.close();
  cluster = undefined;
});

const TOTAL = 80;
const CONCURRENCY = 8;
const KILL_AFTER = 20;

async function runUnderKill(
  c: PdCluster,
  kill: () => Promise<void>,
): Promise<{ statuses: number[]; errors: string[] }> {
  const statuses: number[] = [];
  const errors: string[] = [];
  let next = 0;
  let done = 0;
  let killed: Promise<void> | undefined;
  const one = async (i: number): Promise<void> => {
    const res = await fetch(`${c.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({
        model: 'm',
        messages: [
          { role: 'system', content: `Agent ${i % 4} with tools. ${'tool schema '.repeat(40)}` },
          { role: 'user', content: `turn ${i}` },
        ],
        max_tokens: 24,
      }),
    });
    const text = await res.text();
    statuses.push(res.status);
    if (res.status !== 200) errors.push(`${i}: ${res.status} ${text.slice(0, 200)}`);
    else expect(JSON.parse(text).usage.completion_tokens).toBe(24);
    done++;
    if (done === KILL_AFTER) killed = kill();
  };
  const lanes = Array.from({ length: CONCURRENCY }, async () => {
    while (next < TOTAL) await one(next++);
  });
  await Promise.all(lanes);
  await killed;
  return { statuses, errors };
}

async function retries(c: PdCluster, side: string): Promise<number> {
  const text = await (await fetch(`${c.url}/metrics`)).text();
  const m = new RegExp(`^kvroute_pd_pair_retries_total\\{side="${side}"\\} (\\S+)$`, 'm').exec(
    text,
  );
  return m ? Number(m[1]) : 0;
}

describe('PD mode, a worker killed mid-run', () => {
  for (const side of ['prefill', 'decode'] as const) {
    it(`loses no request when a ${side} worker dies under load`, async () => {
      cluster = await startPdCluster({
        prefill: 2,
        decode: 2,
        // Real time, so requests are in flight on every worker when one dies.
        worker: { timeScale: 1, dpSize: 2 },
        routerArgs: ['--dp-aware', '--max-retries', '4', '--retry-backoff-base-ms', '5'],
      });
      const c = cluster;
      const victim = (side === 'prefill' ? c.prefill : c.decode)[0];
      if (!victim) throw new Error('no victim');
      const { statuses, errors } = await runUnderKill(c, () => victim.close());
      expect(errors).toEqual([]);
      expect(statuses).toHaveLength(TOTAL);
      // The kill hit pairs in flight: some were retried because of this side.
      const n = await retries(c, side);
      console.log(
        `PD ${side} worker killed after ${KILL_AFTER} of ${TOTAL} requests at concurrency ${CONCURRENCY}: ${TOTAL - errors.length}/${TOTAL} answered, ${n} pairs retried for the ${side} side`,
      );
      expect(n).toBeGreaterThan(0);
    });
  }
});
