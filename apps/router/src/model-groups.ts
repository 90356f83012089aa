// The router's policy state: worker groups keyed by model, each with its own workers, method
// and options, as SGLang's model gateway keeps a policy per model id. A request goes to the
// group whose name (or alias) its `model` field names; without a model, to the default
// group. A router configured without groups has one implicit group that takes every request
// whatever its model, exactly as a single-model router always did.
//
// All groups share one rank table (rank numbers are global, so health, outlier ejection,
// admission, the KV-event feed and the per-rank metrics work unchanged and per worker); a
// group's dispatcher sees the other groups' ranks as down. Its policy can be switched at run
// time (admin API, SIGHUP): the new dispatcher takes the next decision, and a request already
// dispatched closes its ticket on the dispatcher that began it (the ticket holds it), while
// the load it holds stays on the shared tracker, where the new dispatcher sees it.
import { EventEmitter } from 'node:events';
import { createDispatcher, type Dispatcher, type DispatcherConfig } from '@kvroute/policy';
import { RouterConfigError, RouterError } from './errors.ts';

/** What a group's policy is made of (RouterConfig has these fields for the implicit group). */
export interface PolicySettings {
  loadBalanceMethod: string;
  methodOptions: Record<string, number | string>;
  policyOptions: Record<string, unknown>;
  dpCacheAffinity?: 'routing_key';
  affinityMaxEntries: number;
  affinityTtlMs: number;
}

/** One entry of YAML `models:` (or one --model-group flag). */
export interface ModelGroupConfig {
  /** The name clients send as `model`. */
  model: string;
  /** More names that route to this group. */
  aliases: string[];
  workerUrls: string[];
  /** Unset: the top-level --load-balance-method. */
  loadBalanceMethod?: string;
  /** Method options set for this group, on top of the top-level ones. */
  methodOptions: Record<string, number | string>;
  /** --policy-option for this group (with its own method, the top-level ones are not inherited). */
  policyOptions: Record<string, unknown>;
  dpCacheAffinity?: 'routing_key';
  /** Requests without a model go here; default: the first group. */
  default: boolean;
}

/** The dispatcher config for a group's (or the implicit group's) settings. */
export function dispatcherConfigOf(s: PolicySettings): DispatcherConfig {
  const out: DispatcherConfig = { method: s.loadBalanceMethod };
  Object.assign(out, s.methodOptions);
  if (Object.keys(s.policyOptions).length > 0) out.options = { ...s.policyOptions };
  if (s.dpCacheAffinity === 'routing_key') {
    out.affinity = {
      kind: 'routing_key',
      maxEntries: s.affinityMaxEntries,
      ttlMs: s.affinityTtlMs,
    };
  }
  return out;
}

/** A group's effective settings: the top-level ones, overridden by what the group sets. */
export function groupSettings(top: PolicySettings, g: ModelGroupConfig): PolicySettings {
  const out: PolicySettings = {
    loadBalanceMethod: g.loadBalanceMethod ?? top.loadBalanceMethod,
    methodOptions: { ...top.methodOptions, ...g.methodOptions },
    policyOptions:
      g.loadBalanceMethod !== undefined && g.loadBalanceMethod !== top.loadBalanceMethod
        ? { ...g.policyOptions }
        : { ...top.policyOptions, ...g.policyOptions },
    affinityMaxEntries: top.affinityMaxEntries,
    affinityTtlMs: top.affinityTtlMs,
  };
  const affinity = g.dpCacheAffinity ?? top.dpCacheAffinity;
  if (affinity) out.dpCacheAffinity = affinity;
  return out;
}

/** A group key as the config reads it: the option's path and its converted value. */
export type GroupKeyReader = (
  key: string,
  value: unknown,
  what: string,
) => { path: string; value: unknown } | undefined;

/** Option paths a group may set for itself; everything else is router-wide. */
const GROUP_PATHS = new Set([
  'workerUrls',
  'loadBalanceMethod',
  'policyOptions',
  'dpCacheAffinity',
]);

function isGroupPath(path: string): boolean {
  return GROUP_PATHS.has(path) || path.startsWith('methodOptions.');
}

