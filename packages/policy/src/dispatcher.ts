// The dispatcher: config parsing, precedence (routed rank > routing-key affinity > method),
// health filtering, the rotating tie-breaker, counters, and the dispatch ticket that carries
// the load-accounting rule to every host. Methods only choose.
import {
  type AffinityStats,
  createAffinity,
  type RoutingKeyAffinity,
} from './affinity/routing-key.ts';
import { NoHealthyRankError, PolicyConfigError, RoutedRankError } from './errors.ts';
import type { LoadIndex } from './load-index.ts';
import { type LoadClaim, type LoadTracker, requestTokens } from './load-tracker.ts';
import { isOptionKey } from './options.ts';
import { scanLeast } from './pickers.ts';
import { checkMoves } from './rank-moves.ts';
import { methodNames, methodRegistry } from './registry.ts';
import {
  type Decision,
  type DispatchContext,
  type LoadQueries,
  type Method,
  type MethodContext,
  promptLength,
  type RankState,
  type RouteRequest,
  type TicketOutcome,
} from './types.ts';

/**
 * A plain object as a CLI or YAML gives it. Method options may sit at the top level or under
 * `options`; `options` wins on conflict.
 */
export interface DispatcherConfig {
  method: string;
  options?: Record<string, unknown>;
  affinity?:
    | { kind?: 'routing_key' | 'none' | (string & {}); maxEntries?: number; ttlMs?: number }
    | 'routing_key'
    | 'none'
    | boolean
    | null;
  [option: string]: unknown;
}

export interface DispatcherStats {
  decisions: number;
  /** Decisions per reason ('routed', 'affinity', 'prefix-hash', ...). */
  reasons: Record<string, number>;
  affinity?: AffinityStats;
  method?: Record<string, number>;
}

export interface BeginContext extends DispatchContext {
  /**
   * The rank states the method should see when they differ from the tracker's own (a retry
   * that shows failed ranks as down, polled load added on top). Indexed like the tracker's
   * ranks, same length; the load is still accounted on the tracker.
   */
  view?: readonly RankState[];
}

/**
 * One dispatched request: where it went and why, holding its load on the tracker until
 * `done`. The load is the accounting rule's (input + max new tokens, bounded; see
 * requestTokens), so no host computes it.
 */
export interface DispatchTicket extends Decision {
  /** The load this request holds on its rank while open. */
  readonly tokens: number;
  /** False once `done` was called. */
  readonly open: boolean;
  /**
   * Releases the load and tells the method how the request ended (default 'completed').
   * Safe to call more than once: only the first call counts; returns whether it was that one.
   */
  done(outcome?: TicketOutcome): boolean;
}

export interface Dispatcher {
  readonly method: string;
  /** The method options as merged from the config (top level, then `options`), before defaults. */
  readonly options: Readonly<Record<string, unknown>>;
  /** Leading prompt tokens the method reads (see Method.maxPromptTokens); Infinity: all. */
  readonly maxPromptTokens: number;
  /**
   * Decides and accounts: the host's way to route a request. Close the ticket when the
   * request completes, is aborted or fails.
   */
  begin(request: RouteRequest, tracker: LoadTracker, ctx?: BeginContext): DispatchTicket;
  /** A decision without accounting (tests, previews, tools that measure key movement). */
  dispatch(request: RouteRequest, ranks: readonly RankState[], ctx?: DispatchContext): Decision;
  stats(): DispatcherStats;
  /**
   * The host renumbered its ranks (see Method.remapRanks): the method's learned state and the
   * routing-key pins follow their workers. Tickets already open keep the index they were
   * given.
   */
  remapRanks(moves: readonly number[], numRanks: number): void;
  /**
   * Names each rank index by a stable identity (see Method.nameRanks): non-empty, distinct
   * strings, or null for a rank with no worker. Hosts that can renumber or reorder their ranks
   * call it after every change; without it the hash methods key on rank indexes.
   */
  nameRanks(names: readonly (string | null)[]): void;
}

const OUTCOMES: ReadonlySet<string> = new Set<TicketOutcome>(['completed', 'aborted', 'failed']);

const DISPATCHER_KEYS = new Set(['method', 'options', 'affinity']);

function describeValue(value: unknown): string {
  if (value === null) return 'null';
  if (Array.isArray(value)) return 'an array';
  const type = typeof value;
  if (type === 'number' || type === 'boolean' || type === 'bigint') {
    return `${type} ${String(value)}`;
  }
  return type === 'object' ? 'an object' : `a ${type}`;
}

