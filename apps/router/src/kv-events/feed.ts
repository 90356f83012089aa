// The router's events-fed cache index: one KvEventStream per rank (per DP rank of each
// worker), all feeding one @kvroute/policy KvBlockIndex that the proxy hands to the
// dispatcher as DispatchContext.kvIndex. cache_aware then scores the ranks this feed calls
// live by their real cached prefix and falls back to its learned index for the others.
//
// Live (per rank): the SUB socket is connected, no batch was lost for good in the last
// staleMs, and no request routed to the rank has waited more than staleMs without any batch
// arriving from it (every prefill stores blocks, so silence after traffic means the stream is
// broken: events off on the engine, a wrong endpoint, a dead publisher thread).
// A rank whose worker turns unhealthy is forgotten (it may come back restarted, empty).
//
// Endpoints: --kv-events-endpoints lists one per worker (in --worker-urls order), or
// --kv-events-endpoint gives a template where {host} is the worker URL's host. A DP-aware
// worker's rank r uses the port plus r, as vLLM and SGLang bind one publisher per DP rank.
import { KvBlockIndex, type KvIndexView } from '@kvroute/policy';
import type { KvEventBatch } from '@kvroute/protocol/kv-events';
import { offsetEndpointPort } from '@kvroute/protocol/kv-events';
import type { FastifyBaseLogger } from 'fastify';
import { Counter, Gauge, Histogram, type Registry } from 'prom-client';
import type { RankTable, Worker } from '../rank-table.ts';
import { KvEventStream, loadZmq, type Zmq } from './subscriber.ts';

export interface KvEventsSettings {
  /** Template with {host}, e.g. tcp://{host}:5557. */
  endpoint?: string | undefined;
  replayEndpoint?: string | undefined;
  /** One per worker, in --worker-urls order (wins over the template). */
  endpoints: readonly string[];
  replayEndpoints: readonly string[];
  topic: string;
  staleMs: number;
  /** Blocks kept per rank at most. */
  maxBlocksPerRank: number;
  /**
   * The engines' block size before the first event says it (cache_aware keys its records of
   * the requests it sends in it, so records made before the first event stay usable).
   */
  blockSize?: number | undefined;
}

interface RankFeed {
  rank: number;
  worker: Worker;
  stream: KvEventStream;
  /** Wall ms of the oldest dispatch to this rank not yet followed by a batch; 0 = none. */
  waitingSince: number;
  wasHealthy: boolean;
}

const LAG_BUCKETS = [0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5];

/** Applies one decoded batch of a rank's stream to the index (the ingest path the bench times). */
export function applyKvEventBatch(index: KvBlockIndex, rank: number, batch: KvEventBatch): void {
  for (const ev of batch.events) {
    switch (ev.type) {
      case 'BlockStored':
        // Offloaded tiers (medium CPU/disk) are not where a prefill can reuse KV directly.
        if (ev.medium !== null && ev.medium !== 'GPU') continue;
        index.store(rank, ev.blockHashes, ev.parentBlockHash, ev.tokenIds, ev.blockSize, ev.loraId);
        break;
      case 'BlockRemoved':
        if (ev.medium !== null && ev.medium !== 'GPU') continue;
        index.remove(rank, ev.blockHashes);
        break;
      case 'AllBlocksCleared':
        index.clearRank(rank);
        break;
    }
  }
}

export function kvEventsEnabled(s: KvEventsSettings): boolean {
  return s.endpoint !== undefined || s.endpoints.length > 0;
}

export class KvEventsFeed implements KvIndexView {
  readonly index: KvBlockIndex;
  private readonly feeds = new Map<number, RankFeed>();
  private timer: NodeJS.Timeout | undefined;
  private readonly lag: Histogram;
  private zmq: Zmq | undefined;

