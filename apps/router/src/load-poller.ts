// --load-poll-interval: asks each worker how busy it is and records, per rank, the requests
// the worker has beyond the router's own in-flight count (traffic from other routers or
// direct clients). The router's own accounting stays exact (dispatch/complete); the excess
// is added on top when the policy looks at the ranks. Tokens are not corrected: neither
// /v1/loads nor vLLM's metrics report pending prompt + output tokens.

import { getText } from '@kvroute/protocol';
import type { Agent } from 'undici';
import { parseLoadsResponse, parseVllmMetrics, type WorkerLoad } from './load-report.ts';
import type { RankTable, Worker } from './rank-table.ts';

export class LoadPoller {
  private timer: NodeJS.Timeout | undefined;
  private busy = false;

  constructor(
    private readonly table: RankTable,
    private readonly agent: Agent,
    private readonly intervalMs: number,
    private readonly timeoutMs: number,
  ) {}

  start(): void {
    if (this.intervalMs <= 0 || this.timer) return;
    this.timer = setInterval(() => void this.pollAll(), this.intervalMs);
    this.timer.unref();
  }

  stop(): void {
    if (this.timer) clearInterval(this.timer);
    this.timer = undefined;
  }

  async pollAll(): Promise<void> {
    if (this.busy) return;
    this.busy = true;
    try {
      await Promise.all(this.table.workers().map((w) => this.poll(w)));
    } finally {
      this.busy = false;
    }
  }

  async poll(worker: Worker): Promise<void> {
    if (!worker.healthy || worker.loadSource === 'none') return;
    const loads = await this.fetchLoads(worker).catch(() => undefined);
    if (!loads) return;
    const ranks = worker.ranks;
    if (worker.dpAware) {
      for (const l of loads) {
        const rank = ranks[l.dpRank];
        if (rank !== undefined) this.apply(rank, l.running + l.waiting);
      }
    } else {
      // A replica's internal DP ranks are its own business: one rank, summed load.
      const total = loads.reduce((sum, l) => sum + l.running + l.waiting, 0);
      const rank = ranks[0];
      if (rank !== undefined) this.apply(rank, total);
    }
  }

  private apply(rank: number, reported: number): void {
    const own = this.table.tracker.ranks[rank]?.inFlightRequests ?? 0;
    this.table.setExternal(rank, Math.max(0, reported - own));
  }

  private async fetchLoads(worker: Worker): Promise<WorkerLoad[] | undefined> {
    if (worker.loadSource !== 'metrics') {
      const res = await getText(this.agent, `${worker.url}/v1/loads`, this.timeoutMs);
      if (res.status === 200) {
        const parsed = parseLoadsResponse(safeJson(res.text));
        if (parsed) {
          worker.loadSource = 'loads';
          return parsed;
        }
      }
      if (worker.loadSource === 'loads') return undefined;
    }
    const res = await getText(this.agent, `${worker.url}/metrics`, this.timeoutMs);
    const vllm = res.status === 200 ? parseVllmMetrics(res.text) : undefined;
    // Neither endpoint speaks a format we know: stop asking, keep the router's own counts.
    worker.loadSource = vllm ? 'metrics' : 'none';
    return vllm ? [vllm] : undefined;
  }
}

function safeJson(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return undefined;
  }
}
