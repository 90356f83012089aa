// The router's events-fed cache index: one KvEventStream per rank (per DP rank of each
// worker), all feeding one @kvroute/policy KvBlockIndex that the proxy hands to the
// dispatcher as DispatchContext.kvIndex. cache_aware then scores the ranks this feed calls
// live by their real cached prefix and falls back to its learned index for the others.
//
// Live (per rank): the worker is healthy, the SUB socket is connected, no live batch was lost
// for good in the last staleMs, the engine's block size is the index's, and, with a replay
// endpoint, the publisher was heard from in the last staleMs (a batch, or a replay answered:
// a stream quiet for staleMs / 3 is probed, see KvEventStream.probe). Every input is something
// every replica subscribed to the same streams observes alike, so replicas agree on which
// ranks are live; none is this replica's own traffic. (Waiting for a batch after each request
// this replica routed made replicas disagree: a full prefix hit, or a new tail shorter than a
// block, stores nothing, so an agent's pause between turns turned a healthy rank off on one
// replica only.) A dead publisher is still caught: a dead engine or host by the socket (ZMTP
// heartbeats, see subscriber.ts), a dead publisher thread by its replay endpoint not answering.
// A rank whose worker turns unhealthy is forgotten (it may come back restarted, empty).
//
// Endpoints: --kv-events-endpoints lists one per worker (in --worker-urls order), or
// --kv-events-endpoint gives a template where {host} is the worker URL's host. A DP-aware
// worker's rank r uses the port plus r, as vLLM and SGLang bind one publisher per DP rank.
//
// Problems that turn precise routing off for a rank are logged (warn, info for connects), at
// most one line per stream and cause per LOG_INTERVAL_MS, with the count suppressed.
import { KvBlockIndex, type KvIndexView } from '@kvroute/policy';
import type { KvEventBatch } from '@kvroute/protocol/kv-events';
import { offsetEndpointPort } from '@kvroute/protocol/kv-events';
import type { FastifyBaseLogger } from 'fastify';
import { Counter, Gauge, Histogram, type Registry } from 'prom-client';
import { LogLimiter } from '../log-limiter.ts';
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
  /** The rank the stream's worker stands at now (remap moves it with its worker). */
  rank: number;
  worker: Worker;
  stream: KvEventStream;
  /** Wall ms the stream was created (for "never connected"). */
  since: number;
  wasHealthy: boolean;
}