function applyGroupKey(
  g: ModelGroupConfig,
  key: string,
  value: unknown,
  what: string,
  read: GroupKeyReader,
): void {
  if (key === 'model' || key === 'name') {
    if (typeof value !== 'string' || value.trim() === '')
      throw new RouterConfigError(`${what}: 'model' must be a non-empty model name`);
    g.model = value.trim();
    return;
  }
  if (key === 'aliases') {
    const list = Array.isArray(value) ? value : String(value).split(/[\s,]+/);
    g.aliases.push(...list.map((v) => String(v).trim()).filter((v) => v.length > 0));
    return;
  }
  if (key === 'default') {
    if (value !== true && value !== false && value !== 'true' && value !== 'false' && value !== '')
      throw new RouterConfigError(`${what}: 'default' must be true or false`);
    g.default = value === true || value === 'true' || value === '';
    return;
  }
  const r = read(key === 'method' ? 'load-balance-method' : key, value, `${what}: ${key}`);
  if (!r || !isGroupPath(r.path)) {
    throw new RouterConfigError(
      `${what}: "${key}" is not a per-model key (a group sets model, aliases, default, worker-urls, load-balance-method, method options, policy-option, dp-cache-affinity; the rest is router-wide)`,
    );
  }
  if (r.path === 'workerUrls') g.workerUrls.push(...(r.value as string[]));
  else if (r.path === 'loadBalanceMethod') g.loadBalanceMethod = r.value as string;
  else if (r.path === 'policyOptions') Object.assign(g.policyOptions, r.value);
  else if (r.path === 'dpCacheAffinity') g.dpCacheAffinity = r.value as 'routing_key';
  else g.methodOptions[r.path.slice('methodOptions.'.length)] = r.value as number | string;
}

function emptyGroup(): ModelGroupConfig {
  return {
    model: '',
    aliases: [],
    workerUrls: [],
    methodOptions: {},
    policyOptions: {},
    default: false,
  };
}

/**
 * Groups from YAML (`models:` a list of maps) or a flag. The flag form, one group per value:
 * `NAME=URL[,URL...][;key=value...]`, e.g. `llama=http://a:30000,http://b:30000;method=round_robin`.
 */
export function parseModelGroups(
  value: unknown,
  what: string,
  read: GroupKeyReader,
): ModelGroupConfig[] {
  const items = Array.isArray(value) ? value : [value];
  return items.map((item, i) => {
    const at = Array.isArray(value) ? `${what}[${i}]` : what;
    const g = emptyGroup();
    if (typeof item === 'string') {
      const [head = '', ...rest] = item.split(';');
      const eq = head.indexOf('=');
      if (eq <= 0)
        throw new RouterConfigError(
          `${at}: expected NAME=URL[,URL...][;key=value...], got "${item}"`,
        );
      applyGroupKey(g, 'model', head.slice(0, eq), at, read);
      const urls = head.slice(eq + 1).trim();
      if (urls) applyGroupKey(g, 'worker-urls', urls, at, read);
      for (const part of rest) {
        if (part.trim() === '') continue;
        const e = part.indexOf('=');
        const k = (e < 0 ? part : part.slice(0, e)).trim();
        const v = e < 0 ? '' : part.slice(e + 1).trim();
        applyGroupKey(g, k, v, at, read);
      }
    } else if (item !== null && typeof item === 'object' && !Array.isArray(item)) {
      for (const [k, v] of Object.entries(item as Record<string, unknown>)) {
        if (v === null) continue;
        applyGroupKey(g, k, v, at, read);
      }
    } else {
      throw new RouterConfigError(
        `${at}: expected a map with model and worker-urls, got ${JSON.stringify(item)}`,
      );
    }
    if (!g.model) throw new RouterConfigError(`${at}: 'model' is required`);
    return g;
  });
}

/** Checks groups as a whole: names unique, a worker in one group only, one default at most. */
export function validateModelGroups(
  groups: ModelGroupConfig[],
  normalizeUrl: (u: string) => string,
): void {
  const names = new Map<string, string>();
  const urls = new Map<string, string>();
  let defaults = 0;
  for (const g of groups) {
    for (const n of [g.model, ...g.aliases]) {
      const prev = names.get(n);
      if (prev !== undefined)
        throw new RouterConfigError(
          `models: the name "${n}" is used by "${prev}" and "${g.model}"`,
        );
      names.set(n, g.model);
    }
    g.workerUrls = g.workerUrls.map(normalizeUrl);
    for (const u of g.workerUrls) {
      const prev = urls.get(u);
      if (prev !== undefined)
        throw new RouterConfigError(`models: worker ${u} is listed in "${prev}" and "${g.model}"`);
      urls.set(u, g.model);
    }
    if (g.default) defaults++;
  }
  if (defaults > 1) throw new RouterConfigError('models: more than one group has default: true');
}

/** The OpenAI error for a model no group serves (a 404, as OpenAI answers). */
export function modelNotFound(model: string): RouterError {
  return new RouterError('model_not_found', `The model \`${model}\` does not exist.`, 'model');
}

