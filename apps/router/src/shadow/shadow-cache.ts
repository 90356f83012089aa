// Live predicted vs observed (--shadow-profile): the simulator's per-rank radix cache (the
// same RadixCache class the simulator and the mock worker run, from @kvroute/sim/model) fed
// with the traffic the router routes, so the router can say, per request and per rank, how
// many prompt tokens the model predicts the rank had cached, next to how many the worker
// reported. Their hit rates over a sliding window give a drift gauge to alert on: a model
// that matched at tuning time and drifts now means the fleet changed (a smaller real KV pool
// than the profile's, another page size, engines restarted or flushed behind the router's
// back), so the tuned setting's prediction no longer holds.
//
// The model per rank, as SGLang runs its cache: a request's prompt is matched when it is
// dispatched (at most input-1 tokens, whole pages, as the engine leaves the last token to
// compute logits), then inserted and held unevictable until the request ends, with its
// output tokens reserved beside it; when the rank's KV pool (the profile's capacity) is full,
// least recently used unreferenced leaves are evicted. Output tokens are not cached: the
// router does not see their ids. Tokens are the router's routing tokens; the drift compares
// hit rates (ratios), so it holds even where the routing tokenizer is the approximate one.

import type { ReportedUsage } from '@kvroute/protocol';
import { type CostModel, getProfile, loadProfileFile, RadixCache } from '@kvroute/sim/model';
import { Counter, Gauge, type Registry } from 'prom-client';
import { type BoundCounter, bindCounter } from '../metrics.ts';

export interface ShadowSettings {
  /** A cost profile JSON file, or a built-in profile name. */
  profile: string;
  /** KV tokens per rank; default the profile's kvCapacityTokens. */
  kvCapacity?: number | undefined;
  pageSize: number;
  /** Requests per rank in the drift window. */
  window: number;
}

/** One dispatched attempt in the model; close it once, with what the worker reported. */
export interface ShadowTicket {
  /** Prompt tokens the model predicts the rank had cached. */
  readonly predicted: number;
  done(usage: ReportedUsage | undefined, completed: boolean): void;
}

/** Loads a profile by file path (anything with a / or ending .json) or built-in name. */
export function loadShadowProfile(profile: string): CostModel {
  try {
    if (profile.includes('/') || profile.endsWith('.json')) return loadProfileFile(profile);
    return getProfile(profile);
  } catch (err) {
    throw new Error(`--shadow-profile ${profile}: ${(err as Error).message}`);
  }
}

interface RankModel {
  cache: RadixCache;
  /** Output tokens reserved by the requests in flight (KV outside the tree). */
  reserved: number;
  /** The worker this rank belongs to: a rank taken over by another worker starts cold. */
  owner: string;
  /** Requests in flight (holding locks); a reset waits for none. */
  inFlight: number;
  resetPending: boolean;
  window: Window;
  predicted: BoundCounter;
  observed: BoundCounter;
  promptTokens: BoundCounter;
  observedPrompt: BoundCounter;
  compared: BoundCounter;
}

/** Running sums over the last `size` compared requests of one rank. */
class Window {
  private readonly rows: Float64Array;
  private at = 0;
  count = 0;
  predicted = 0;
  prompt = 0;
  observed = 0;
  observedPrompt = 0;

  constructor(private readonly size: number) {
    this.rows = new Float64Array(size * 4);
  }

  push(predicted: number, prompt: number, observed: number, observedPrompt: number): void {
    const r = this.rows;
    const o = this.at * 4;
    if (this.count === this.size) {
      this.predicted -= r[o]!;
      this.prompt -= r[o + 1]!;
      this.observed -= r[o + 2]!;
      this.observedPrompt -= r[o + 3]!;
    } else this.count++;
    r[o] = predicted;
    r[o + 1] = prompt;
    r[o + 2] = observed;
    r[o + 3] = observedPrompt;
    this.predicted += predicted;
    this.prompt += prompt;
    this.observed += observed;
    this.observedPrompt += observedPrompt;
    this.at = (this.at + 1) % this.size;
  }

  predictedRate(): number {
    return this.prompt > 0 ? this.predicted / this.prompt : 0;
  }

  observedRate(): number {
    return this.observedPrompt > 0 ? this.observed / this.observedPrompt : 0;
  }
}

export class ShadowCacheModel {
  readonly profile: CostModel;
  readonly capacity: number;
  private readonly ranks = new Map<number, RankModel>();
  private readonly predictedTotal: Counter<'rank'>;
  private readonly observedTotal: Counter<'rank'>;
  private readonly promptTotal: Counter<'rank'>;
  private readonly observedPromptTotal: Counter<'rank'>;
  private readonly comparedTotal: Counter<'rank'>;