  constructor(
    private readonly settings: KvEventsSettings,
    private readonly table: RankTable,
    private readonly workerUrls: readonly string[],
    registry: Registry,
    private readonly log: FastifyBaseLogger,
    /** cache_aware's counters (eventsRankScores, fallbackRankScores) for the metrics. */
    methodStats: () => Record<string, number> | undefined,
    private readonly now: () => number = Date.now,
  ) {
    this.index = new KvBlockIndex({
      maxBlocksPerRank: settings.maxBlocksPerRank,
      ...(settings.blockSize === undefined ? {} : { blockSize: settings.blockSize }),
    });
    this.lag = new Histogram({
      name: 'kvroute_kv_events_lag_seconds',
      help: 'Time from an engine publishing a KV event batch to the router applying it (live batches; includes clock skew between hosts)',
      buckets: LAG_BUCKETS,
      registers: [registry],
    });
    const feeds = this.feeds;
    const perRank = (
      name: string,
      help: string,
      read: (f: RankFeed) => number,
      kind: 'counter' | 'gauge',
    ) => {
      const Metric = kind === 'counter' ? Counter : Gauge;
      new Metric({
        name,
        help,
        labelNames: ['rank'],
        registers: [registry],
        collect(this: Counter<'rank'> | Gauge<'rank'>) {
          this.reset();
          for (const f of feeds.values()) {
            const v = read(f);
            if (this instanceof Gauge) this.set({ rank: String(f.rank) }, v);
            else if (v > 0) this.inc({ rank: String(f.rank) }, v);
          }
        },
      });
    };
    // The stream's own counters, one per-rank counter family each.
    const streamCounters: [string, keyof RankFeed['stream']['counters'], string][] = [
      [
        'kvroute_kv_events_batches_total',
        'batches',
        'KV event batches applied from the live stream',
      ],
      [
        'kvroute_kv_events_replayed_batches_total',
        'replayedBatches',
        'KV event batches applied from the replay endpoint (gaps, history, reconnects)',
      ],
      ['kvroute_kv_events_gaps_total', 'gaps', 'Sequence gaps seen on the live stream'],
      [
        'kvroute_kv_events_missed_batches_total',
        'missedBatches',
        'Batches lost for good (neither received nor replayable): drops',
      ],
      [
        'kvroute_kv_events_restarts_total',
        'restarts',
        'Publisher restarts detected (sequence reset or replay mismatch); the rank was cleared',
      ],
      [
        'kvroute_kv_events_decode_errors_total',
        'decodeErrors',
        'Malformed frames or payloads skipped',
      ],
      [
        'kvroute_kv_events_disconnects_total',
        'reconnects',
        'Disconnects of the SUB socket (it reconnects with backoff)',
      ],
    ];
    for (const [name, key, help] of streamCounters) {
      perRank(name, help, (f) => f.stream.counters[key], 'counter');
    }
    perRank(
      'kvroute_kv_events_live',
      '1 while the rank is scored from KV events, 0 while it falls back to the learned index',
      (f) => (this.isLive(f.rank) ? 1 : 0),
      'gauge',
    );
    perRank(
      'kvroute_kv_index_blocks',
      'Blocks the events index holds for the rank',
      (f) => this.index.blocks(f.rank),
      'gauge',
    );
    const index = this.index;
    new Counter({
      name: 'kvroute_kv_index_events_total',
      help: 'Blocks applied to the events index by outcome: stored, removed, cleared (ranks), orphan (parent never seen), unknown_removal, capacity_eviction, block_size_mismatch',
      labelNames: ['op'],
      registers: [registry],
      collect() {
        this.reset();
        const s = index.stats();
        const rows: [string, number][] = [
          ['stored', s.storedBlocks],
          ['removed', s.removedBlocks],
          ['cleared', s.clears],
          ['orphan', s.orphanBlocks],
          ['unknown_removal', s.unknownRemovals],
          ['capacity_eviction', s.capacityEvictions],
          ['block_size_mismatch', s.blockSizeMismatches],
        ];
        for (const [op, v] of rows) if (v > 0) this.inc({ op }, v);
      },
    });
    new Counter({
      name: 'kvroute_kv_index_rank_scores_total',
      help: 'Per-rank prefix scores taken by cache_aware: source="events" from the events index, source="learned" from its own index because the rank was not live',
      labelNames: ['source'],
      registers: [registry],
      collect() {
        this.reset();
        const m = methodStats();
        const ev = m?.eventsRankScores ?? 0;
        const fb = m?.fallbackRankScores ?? 0;
        if (ev > 0) this.inc({ source: 'events' }, ev);
        if (fb > 0) this.inc({ source: 'learned' }, fb);
      },
    });
  }