/** A group at run time. */
export interface WorkerGroup {
  /** Its model name; '' for the implicit group of a router without groups. */
  readonly name: string;
  /** Every name that routes here (model and aliases). */
  readonly names: readonly string[];
  readonly isDefault: boolean;
  /** The current policy; replaced by a switch (the previous one finishes its tickets). */
  dispatcher: Dispatcher;
  settings: PolicySettings;
  /** Ranks of other groups, which this group's policy sees as down; undefined with one group. */
  outside: ReadonlySet<number> | undefined;
}

/** What a policy switch emits (`policy_switch` on PolicyState.events). */
export interface PolicySwitchEvent {
  /** The group's model name ('' for the implicit group). */
  group: string;
  from: { method: string; options: Record<string, unknown> };
  to: { method: string; options: Record<string, unknown> };
  /** Who asked: 'admin' (POST /policy), 'sighup' (the YAML re-read), or an embedder's label. */
  source: string;
  /** Wall-clock time of the switch (ms since the epoch). */
  atMs: number;
}

export interface PolicyStateEvents {
  policy_switch: [PolicySwitchEvent];
}

/** The options a dispatcher config carries (method options and `options`), for logs and events. */
function optionsOf(cfg: DispatcherConfig): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(cfg)) {
    if (k !== 'method' && k !== 'options' && k !== 'affinity') out[k] = v;
  }
  if (cfg.options) Object.assign(out, cfg.options);
  return out;
}

/** The groups, how requests find theirs, and how a group's policy is switched. */
export class PolicyState {
  readonly groups: readonly WorkerGroup[];
  /** Emits 'policy_switch' (PolicySwitchEvent) after every switch. */
  readonly events = new EventEmitter<PolicyStateEvents>();
  /** Whether groups were configured (then an unknown `model` is a 404). */
  readonly multiModel: boolean;
  private readonly byName = new Map<string, WorkerGroup>();
  private readonly byUrl = new Map<string, WorkerGroup>();
  /** Each rank's worker name for the hash methods (refreshRanks); undefined until known. */
  private rankNames: readonly (string | null)[] | undefined;
  readonly defaultGroup: WorkerGroup;

  constructor(top: PolicySettings, configured: readonly ModelGroupConfig[]) {
    this.multiModel = configured.length > 0;
    const groups: WorkerGroup[] = [];
    if (!this.multiModel) {
      groups.push(this.make('', [], true, pickSettings(top)));
    } else {
      const anyDefault = configured.some((g) => g.default);
      configured.forEach((g, i) => {
        const settings = groupSettings(top, g);
        const group = this.make(
          g.model,
          g.aliases,
          anyDefault ? g.default : i === 0,
          settings,
          `models: "${g.model}": `,
        );
        groups.push(group);
        for (const u of g.workerUrls) this.byUrl.set(u, group);
      });
    }
    this.groups = groups;
    for (const g of groups) for (const n of g.names) this.byName.set(n, g);
    this.defaultGroup = groups.find((g) => g.isDefault) ?? (groups[0] as WorkerGroup);
  }

  private make(
    name: string,
    aliases: readonly string[],
    isDefault: boolean,
    settings: PolicySettings,
    context = '',
  ): WorkerGroup {
    let dispatcher: Dispatcher;
    try {
      dispatcher = createDispatcher(dispatcherConfigOf(settings));
    } catch (err) {
      throw new RouterConfigError(`${context}${(err as Error).message}`);
    }
    return {
      name,
      names: name === '' ? [] : [name, ...aliases],
      isDefault,
      dispatcher,
      settings,
      outside: undefined,
    };
  }

  /** The group for a request's `model`: the default without one; 404 for a name no group has. */
  resolve(model: string | undefined): WorkerGroup {
    if (!this.multiModel || model === undefined || model === '') return this.defaultGroup;
    const g = this.byName.get(model);
    if (!g) throw modelNotFound(model);
    return g;
  }

  /** A group by its model name or alias ('' or undefined: the default group). */
  find(name: string | undefined): WorkerGroup | undefined {
    if (name === undefined || name === '') return this.defaultGroup;
    return this.byName.get(name);
  }

  /** The configured group of a worker URL (others, added at run time, say theirs). */
  groupOfUrl(url: string): WorkerGroup | undefined {
    return this.byUrl.get(url);
  }

  /** Records which group a worker added at run time belongs to. */
  assign(url: string, group: WorkerGroup): void {
    this.byUrl.set(url, group);
  }

  forget(url: string): void {
    this.byUrl.delete(url);
  }