  constructor(
    private readonly settings: ShadowSettings,
    registry: Registry,
  ) {
    this.profile = loadShadowProfile(settings.profile);
    this.capacity = settings.kvCapacity ?? this.profile.kvCapacityTokens;
    if (!Number.isInteger(settings.window) || settings.window < 1) {
      throw new Error(`--shadow-window must be an integer >= 1, got ${settings.window}`);
    }
    const registers = [registry];
    const labelNames = ['rank'] as const;
    this.predictedTotal = new Counter({
      name: 'kvroute_shadow_predicted_cached_tokens_total',
      help: 'Prompt tokens the live cache model (--shadow-profile) predicted each rank had cached, over the requests the worker reported cached tokens for (routing tokens)',
      labelNames,
      registers,
    });
    this.promptTotal = new Counter({
      name: 'kvroute_shadow_prompt_tokens_total',
      help: 'Prompt tokens (routing tokens) of the requests behind kvroute_shadow_predicted_cached_tokens_total',
      labelNames,
      registers,
    });
    this.observedTotal = new Counter({
      name: 'kvroute_shadow_observed_cached_tokens_total',
      help: 'Cached prompt tokens the workers reported, over the same requests as kvroute_shadow_predicted_cached_tokens_total',
      labelNames,
      registers,
    });
    this.observedPromptTotal = new Counter({
      name: 'kvroute_shadow_observed_prompt_tokens_total',
      help: 'Prompt tokens the workers reported, over the same requests as kvroute_shadow_observed_cached_tokens_total',
      labelNames,
      registers,
    });
    this.comparedTotal = new Counter({
      name: 'kvroute_shadow_compared_requests_total',
      help: 'Completed requests whose predicted and reported cached tokens were compared (the worker reported cached tokens)',
      labelNames,
      registers,
    });
    const gauge = (name: string, help: string, value: (w: Window) => number): void => {
      const ranks = this.ranks;
      new Gauge({
        name,
        help,
        labelNames,
        registers,
        collect() {
          this.reset();
          for (const [rank, m] of ranks) this.set({ rank: String(rank) }, value(m.window));
        },
      });
    };
    const n = settings.window;
    gauge(
      'kvroute_shadow_hit_rate_drift',
      `Predicted minus observed prompt cache hit rate per rank over its last ${n} compared requests (--shadow-window); alert on its absolute value`,
      (w) => w.predictedRate() - w.observedRate(),
    );
    gauge(
      'kvroute_shadow_predicted_hit_rate',
      `Predicted prompt cache hit rate per rank over its last ${n} compared requests`,
      (w) => w.predictedRate(),
    );
    gauge(
      'kvroute_shadow_observed_hit_rate',
      `Reported prompt cache hit rate per rank over its last ${n} compared requests`,
      (w) => w.observedRate(),
    );
    gauge(
      'kvroute_shadow_window_requests',
      'Compared requests in the drift window per rank (the drift means little while few)',
      (w) => w.count,
    );
  }

  /**
   * The request (its whole prompt's routing tokens and output bound) dispatched to `rank`
   * of worker `owner`: predicts its cached tokens and enters it into the rank's cache.
   */
  begin(rank: number, owner: string, ids: Uint32Array, maxNewTokens: number): ShadowTicket {
    const m = this.rank(rank, owner);
    const cache = m.cache;
    const len = ids.length;
    const { matchedTokens, handle } = cache.match(ids.subarray(0, Math.max(0, len - 1)));
    const reserve = Math.max(0, Math.min(maxNewTokens, this.capacity));
    // Room for the new part of the prompt and the output: unreferenced leaves go first.
    const need = len - matchedTokens + reserve;
    const free = this.capacity - cache.used - m.reserved;
    if (need > free) cache.evict(need - free);
    let held = handle;
    if (len <= this.capacity - m.reserved) {
      cache.lock(handle);
      held = cache.insertFrom(handle, matchedTokens, ids, len);
      cache.lock(held);
      cache.unlock(handle);
    } else {
      // Larger than the pool: the engine would refuse it; it leaves the cache as it was.
      cache.lock(held);
    }
    m.reserved += reserve;
    m.inFlight++;
    let open = true;
    return {
      predicted: matchedTokens,
      done: (usage, completed) => {
        if (!open) return;
        open = false;
        cache.unlock(held);
        m.reserved -= reserve;
        if (--m.inFlight === 0 && m.resetPending) {
          m.resetPending = false;
          cache.reset();
        }
        const cached = usage?.cachedTokens;
        if (!completed || usage === undefined || cached === undefined) return;
        m.predicted.inc(matchedTokens);
        m.promptTokens.inc(len);
        m.observed.inc(cached);
        m.observedPrompt.inc(usage.promptTokens);
        m.compared.inc(1);
        m.window.push(matchedTokens, len, cached, usage.promptTokens);
      },
    };
  }

  /** Every rank's cache emptied (the workers' caches were flushed). */
  reset(): void {
    for (const m of this.ranks.values()) {
      // Requests in flight hold nodes of the tree: the reset waits until they are done.
      if (m.inFlight === 0) m.cache.reset();
      else m.resetPending = true;
    }
  }

  private rank(rank: number, owner: string): RankModel {
    let m = this.ranks.get(rank);
    if (m && m.owner !== owner) {
      // Another worker serves this rank now: its cache is not the old one's.
      m.owner = owner;
      if (m.inFlight === 0) m.cache.reset();
      else m.resetPending = true;
    }
    if (!m) {
      const labels = { rank: String(rank) };
      m = {
        cache: new RadixCache({ capacityTokens: this.capacity, pageSize: this.settings.pageSize }),
        reserved: 0,
        owner,
        inFlight: 0,
        resetPending: false,
        window: new Window(this.settings.window),
        predicted: bindCounter(this.predictedTotal, labels),
        observed: bindCounter(this.observedTotal, labels),
        promptTokens: bindCounter(this.promptTotal, labels),
        observedPrompt: bindCounter(this.observedPromptTotal, labels),
        compared: bindCounter(this.comparedTotal, labels),
      };
      this.ranks.set(rank, m);
    }
    return m;
  }
}