function isPlainObject(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

/** Merges method options and rejects names no method knows (typos), see the README. */
function methodOptions(name: string, config: Record<string, unknown>): Record<string, unknown> {
  const nested = config.options;
  if (nested !== undefined && !isPlainObject(nested)) {
    throw new PolicyConfigError(`options must be an object, got ${JSON.stringify(nested)}`);
  }
  const topLevel: Record<string, unknown> = {};
  for (const [key, value] of Object.entries(config)) {
    if (!DISPATCHER_KEYS.has(key)) topLevel[key] = value;
  }
  for (const key of [...Object.keys(config), ...Object.keys(nested ?? {})]) {
    // A JSON or YAML `__proto__` key is an own property that plain assignment would turn
    // into a prototype change: refuse it rather than ignore it.
    if (!isOptionKey(key)) throw new PolicyConfigError(`invalid option name '${key}'`);
  }
  const own = methodRegistry[name]?.optionNames;
  if (own) {
    const anyMethod = new Set<string>();
    for (const factory of Object.values(methodRegistry)) {
      for (const option of factory.optionNames) anyMethod.add(option);
    }
    const valid = own.length > 0 ? own.join(', ') : '(none)';
    // Top-level keys may be another method's options (a sweep or a CLI sets them for all
    // methods); keys under `options` are meant for this method.
    for (const key of Object.keys(topLevel)) {
      if (!own.includes(key) && !anyMethod.has(key)) {
        throw new PolicyConfigError(`${name}: unknown option '${key}'; valid options: ${valid}`);
      }
    }
    for (const key of Object.keys(nested ?? {})) {
      if (!own.includes(key)) {
        throw new PolicyConfigError(`${name}: unknown option '${key}'; valid options: ${valid}`);
      }
    }
  }
  return Object.assign(Object.create(null), topLevel, nested ?? {});
}

/**
 * A dispatch ticket as a class: hosts open one per request, so it must be cheap to allocate
 * (an object literal with a getter and closures cost ~10x more, most of it in the GC).
 */
class Ticket implements DispatchTicket {
  readonly rank: number;
  readonly reason: Decision['reason'];
  readonly matchedTokens?: number;
  readonly tokens: number;
  #open = true;
  readonly #decision: Decision;
  readonly #tracker: LoadTracker;
  readonly #claim: LoadClaim;
  readonly #method: Method;

  constructor(
    decision: Decision,
    tokens: number,
    tracker: LoadTracker,
    claim: LoadClaim,
    method: Method,
  ) {
    this.rank = decision.rank;
    this.reason = decision.reason;
    if (decision.matchedTokens !== undefined) this.matchedTokens = decision.matchedTokens;
    this.tokens = tokens;
    this.#decision = decision;
    this.#tracker = tracker;
    this.#claim = claim;
    this.#method = method;
  }

  get open(): boolean {
    return this.#open;
  }

  done(outcome: TicketOutcome = 'completed'): boolean {
    if (!OUTCOMES.has(outcome)) {
      throw new TypeError(
        `ticket outcome must be one of ${[...OUTCOMES].join(', ')}, got ${JSON.stringify(outcome)}`,
      );
    }
    if (!this.#open) return false;
    this.#open = false;
    this.#tracker.release(this.#claim);
    this.#method.complete?.(this.#decision, outcome);
    return true;
  }
}

export function createDispatcher(config: DispatcherConfig): Dispatcher {
  if (!isPlainObject(config)) {
    throw new PolicyConfigError(
      `dispatcher config must be an object like { method: 'prefix_match' }; valid methods: ${methodNames().join(', ')}`,
    );
  }
  const name = config.method;
  if (name === undefined || name === null) {
    throw new PolicyConfigError(
      `dispatcher config has no method: it is required, e.g. { method: 'cache_aware' }; valid methods: ${methodNames().join(', ')}`,
    );
  }
  const factory =
    typeof name === 'string' && Object.hasOwn(methodRegistry, name)
      ? methodRegistry[name]
      : undefined;
  if (!factory) {
    throw new PolicyConfigError(
      `unknown method ${JSON.stringify(name)}; valid methods: ${methodNames().join(', ')}`,
    );
  }
  const options = methodOptions(name as string, config);
  const method: Method = factory(options);
  const affinity: RoutingKeyAffinity | undefined = createAffinity(config.affinity);

  let tieCursor = 0;
  let decisions = 0;
  const reasons = new Map<string, number>();

  // Rotating tie-break: the candidate at or after the cursor (cyclically by rank number)
  // wins, and the cursor moves past it, so a burst of equal choices cycles through the ranks.
  const tieBreak = (candidates: readonly RankState[]): RankState => {
    const n = mctx.ranks.length;
    let best = candidates[0];
    if (!best) throw new RangeError('tieBreak needs at least one candidate');
    let bestDistance = Number.POSITIVE_INFINITY;
    for (const c of candidates) {
      const d = (((c.rank - tieCursor) % n) + n) % n;
      if (d < bestDistance) {
        bestDistance = d;
        best = c;
      }
    }
    tieCursor = (best.rank + 1) % n;
    return best;
  };

  // The load index of the ranks being decided on, when they are a tracker's own (begin
  // without a view): the least-loaded choice is then O(log R) and the healthy list is built
  // only if a method asks for it.
  let loadIndex: LoadIndex | undefined;
  let healthyList: readonly RankState[] | undefined;

  const pickLeast = (order: 'tokens' | 'requests'): RankState => {
    if (!loadIndex) return scanLeast(mctx, order);
    const rank = loadIndex.firstMinFrom(order, tieCursor);
    // A unique minimum is the only candidate and leaves the cursor where it is; among equals
    // the cursor moves past the winner.
    if (loadIndex.sharesMin(order, rank)) tieCursor = (rank + 1) % mctx.ranks.length;
    return mctx.ranks[rank] as RankState;
  };

  // The tracker of the decision being made (begin), whose index a method's cool values are
  // written to; and the index this dispatcher's cool array was last bound to (undefined: the
  // array changed while no index followed it, so the next query binds it again).
  let trackerIndex: LoadIndex | undefined;
  let coolIndex: LoadIndex | undefined;

  const queries: LoadQueries = {
    get healthChanges(): number {
      return (loadIndex as LoadIndex).healthChanges;
    },
    leastTokens: () => (loadIndex as LoadIndex).leastTokens(),
    // Unhealthy leaves hold +Infinity, the only load above Number.MAX_VALUE.
    firstHealthy: (from) => (loadIndex as LoadIndex).firstWithinFrom(Number.MAX_VALUE, from),
    firstWithin: (max) => (loadIndex as LoadIndex).firstWithinFrom(max, tieCursor),
    leastCool(cool) {
      const index = loadIndex as LoadIndex;
      if (coolIndex !== index || index.coolValues !== cool) {
        index.bindCool(cool);
        coolIndex = index;
      }
      const n = mctx.ranks.length;
      let rank: number;
      if (index.coolMinCount() === 1) rank = index.firstCoolMinFrom(0);
      else {
        rank = index.firstCoolMinFrom(tieCursor);
        tieCursor = (rank + 1) % n;
      }
      return mctx.ranks[rank] as RankState;
    },
  };

  const coolChanged = (cool: readonly number[], rank?: number): void => {
    const index = trackerIndex;
    if (index && index === coolIndex && index.coolValues === cool) {
      if (rank === undefined) index.bindCool(cool);
      else index.updateCool(rank);
    } else coolIndex = undefined;
  };

  // Reused per call: methods must not keep it (MethodContext is valid only during the call).
  const mctx: MethodContext = {
    request: {},
    ranks: [],
    get healthy(): readonly RankState[] {
      healthyList ??= healthyOf(mctx.ranks);
      return healthyList;
    },
    nowMs: 0,
    tieBreak,
    pickLeast,
    coolChanged,
    // Present from the start, so setting them per decision keeps the object's shape.
    kvIndex: undefined,
    prefixDigests: undefined,
    totals: undefined,
    queries: undefined,
  };

  const healthyOf = (ranks: readonly RankState[]): readonly RankState[] => {
    let all = true;
    for (let i = 0; i < ranks.length; i++) {
      const r = ranks[i] as RankState;
      if (r.rank !== i) {
        throw new RangeError(
          `ranks[${i}].rank must be ${i} (ranks are indexed by rank), got ${r.rank}`,
        );
      }
      if (!r.healthy) all = false;
    }
    return all ? ranks : ranks.filter((r) => r.healthy);
  };

  const routed = (raw: unknown, ranks: readonly RankState[]): Decision => {
    const n = ranks.length;
    if (typeof raw !== 'number' || !Number.isInteger(raw)) {
      throw new RoutedRankError(
        raw,
        n,
        `routed rank ${typeof raw === 'number' ? raw : JSON.stringify(raw)} is not an integer (valid 0..${n - 1})`,
      );
    }
    if (raw < 0 || raw >= n) {
      throw new RoutedRankError(
        raw,
        n,
        `routed rank ${raw} is out of range: there are ${n} ranks (valid 0..${n - 1})`,
      );
    }
    if (!(ranks[raw] as RankState).healthy) {
      throw new RoutedRankError(raw, n, `routed rank ${raw} is unhealthy`);
    }
    return { rank: raw, reason: 'routed' };
  };

  const decide = (
    request: RouteRequest,
    ranks: readonly RankState[],
    ctx: DispatchContext | undefined,
    index?: LoadIndex,
  ): Decision => {
    loadIndex = index;
    if (index) {
      // A tracker's own ranks: numbered by construction, health counted by the index.
      healthyList = undefined;
      if (index.healthyCount === 0) throw new NoHealthyRankError(ranks.length);
    } else {
      healthyList = healthyOf(ranks);
      if (healthyList.length === 0) throw new NoHealthyRankError(ranks.length);
    }
    const nowMs = ctx?.nowMs ?? 0;
    if (!Number.isFinite(nowMs)) {
      throw new RangeError(`ctx.nowMs must be a finite number, got ${nowMs}`);
    }
    mctx.request = request;
    mctx.ranks = ranks;
    mctx.nowMs = nowMs;
    mctx.kvIndex = ctx?.kvIndex;
    mctx.prefixDigests = ctx?.prefixDigests;
    mctx.totals = index;
    mctx.queries = index ? queries : undefined;

    let decision: Decision;
    const key = request.routingKey;
    // Checked whatever the method and affinity: consistent_hash would otherwise hash every
    // non-string key alike, and a host's bad key would surface only once affinity is on.
    if (key !== undefined && typeof key !== 'string') {
      throw new TypeError(`routingKey must be a string, got ${describeValue(key)}`);
    }
    if (request.routedRank !== undefined && request.routedRank !== null) {
      decision = routed(request.routedRank, ranks);
    } else if (affinity && key !== undefined && key !== '') {
      const pinned = affinity.lookup(key, nowMs);
      if (pinned !== undefined && pinned < ranks.length && (ranks[pinned] as RankState).healthy) {
        affinity.hits++;
        decision = { rank: pinned, reason: 'affinity' };
      } else {
        const placed = method.select(mctx);
        if (pinned === undefined) {
          affinity.misses++;
          decision = placed;
        } else {
          affinity.repicks++;
          decision = { rank: placed.rank, reason: 'affinity-repick' };
        }
        affinity.pin(key, placed.rank, nowMs);
      }
    } else {
      decision = method.select(mctx);
    }

    // Hosts trust the decision blindly, so a faulty method fails here, loudly and named.
    if (ranks[decision.rank]?.healthy !== true) {
      throw new Error(
        `${method.name} chose rank ${decision.rank} (${decision.reason}), which is not a healthy rank of ${ranks.length}`,
      );
    }
    method.commit?.(mctx, decision);
    decisions++;
    reasons.set(decision.reason, (reasons.get(decision.reason) ?? 0) + 1);
    return decision;
  };

  return {
    method: name as string,
    options,
    maxPromptTokens: method.maxPromptTokens ?? Number.POSITIVE_INFINITY,
    dispatch: (request, ranks, ctx) => {
      trackerIndex = undefined;
      return decide(request, ranks, ctx);
    },
    begin(request, tracker, ctx) {
      const view = ctx?.view ?? tracker.ranks;
      if (view.length !== tracker.ranks.length) {
        throw new RangeError(
          `ctx.view has ${view.length} ranks but the tracker has ${tracker.ranks.length}`,
        );
      }
      const own = view === tracker.ranks && tracker.index?.numRanks === view.length;
      trackerIndex = tracker.index?.numRanks === view.length ? tracker.index : undefined;
      const decision = decide(request, view, ctx, own ? tracker.index : undefined);
      const tokens = requestTokens(promptLength(request), request.maxNewTokens);
      const claim = tracker.claim(decision.rank, tokens);
      return new Ticket(decision, tokens, tracker, claim, method);
    },
    remapRanks(moves, numRanks) {
      checkMoves('remapRanks', moves, numRanks);
      method.remapRanks?.(moves, numRanks);
      affinity?.remap(moves);
      // Per-rank values a method bound into the load index (cache_aware's fill) moved without
      // a call to report them through: the next decision binds them again.
      coolIndex = undefined;
    },
    nameRanks(names) {
      const seen = new Set<string>();
      names.forEach((name, rank) => {
        if (name === null) return;
        if (typeof name !== 'string' || name === '') {
          throw new RangeError(`nameRanks: rank ${rank}'s name must be a non-empty string or null`);
        }
        if (seen.has(name)) {
          throw new RangeError(
            `nameRanks: rank ${rank} repeats another rank's name ${JSON.stringify(name)}`,
          );
        }
        seen.add(name);
      });
      method.nameRanks?.(names);
    },
    stats() {
      const out: DispatcherStats = { decisions, reasons: Object.fromEntries(reasons) };
      if (affinity) out.affinity = affinity.stats();
      const methodStats = method.stats?.();
      if (methodStats) out.method = methodStats;
      return out;
    },
  };
}
