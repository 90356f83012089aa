// The mock worker's --role prefill|decode: options, the bootstrap server, the decode side's
// rank resolution and KV wait, and the errors for missing or wrong bootstrap data.
import { afterEach, describe, expect, it } from 'vitest';
import { parseMockWorkerArgs, resolveOptions } from '../src/options.ts';
import { type RunningMockWorker, startMockWorker } from '../src/start.ts';

const running: RunningMockWorker[] = [];
afterEach(async () => {
  await Promise.all(running.splice(0).map((w) => w.close()));
});

async function start(opts: Parameters<typeof startMockWorker>[0]) {
  const w = await startMockWorker({ timeScale: 0, ...opts });
  running.push(w);
  return w;
}

const post = async (url: string, body: string) => {
  const res = await fetch(url, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body,
  });
  return { status: res.status, headers: Object.fromEntries(res.headers), text: await res.text() };
};

describe('options', () => {
  it('parses the PD flags, SGLang spellings included', () => {
    const a = parseMockWorkerArgs([
      '--disaggregation-mode',
      'prefill',
      '--disaggregation-bootstrap-port',
      '0',
      '--kv-transfer-gbps',
      '50',
    ]);
    expect(a.options.role).toBe('prefill');
    const o = resolveOptions(a.options);
    expect(o.bootstrapPort).toBe(0);
    expect(o.kvTransferGbps).toBe(50);
    expect(resolveOptions({}).role).toBe('colocated');
    expect(() => resolveOptions({ role: 'both' as never })).toThrow(/role must be prefill, decode/);
    expect(() => resolveOptions({ kvTransferGbps: 0 })).toThrow(
      /kvTransferGbps must be a number > 0/,
    );
  });
});

describe('prefill and decode roles', () => {
  it('pairs a room: the decode side infers the rank from follow_bootstrap_room and waits the transfer', async () => {
    const p = await start({
      role: 'prefill',
      dpSize: 4,
      bootstrapPort: 0,
      loadBalanceMethod: 'follow_bootstrap_room',
    });
    const d = await start({
      role: 'decode',
      kvTransferGbps: 1,
      kvTransferSetupMs: 0,
      timeScale: 0.001,
    });
    const port = p.app.mockPd.bootstrap?.port as number;
    const info = (await (await fetch(`${p.url}/get_server_info`)).json()) as Record<
      string,
      unknown
    >;
    expect(info.disaggregation_mode).toBe('prefill');
    expect(info.disaggregation_bootstrap_port).toBe(port);
    const room = '9223372036854775807'; // 2^63 - 1: exact only as digits
    const body = `{"text":"${'word '.repeat(200)}","sampling_params":{"max_new_tokens":3},"bootstrap_host":"127.0.0.1","bootstrap_port":${port},"bootstrap_room":${room}}`;
    const [pr, dr] = await Promise.all([
      post(`${p.url}/generate`, body),
      post(`${d.url}/generate`, body),
    ]);
    expect(pr.status).toBe(200);
    expect(JSON.parse(pr.text).meta_info.completion_tokens).toBe(1);
    // 2^63 - 1 mod 4 = 3: the prefill side ran it there, the decode side pulled from there.
    expect(JSON.parse(pr.text).meta_info.dp_rank).toBe(3);
    expect(dr.status).toBe(200);
    expect(JSON.parse(dr.text).meta_info.completion_tokens).toBe(3);
    const [t] = d.app.mockPd.transfers;
    expect(t).toMatchObject({
      room,
      prefillDpRank: 3,
      rankSource: 'follow-bootstrap-room',
      style: 'sglang',
    });
    // The transfer is the whole prompt's KV bytes over 1 Gb/s (the profile's KV bytes per token).
    expect(t?.transferMs).toBeGreaterThan(10);
    expect(Number(dr.headers['x-kvroute-kv-transfer-ms'])).toBeCloseTo(t?.transferMs as number, 2);
  });

  it('gives clear errors for missing or wrong bootstrap data', async () => {
    const p = await start({ role: 'prefill', dpSize: 2, bootstrapPort: 0 });
    const d = await start({ role: 'decode', bootstrapTimeoutMs: 300 });
    const port = p.app.mockPd.bootstrap?.port as number;
    const noRoom = await post(`${p.url}/generate`, '{"text":"hi"}');
    expect(noRoom.status).toBe(400);
    expect(noRoom.text).toContain('req.bootstrap_room should not be None');
    const wrongPort = await post(
      `${p.url}/generate`,
      `{"text":"hi","bootstrap_host":"127.0.0.1","bootstrap_port":${port + 1},"bootstrap_room":5}`,
    );
    expect(wrongPort.status).toBe(400);
    expect(wrongPort.text).toContain("is not this prefill server's bootstrap port");
    const noPort = await post(
      `${d.url}/generate`,
      '{"text":"hi","bootstrap_host":"127.0.0.1","bootstrap_room":5}',
    );
    expect(noPort.status).toBe(400);
    expect(noPort.text).toContain('req.bootstrap_port should not be None');
    // A prefill rank that does not hold the room: the transfer fails, as a 500 a router retries.
    const body = (extra: string) =>
      `{"text":"hello","bootstrap_host":"127.0.0.1","bootstrap_port":${port},"bootstrap_room":77${extra}}`;
    const [, wrongRank] = await Promise.all([
      post(`${p.url}/generate`, body(',"routed_dp_rank":0')),
      post(`${d.url}/generate`, body(',"disagg_prefill_dp_rank":1')),
    ]);
    expect(wrongRank.status).toBe(500);
    expect(wrongRank.text).toContain('KVTransferError(bootstrap_room=77)');
    expect(wrongRank.text).toContain('prefilled on DP rank 0');
    // No prefill server at all.
    const gone = await post(
      `${d.url}/generate`,
      '{"text":"hi","bootstrap_host":"127.0.0.1","bootstrap_port":1,"bootstrap_room":5}',
    );
    expect(gone.status).toBe(500);
    expect(gone.text).toContain('Error fetching prefill parallel info from bootstrap 127.0.0.1:1');
    // vLLM style without the prefill's params.
    const vllm = await post(
      `${d.url}/v1/completions`,
      '{"prompt":"hi","kv_transfer_params":{"do_remote_decode":true}}',
    );
    expect(vllm.status).toBe(400);
    expect(vllm.text).toContain('kv_transfer_params must come from the prefill');
  });
});
