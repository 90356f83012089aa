// What the router exposes to embedders, tests and its own plugins as `app.kvroute`. Its own
// module, so the plugins that read it do not import the builder that registers them.
import type { Dispatcher } from '@kvroute/policy';
import type { RequestLimits, RoutingTokenizer } from '@kvroute/protocol';
import type { FastifyInstance } from 'fastify';
import type { Agent } from 'undici';
import type { Admission } from './admission.ts';
import type { RouterConfig } from './config.ts';
import type { HealthMonitor } from './health.ts';
import type { KvEventsFeed } from './kv-events/feed.ts';
import type { LoadPoller } from './load-poller.ts';
import type { RouterMetrics } from './metrics.ts';
import type { PolicyState, PolicySwitchEvent } from './model-groups.ts';
import type { OutlierDetector } from './outlier.ts';
import type { PdMode } from './pd/mode.ts';
import type { RankTable, Worker } from './rank-table.ts';
import type { PolicyDescription, TraceRecorder } from './recording/recorder.ts';
import type { ResponseHomes } from './response-homes.ts';
import type { ShadowCacheModel } from './shadow/shadow-cache.ts';

/** What the router exposes to embedders and tests as `app.kvroute`. */
export interface RouterState {
  readonly config: RouterConfig;
  readonly table: RankTable;
  /** The worker groups (one per model, or the implicit one), their policies and switches. */
  readonly policy: PolicyState;
  /** The default group's current dispatcher (the only one without groups). */
  readonly dispatcher: Dispatcher;
  readonly health: HealthMonitor;
  readonly outlier: OutlierDetector;
  readonly admission: Admission;
  readonly loadPoller: LoadPoller;
  readonly metrics: RouterMetrics;
  readonly tokenizer: RoutingTokenizer;
  /** The keep-alive pools to the workers, shared by the proxy, checks and polls. */
  readonly agent: Agent;
  /** Request limits in force (max_tokens bound from the workers' context, JSON depth). */
  limits(): RequestLimits;
  /** With --admin-port: the app serving /metrics and the admin routes (cli.ts listens on it). */
  adminApp?: FastifyInstance;
  /** The events-fed cache index, when --kv-events-endpoint(s) is set. */
  readonly kvEvents: KvEventsFeed | undefined;
  /** With --pd-disaggregation: the decode side (the main table is the prefill side). */
  readonly pd: PdMode | undefined;
  /**
   * Applies a re-read configuration's methods and options to every group (SIGHUP's path):
   * all or nothing; throws RouterConfigError, switching nothing, when the new config is
   * invalid or its groups differ. Other settings in it are not applied (they need a restart).
   */
  reloadPolicies(next: RouterConfig, source: string): PolicySwitchEvent[];
  /** Counts a switch refused (bad method or options): the old policy kept running. */
  noteSwitchRefused(source: string): void;
  /** Adds a worker at runtime (the admin POST /ranks path), to the group of `model` if given. */
  addWorker(url: string, dpSize?: number, model?: string): Promise<Worker>;
  removeWorker(url: string): Worker | undefined;
  /** The traffic recorder (--record-trace, admin POST /trace_recording). */
  readonly recorder: TraceRecorder;
  /** Which worker holds each stored Responses API response the router passed. */
  readonly responseHomes: ResponseHomes;
  /** With --shadow-profile: the live cache model behind the kvroute_shadow_* metrics. */
  readonly shadow: ShadowCacheModel | undefined;
  /**
   * Marks a switch of method or options (hot reload) in the recorded trace, if one runs.
   * Whoever switches the policy calls it with the policy now in force.
   */
  markPolicySwitch(policy: PolicyDescription): void;
}

declare module 'fastify' {
  interface FastifyInstance {
    kvroute: RouterState;
  }
}
