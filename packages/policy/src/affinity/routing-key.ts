// routing_key affinity (SGLang's proposed `--dp-cache-affinity routing_key`): the first request
// carrying a key is placed by the load-balance method and pinned; later requests with that key
// go to the pinned rank. Layered above any method, below an explicit routed rank.
//
// The table is an lru-cache bounded by `maxEntries` (least recently used keys are evicted) and
// an idle TTL `ttlMs` (a key unused that long is forgotten; every hit refreshes it), because
// unique keys such as session ids would otherwise grow it forever (the upstream review's ask).
// Time comes from the host (DispatchContext.nowMs) through lru-cache's `perf` hook; no timers
// (ttlResolution 0, no autopurge), so simulated time works and nothing keeps a process alive.
// Cost: one hash-map lookup per request with a key; O(1) insert/evict.
// Failure modes: a pinned rank that became unhealthy or was removed is re-picked by the method
// and re-pinned (reason 'affinity-repick'); a hot key pins all its traffic to one rank however
// loaded it is (that is the point of affinity); evicted or expired keys are placed afresh and
// may land elsewhere (counted as misses).
// Options (under `affinity`):
//   kind        'routing_key'   the only kind; 'none' (or no `affinity`) disables it
//   maxEntries  100000          most keys remembered (>= 1)
//   ttlMs       3600000         idle time-to-live in host milliseconds (0 = no TTL)
import { LRUCache } from 'lru-cache';
import { PolicyConfigError } from '../errors.ts';
import { readInt } from '../options.ts';

export const AFFINITY_KINDS = ['routing_key'] as const;
export const AFFINITY_DEFAULTS = { maxEntries: 100_000, ttlMs: 3_600_000 } as const;

export interface AffinityStats {
  size: number;
  hits: number;
  misses: number;
  evictions: number;
  expirations: number;
  repicks: number;
}

export interface RoutingKeyAffinityOptions {
  maxEntries: number;
  ttlMs: number;
}

export class RoutingKeyAffinity {
  readonly maxEntries: number;
  readonly ttlMs: number;
  hits = 0;
  misses = 0;
  evictions = 0;
  expirations = 0;
  repicks = 0;
  private now = 0;
  private readonly table: LRUCache<string, number>;

  constructor(options: RoutingKeyAffinityOptions) {
    this.maxEntries = options.maxEntries;
    this.ttlMs = options.ttlMs;
    this.table = new LRUCache<string, number>({
      max: options.maxEntries,
      ttl: options.ttlMs,
      updateAgeOnGet: true,
      ttlResolution: 0,
      perf: { now: () => this.now },
      dispose: (_value, _key, reason) => {
        if (reason === 'evict') this.evictions++;
        else if (reason === 'expire') this.expirations++;
      },
    });
  }

  /** The pinned rank for `key` at host time `nowMs`, or undefined (expired keys count as absent). */
  lookup(key: string, nowMs: number): number | undefined {
    this.now = nowMs;
    return this.table.get(key);
  }

  pin(key: string, rank: number, nowMs: number): void {
    this.now = nowMs;
    this.table.set(key, rank);
  }

  get size(): number {
    return this.table.size;
  }

  /**
   * The host renumbered its ranks: each pin follows its rank to `moves[rank]`, and pins to a
   * rank that left (-1) are dropped (the key is re-picked on its next request). Recency and
   * age are kept.
   */
  remap(moves: readonly number[]): void {
    const entries = this.table.dump();
    this.table.clear();
    const kept: typeof entries = [];
    for (const [key, entry] of entries) {
      const to = moves[entry.value] ?? -1;
      if (to >= 0) kept.push([key, { ...entry, value: to }]);
    }
    this.table.load(kept);
  }

  stats(): AffinityStats {
    return {
      size: this.table.size,
      hits: this.hits,
      misses: this.misses,
      evictions: this.evictions,
      expirations: this.expirations,
      repicks: this.repicks,
    };
  }
}

/** Parses the `affinity` config value; undefined when affinity is off. */
export function createAffinity(raw: unknown): RoutingKeyAffinity | undefined {
  if (raw === undefined || raw === null || raw === false || raw === 'none') return undefined;
  let spec: Record<string, unknown>;
  if (typeof raw === 'string') spec = { kind: raw };
  else if (raw === true) spec = {};
  else if (typeof raw === 'object' && !Array.isArray(raw)) spec = raw as Record<string, unknown>;
  else {
    throw new PolicyConfigError(
      `affinity must be an object like { kind: 'routing_key', maxEntries, ttlMs }, 'routing_key' or 'none'; got ${JSON.stringify(raw)}`,
    );
  }
  const kind = spec.kind ?? 'routing_key';
  if (kind === 'none') return undefined;
  if (kind !== 'routing_key') {
    throw new PolicyConfigError(
      `unknown affinity kind ${JSON.stringify(kind)}; valid kinds: ${AFFINITY_KINDS.join(', ')}, none`,
    );
  }
  for (const field of Object.keys(spec)) {
    if (field !== 'kind' && field !== 'maxEntries' && field !== 'ttlMs') {
      throw new PolicyConfigError(
        `unknown affinity option '${field}'; valid options: kind, maxEntries, ttlMs`,
      );
    }
  }
  return new RoutingKeyAffinity({
    maxEntries: readInt('affinity', spec, 'maxEntries', AFFINITY_DEFAULTS.maxEntries, 1),
    ttlMs: readInt('affinity', spec, 'ttlMs', AFFINITY_DEFAULTS.ttlMs, 0),
  });
}