  get blockSize(): number | undefined {
    return this.index.blockSize;
  }

  isLive(rank: number): boolean {
    const f = this.feeds.get(rank);
    if (!f?.stream.connected || !f.worker.healthy) return false;
    const now = this.now();
    const stale = this.settings.staleMs;
    if (f.stream.lastLossAt > 0 && now - f.stream.lastLossAt < stale) return false;
    return f.waitingSince === 0 || now - f.waitingSince <= stale;
  }

  matchKeys(blockKeys: readonly number[], ranks: readonly number[], out: number[]): void {
    this.index.matchKeys(blockKeys, ranks, out);
  }

  /** The proxy routed a request to `rank`: its stream should speak up within staleMs. */
  noteDispatch(rank: number): void {
    const f = this.feeds.get(rank);
    if (f && f.waitingSince === 0) f.waitingSince = this.now();
  }

  /** Streams for every rank now in the table (call after workers are added). */
  async start(): Promise<void> {
    this.zmq = await loadZmq();
    this.sync();
    this.timer ??= setInterval(() => this.sync(), 1_000);
    this.timer.unref();
  }

  endpointsFor(worker: Worker): { endpoint: string; replay?: string } | undefined {
    const i = this.workerUrls.indexOf(worker.url);
    const host = new URL(worker.url).hostname;
    const fill = (t: string | undefined) => t?.replaceAll('{host}', host);
    const endpoint =
      (i >= 0 ? this.settings.endpoints[i] : undefined) ?? fill(this.settings.endpoint);
    if (endpoint === undefined) return undefined;
    const replay =
      (i >= 0 ? this.settings.replayEndpoints[i] : undefined) ?? fill(this.settings.replayEndpoint);
    return replay === undefined ? { endpoint } : { endpoint, replay };
  }

  /** Adds streams for new ranks, drops those of removed ones, forgets ranks that went down. */
  sync(): void {
    const zmq = this.zmq;
    if (!zmq) return;
    for (let rank = 0; rank < this.table.size; rank++) {
      const slot = this.table.slot(rank);
      const existing = this.feeds.get(rank);
      if (!slot || slot.worker.removed) {
        if (existing) this.drop(existing);
        continue;
      }
      if (existing && existing.worker !== slot.worker) this.drop(existing);
      const f = this.feeds.get(rank);
      if (f) {
        if (f.wasHealthy && !f.worker.healthy) this.index.clearRank(rank);
        f.wasHealthy = f.worker.healthy;
        continue;
      }
      const eps = this.endpointsFor(slot.worker);
      if (!eps) continue;
      const dp = slot.dpRank ?? 0;
      const stream = new KvEventStream(
        zmq,
        {
          endpoint: offsetEndpointPort(eps.endpoint, dp),
          replayEndpoint: eps.replay === undefined ? undefined : offsetEndpointPort(eps.replay, dp),
          topic: this.settings.topic,
        },
        {
          batch: (b, replayed) => this.apply(rank, b, replayed),
          reset: () => this.index.clearRank(rank),
          warn: (m) => this.log.warn(m),
        },
        this.now,
      );
      this.feeds.set(rank, {
        rank,
        worker: slot.worker,
        stream,
        waitingSince: 0,
        wasHealthy: slot.worker.healthy,
      });
      this.index.resize(Math.max(this.index.numRanks, rank + 1));
      stream.start();
    }
  }

  private drop(f: RankFeed): void {
    this.feeds.delete(f.rank);
    this.index.clearRank(f.rank, false);
    void f.stream.close();
  }

  private apply(rank: number, batch: KvEventBatch, replayed: boolean): void {
    const f = this.feeds.get(rank);
    if (f) f.waitingSince = 0;
    if (!replayed) this.lag.observe(Math.max(0, this.now() / 1000 - batch.ts));
    applyKvEventBatch(this.index, rank, batch);
  }

  /** Counters of one rank's stream (tests, admin). */
  stream(rank: number): KvEventStream | undefined {
    return this.feeds.get(rank)?.stream;
  }

  async close(): Promise<void> {
    if (this.timer) clearInterval(this.timer);
    this.timer = undefined;
    await Promise.all([...this.feeds.values()].map((f) => f.stream.close()));
    this.feeds.clear();
  }
}