const LAG_BUCKETS = [0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5];
/** One log line per stream and cause per interval at most. */
const LOG_INTERVAL_MS = 30_000;

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
  private feeds = new Map<number, RankFeed>();
  private timer: NodeJS.Timeout | undefined;
  private readonly lag: Histogram;
  private zmq: Zmq | undefined;
  private readonly limiter: LogLimiter;

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
    this.limiter = new LogLimiter(LOG_INTERVAL_MS, now);
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
          // Counters too from 0 on, so increase() and rate() see a rank's first event.
          for (const f of feeds.values()) {
            const v = read(f);
            if (this instanceof Gauge) this.set({ rank: String(f.rank) }, v);
            else this.inc({ rank: String(f.rank) }, v);
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
      [
        'kvroute_kv_events_skipped_batches_total',
        'skippedBatches',
        'Live batches skipped: duplicates of the last one, and batches out of sequence the publisher did not confirm',
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
        for (const [op, v] of rows) this.inc({ op }, v);
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
        this.inc({ source: 'events' }, m?.eventsRankScores ?? 0);
        this.inc({ source: 'learned' }, m?.fallbackRankScores ?? 0);
      },
    });
  }

  get blockSize(): number | undefined {
    return this.index.blockSize;
  }

  isLive(rank: number): boolean {
    const f = this.feeds.get(rank);
    if (!f?.stream.connected || !f.worker.healthy) return false;
    const s = f.stream;
    const now = this.now();
    const stale = this.settings.staleMs;
    if (s.lastLossAt > 0 && now - s.lastLossAt < stale) return false;
    if (this.index.blockSizeMismatch(rank) !== undefined) return false;
    return s.opts.replayEndpoint === undefined || now - s.lastHeardAt <= stale;
  }

  matchKeys(blockKeys: readonly number[], ranks: readonly number[], out: number[]): void {
    this.index.matchKeys(blockKeys, ranks, out);
  }

  /** Streams for every rank now in the table (call after workers are added). */
  async start(): Promise<void> {
    this.zmq = await loadZmq();
    this.sync();
    const n = this.feeds.size;
    const first = this.feeds.values().next().value?.stream.opts;
    this.log.info(
      {
        streams: n,
        blockSize: this.index.blockSize,
        staleMs: this.settings.staleMs,
        endpoint: first?.endpoint,
        replayEndpoint: first?.replayEndpoint,
      },
      `kv-events on: ${n} stream${n === 1 ? '' : 's'} (${first ? `${first.endpoint}${n > 1 ? ', ...' : ''}` : 'none yet'}), ${first?.replayEndpoint ? 'replay on' : 'no replay endpoint'}, block size ${this.index.blockSize ?? 'from the first event'}, stale after ${this.settings.staleMs} ms`,
    );
    // Fine enough to probe a quiet stream before staleMs runs out.
    const tick = Math.max(10, Math.min(1_000, Math.floor(this.settings.staleMs / 4)));
    this.timer ??= setInterval(() => this.sync(), tick);
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
        if (f.wasHealthy && !f.worker.healthy) {
          this.index.clearRank(rank);
          this.note('info', f, 'unhealthy', 'worker unhealthy: the rank is forgotten');
        }
        f.wasHealthy = f.worker.healthy;
        this.watch(f);
        continue;
      }
      const eps = this.endpointsFor(slot.worker);
      if (!eps) continue;
      const dp = slot.dpRank ?? 0;
      // The callbacks read the feed's rank, not this one: a renumbering (remap) moves the
      // feed, with its stream and what it indexed, to its worker's new rank.
      const feed: RankFeed = {
        rank,
        worker: slot.worker,
        stream: undefined as unknown as KvEventStream,
        since: this.now(),
        wasHealthy: slot.worker.healthy,
      };
      feed.stream = new KvEventStream(
        zmq,
        {
          endpoint: offsetEndpointPort(eps.endpoint, dp),
          replayEndpoint: eps.replay === undefined ? undefined : offsetEndpointPort(eps.replay, dp),
          topic: this.settings.topic,
        },
        {
          // A dropped stream is closed first, and a closed stream hands on nothing.
          batch: (b, replayed) => this.apply(feed.rank, b, replayed),
          reset: () => this.index.clearRank(feed.rank),
          warn: (cause, m) => this.note('warn', feed, cause, m),
          info: (cause, m) => this.note('info', feed, cause, m),
        },
        this.now,
      );
      this.feeds.set(rank, feed);
      this.index.resize(Math.max(this.index.numRanks, rank + 1));
      feed.stream.start();
    }
  }

  /**
   * The table renumbered its ranks (RankTable.onRenumber): each stream and what it indexed
   * move with their worker to its new rank, without reconnecting or replaying; a rank whose
   * worker left is dropped. Call before the next sync, which would otherwise see a moved
   * worker's stream at the wrong rank and open a new one.
   */
  remap(moves: readonly number[], numRanks: number): void {
    this.index.remap(moves, numRanks);
    const next = new Map<number, RankFeed>();
    for (const [old, f] of this.feeds) {
      const to = moves[old] ?? -1;
      if (to < 0 || to >= numRanks) {
        void f.stream.close();
        continue;
      }
      f.rank = to;
      next.set(to, f);
    }
    this.feeds = next;
  }

  private drop(f: RankFeed): void {
    this.feeds.delete(f.rank);
    this.index.clearRank(f.rank, false);
    void f.stream.close();
  }

  /** Once per tick per rank: probes a quiet publisher, reports an endpoint never reached. */
  private watch(f: RankFeed): void {
    const s = f.stream;
    const now = this.now();
    const stale = this.settings.staleMs;
    if (s.connected) {
      if (now - s.lastHeardAt >= stale / 3) s.probe();
      return;
    }
    const down = s.disconnectedAt > 0 ? s.disconnectedAt : f.since;
    if (now - down >= stale) {
      this.note(
        'warn',
        f,
        'unconnected',
        `kv-events ${s.opts.endpoint}: not connected for ${Math.round((now - down) / 1000)} s (engine down, events off, or a wrong endpoint or port?); the rank is scored by the learned index`,
      );
    }
  }

  /** A rate-limited log line about one rank's stream. */
  private note(level: 'warn' | 'info', f: RankFeed | undefined, cause: string, msg: string): void {
    const endpoint = f?.stream.opts.endpoint;
    const suppressed = this.limiter.take(`${endpoint} ${cause}`);
    if (suppressed < 0) return;
    this.log[level]({ rank: f?.rank, endpoint, cause, suppressed }, msg);
  }

  private apply(rank: number, batch: KvEventBatch, replayed: boolean): void {
    if (!replayed) this.lag.observe(Math.max(0, this.now() / 1000 - batch.ts));
    const index = this.index;
    const evictions = index.capacityEvictions;
    applyKvEventBatch(index, rank, batch);
    if (index.capacityEvictions !== evictions) {
      this.note(
        'warn',
        this.feeds.get(rank),
        'capacity',
        `kv-events: rank ${rank} holds more than --kv-events-max-blocks ${index.maxBlocksPerRank} blocks: its oldest are dropped (removals were lost, or the bound is below the engine's pool)`,
      );
    }
    const bad = index.blockSizeMismatch(rank);
    if (bad !== undefined) {
      this.note(
        'warn',
        this.feeds.get(rank),
        'block_size',
        `kv-events: rank ${rank}'s engine reports block_size ${bad}, the router indexes ${index.blockSize} (--kv-events-block-size): its blocks are refused and the rank is scored by the learned index`,
      );
    }
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