  /** The most prompt tokens any group's method reads (the body is scanned before the group is known). */
  get maxPromptTokens(): number {
    let max = 0;
    for (const g of this.groups) max = Math.max(max, g.dispatcher.maxPromptTokens);
    return max;
  }

  /**
   * After workers came or went: recomputes each group's `outside` ranks and names each
   * group's policy's ranks by worker (`names[rank]`, null for a removed worker's), its own
   * ranks only, so the hash methods key on workers rather than on rank indexes (a key keeps
   * its worker when ranks renumber) and only over the group's own workers.
   */
  refreshRanks(
    rankGroups: readonly (WorkerGroup | undefined)[],
    names: readonly (string | null)[],
  ): void {
    this.rankNames = names;
    if (this.multiModel) {
      for (const g of this.groups) {
        const out = new Set<number>();
        rankGroups.forEach((owner, rank) => {
          if (owner !== g) out.add(rank);
        });
        g.outside = out;
      }
    }
    for (const g of this.groups) this.nameRanks(g, g.dispatcher);
  }

  /** Names `dispatcher`'s ranks for group `g` (see refreshRanks), once ranks are known. */
  private nameRanks(g: WorkerGroup, dispatcher: Dispatcher): void {
    const names = this.rankNames;
    if (!names) return;
    const outside = g.outside;
    dispatcher.nameRanks(outside ? names.map((n, r) => (outside.has(r) ? null : n)) : names);
  }

  /**
   * Replaces a group's policy. The new dispatcher is built first: an invalid method or option
   * throws (RouterConfigError naming it) and the old policy keeps running.
   */
  switchPolicy(group: WorkerGroup, settings: PolicySettings, source: string): PolicySwitchEvent {
    return this.install(group, settings, this.build(group, settings), source);
  }

  /**
   * Applies the policies of a re-read configuration (SIGHUP): every group whose method or
   * options changed is switched, all or none. Throws, switching nothing, when a new policy is
   * invalid or the groups themselves changed (that needs a restart: workers and names are
   * not reloaded). Returns the switches made (none when nothing changed).
   */
  reload(
    top: PolicySettings,
    configured: readonly ModelGroupConfig[],
    source: string,
  ): PolicySwitchEvent[] {
    const before = this.groups.map((g) => g.names.join('|')).join(', ');
    const after = configured.map((g) => [g.model, ...g.aliases].join('|')).join(', ');
    if (before !== after) {
      throw new RouterConfigError(
        `the worker groups changed (${before || 'none'} -> ${after || 'none'}): adding, removing or renaming a model group needs a restart`,
      );
    }
    const plan: [WorkerGroup, PolicySettings, Dispatcher][] = [];
    this.groups.forEach((g, i) => {
      const cfg = configured[i];
      const settings = cfg ? groupSettings(top, cfg) : pickSettings(top);
      const same =
        JSON.stringify(dispatcherConfigOf(settings)) ===
        JSON.stringify(dispatcherConfigOf(g.settings));
      if (!same) plan.push([g, settings, this.build(g, settings)]);
    });
    return plan.map(([g, settings, d]) => this.install(g, settings, d, source));
  }

  private build(group: WorkerGroup, settings: PolicySettings): Dispatcher {
    const label = group.name === '' ? '' : `model "${group.name}": `;
    try {
      return createDispatcher(dispatcherConfigOf(settings));
    } catch (err) {
      throw new RouterConfigError(`${label}${(err as Error).message}`);
    }
  }

  private install(
    group: WorkerGroup,
    settings: PolicySettings,
    next: Dispatcher,
    source: string,
  ): PolicySwitchEvent {
    const prevCfg = dispatcherConfigOf(group.settings);
    const nextCfg = dispatcherConfigOf(settings);
    this.nameRanks(group, next);
    group.dispatcher = next;
    group.settings = settings;
    const event: PolicySwitchEvent = {
      group: group.name,
      from: { method: prevCfg.method, options: optionsOf(prevCfg) },
      to: { method: nextCfg.method, options: optionsOf(nextCfg) },
      source,
      atMs: Date.now(),
    };
    this.events.emit('policy_switch', event);
    return event;
  }
}

/** Only the policy's fields of a larger object (a RouterConfig). */
export function pickSettings(s: PolicySettings): PolicySettings {
  const out: PolicySettings = {
    loadBalanceMethod: s.loadBalanceMethod,
    methodOptions: { ...s.methodOptions },
    policyOptions: { ...s.policyOptions },
    affinityMaxEntries: s.affinityMaxEntries,
    affinityTtlMs: s.affinityTtlMs,
  };
  if (s.dpCacheAffinity) out.dpCacheAffinity = s.dpCacheAffinity;
  return out;
}
