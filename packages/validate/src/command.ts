// `kvroute-sim validate`: play a scenario against a live endpoint, simulate the same requests
// with the endpoint's policy, and print predicted vs observed. Bad input exits 2 before any
// request is sent; an unreachable target exits 1 naming the URL; an interrupted run (SIGINT)
// still writes every output for what completed and exits 130.
import { accessSync, constants, mkdirSync, writeFileSync } from 'node:fs';
import { dirname, resolve } from 'node:path';
import {
  type CliIo,
  createProgress,
  defaultProfileName,
  type Subcommand,
  UsageError,
} from '@kvroute/sim/cli';
import { chatRoutingIds, createHttpDriver, endpointUrl, getJson } from './http-driver.ts';
import { API_KINDS, describePolicy, parseValidateArgs, VALIDATE_USAGE } from './options.ts';
import { mapInputIds, restrictPlan, scalePlan } from './plan.ts';
import { loadRecord, openRecord, type RecordHeader, type RecordWriter } from './record.ts';
import { renderComparison } from './render.ts';
import { buildReport, type ValidateReport } from './report.ts';
import { drivePlan, planSize } from './runner.ts';
import { defaultBackend, type SimBackend, type SimPlan } from './sim-backend.ts';
import type { ApiKind, PlanRequest } from './types.ts';

export interface ValidateIo extends CliIo {
  /** Aborts the live run (the CLI wires SIGINT to it); outputs are still written. */
  signal?: AbortSignal;
}

interface TargetInfo {
  loadBalanceMethod?: string;
  /** A kvroute-router's own policy (method, options, affinity): what routes the requests. */
  routerPolicy?: Record<string, unknown> & { method: string };
  /** Set when the target is a kvroute-router: dpSize is then the ranks it routes over. */
  router?: boolean;
  profile?: string;
  timeScale?: number;
  dpSize?: number;
  maxTotalNumTokens?: number;
  pageSize?: number;
  chunkedPrefillSize?: number;
  /** The longest prompt plus output the target takes (SGLang's context_length). */
  contextLength?: number;
  engine?: string;
}

function intField(o: unknown, key: string): number | undefined {
  if (typeof o !== 'object' || o === null) return undefined;
  const v = (o as Record<string, unknown>)[key];
  return typeof v === 'number' && Number.isInteger(v) && v > 0 ? v : undefined;
}

/** Reads what the target says about itself; fails only when it cannot be reached at all. */
async function probeTarget(target: string): Promise<{ info: TargetInfo } | { error: string }> {
  const r = await getJson(target, '/get_server_info');
  if ('error' in r) return { error: r.error };
  if (r.status !== 200) return { info: {} };
  const b = r.body;
  const info: TargetInfo = {};
  const set = (
    k: 'dpSize' | 'maxTotalNumTokens' | 'pageSize' | 'chunkedPrefillSize',
    v: number | undefined,
  ) => {
    if (v !== undefined) info[k] = v;
  };
  set('dpSize', intField(b, 'dp_size'));
  set('maxTotalNumTokens', intField(b, 'max_total_num_tokens'));
  set('pageSize', intField(b, 'page_size'));
  set('chunkedPrefillSize', intField(b, 'chunked_prefill_size'));
  const ctx = intField(b, 'context_length');
  if (ctx !== undefined) info.contextLength = ctx;
  const o = (typeof b === 'object' && b !== null ? b : {}) as Record<string, unknown>;
  if (typeof o.engine === 'string') info.engine = o.engine;
  if (typeof o.load_balance_method === 'string') info.loadBalanceMethod = o.load_balance_method;
  if (typeof o.profile === 'string') info.profile = o.profile;
  if (typeof o.time_scale === 'number' && o.time_scale >= 0) info.timeScale = o.time_scale;
  // Behind a kvroute-router the worker fields describe one worker (its pool, its page size
  // hold per rank); the ranks and the policy are the router's.
  const router = o.kvroute_router;
  if (typeof router === 'object' && router !== null) {
    const r = router as Record<string, unknown>;
    info.router = true;
    delete info.dpSize;
    set('dpSize', intField(r, 'ranks'));
    const d = r.dispatcher as Record<string, unknown> | undefined;
    if (d && typeof d === 'object' && typeof d.method === 'string') {
      info.routerPolicy = { ...d, method: d.method };
    }
  }
  return { info };
}

async function firstModel(target: string): Promise<string | undefined> {
  const r = await getJson(target, '/v1/models');
  if ('error' in r || r.status !== 200) return undefined;
  const data = (r.body as { data?: { id?: unknown }[] } | undefined)?.data;
  const id = Array.isArray(data) ? data[0]?.id : undefined;
  return typeof id === 'string' ? id : undefined;
}

function pick(
  flag: number | undefined,
  fromTarget: number | undefined,
  fallback: number,
  fallbackSource: string,
): { value: number; source: string } {
  if (flag !== undefined) return { value: flag, source: 'flag' };
  if (fromTarget !== undefined) return { value: fromTarget, source: 'target /get_server_info' };
  return { value: fallback, source: fallbackSource };
}

export async function runValidate(
  argv: readonly string[],
  io: ValidateIo,
  backend: SimBackend = defaultBackend,
): Promise<number> {
  const opts = parseValidateArgs(argv, backend.methodNames());
  const path = (p: string) => resolve(io.cwd, p);
  const say = (s: string) => io.stderr.write(`${s}\n`);
  const jsonToStdout = opts.json === '-';
  const out = (s: string) => (jsonToStdout ? io.stderr : io.stdout).write(s);
  const notes: string[] = [];

  // Everything that can be wrong with the input is checked before a request leaves.
  endpointUrl(opts.target, '/');
  if (opts.profileFile !== undefined) {
    try {
      backend.loadProfile({ profileFile: path(opts.profileFile) });
    } catch (err) {
      throw new UsageError(
        `--profile-file ${opts.profileFile}: ${(err as Error).message}`,
        'validate',
      );
    }
  }
  // The reports are written after the run: a place they cannot go is found now, not after it.
  if (opts.json !== undefined && opts.json !== '-') writableFor('json', path(opts.json));
  if (opts.html !== undefined) writableFor('html', path(opts.html));
  if (opts.profile !== undefined) backend.loadProfile({ profile: opts.profile });
  if (opts.policyChosen) backend.checkPolicy(opts.policy);
  let plan: SimPlan;
  let recorded: RecordHeader | undefined;
  if (opts.replay !== undefined) {
    const rec = loadRecord(path(opts.replay));
    plan = { ...rec.plan, events: [] };
    recorded = rec.header;
    say(
      `validate: warning: the target's caches may still be warm from the recorded run; flush them (SGLang: POST /flush_cache) or restart the workers, or the observed hit rate runs high`,
    );
    notes.push(
      "replayed a recording: the target's caches may still hold its prompts from the recorded run unless they were flushed",
    );
  } else {
    plan = backend.buildPlan(opts.scenario!, opts.scenarioOptions, opts.seed);
  }
  if ((plan.events?.length ?? 0) > 0) {
    notes.push(
      `ignored ${plan.events!.length} cluster events of the scenario (rank failures, scale changes): a live target's ranks are not the harness's to change, so neither side models them`,
    );
    plan = { ...plan, events: [] };
  }
  plan = scalePlan(plan, { requests: opts.requests, concurrency: opts.concurrency });
  const planned = planSize(plan);
  if (planned === 0) {
    throw new UsageError('the plan has no requests (check --requests and --set)', 'validate');
  }

  const probe = await probeTarget(opts.target);
  if ('error' in probe) {
    say(`kvroute-sim validate: error: ${probe.error} (is the target running? nothing was sent)`);
    return 1;
  }
  const info = probe.info;
  // A prompt the target cannot take would be refused, every one of them: said now, not after
  // a run of 400s.
  if (info.contextLength !== undefined) {
    const all = plan.mode === 'closed' ? plan.clients.flat() : plan.requests;
    const over = all.filter((r) => r.inputIds.length >= info.contextLength!);
    if (over.length > 0) {
      const longest = Math.max(...over.map((r) => r.inputIds.length));
      throw new UsageError(
        `${over.length} of ${all.length} planned prompts are at or over the target's context length (${info.contextLength} tokens, its /get_server_info context_length; the longest is ${longest}): choose a scenario or options with shorter prompts, or a target with a longer context`,
        'validate',
      );
    }
  }

  // What the flags leave open, a kvroute worker says about itself (a single worker's
  // policy is its internal DP dispatcher; behind a router, pass --policy and --ranks).
  const recordedPolicy = recorded?.policy;
  const policy =
    !opts.policyChosen && recordedPolicy !== undefined ? { ...recordedPolicy } : { ...opts.policy };
  if (!opts.policyChosen && recordedPolicy !== undefined) {
    notes.push(`policy ${describePolicy(policy)}: the one the recording was predicted with`);
  } else if (!opts.policyChosen && info.routerPolicy !== undefined) {
    Object.assign(policy, info.routerPolicy);
    notes.push(`policy ${describePolicy(policy)}: the kvroute-router's own`);
  } else if (!opts.policyChosen && info.loadBalanceMethod !== undefined) {
    policy.method = info.loadBalanceMethod;
    notes.push(`policy ${policy.method}: the load_balance_method the target reports`);
  } else if (!opts.policyChosen) {
    notes.push(`policy ${policy.method}: the default; pass --policy to match the target's`);
  }
  backend.checkPolicy(policy);
  const policyLabel =
    opts.policyChosen || recordedPolicy === undefined
      ? (opts.policyLabel ?? describePolicy(policy))
      : describePolicy(policy);
  let timeScale = opts.timeScale;
  if (!opts.timeScaleChosen && info.timeScale !== undefined) {
    if (info.timeScale > 0) {
      timeScale = info.timeScale;
      if (timeScale !== 1) notes.push(`time scale ${timeScale}: the time_scale the target reports`);
    } else {
      notes.push(
        'the target reports time_scale 0 (instant): observed latencies say nothing about the cost model',
      );
    }
  }
  let profileWhich: { profile: string } | { profileFile: string };
  if (opts.profileFile !== undefined) profileWhich = { profileFile: path(opts.profileFile) };
  else if (opts.profile !== undefined) profileWhich = { profile: opts.profile };
  else if (recorded?.profileFile !== undefined) {
    profileWhich = { profileFile: recorded.profileFile };
    notes.push(`profile file ${recorded.profileFile}: the one the recording was predicted with`);
  } else if (recorded?.profile !== undefined && backend.profileNames().includes(recorded.profile)) {
    profileWhich = { profile: recorded.profile };
    notes.push(`profile ${recorded.profile}: the one the recording was predicted with`);
  } else if (info.profile !== undefined && backend.profileNames().includes(info.profile)) {
    profileWhich = { profile: info.profile };
    notes.push(`profile ${info.profile}: the cost profile the target reports`);
  } else {
    profileWhich = { profile: defaultProfileName(plan.scenario) };
    notes.push(
      `predicted with the default profile ${profileWhich.profile}; pass --profile or --profile-file for the target's hardware`,
    );
  }
  const profile = backend.loadProfile(profileWhich);

  const ranks = pick(opts.ranks, info.dpSize ?? recorded?.ranks, plan.ranks, `scenario default`);
  if (opts.ranks === undefined && info.router && info.dpSize !== undefined) {
    notes.push(`${info.dpSize} ranks: those the kvroute-router routes over`);
  } else if (opts.ranks === undefined && info.dpSize === undefined && recorded !== undefined) {
    notes.push(`${recorded.ranks} ranks: those the recording was predicted with`);
  } else if (opts.ranks === undefined && info.dpSize === undefined) {
    notes.push(
      `the target did not report dp_size; predicted with the scenario's ${plan.ranks} ranks (pass --ranks N if it runs a different number)`,
    );
  }
  const rankModel = {
    kvCapacityTokens: pick(
      opts.kvCapacityTokens,
      info.maxTotalNumTokens,
      profile.kvCapacityTokens,
      'profile',
    ),
    pageSize: pick(opts.pageSize, info.pageSize, 1, 'default'),
    chunkedPrefillSize: pick(
      opts.chunkedPrefillSize,
      info.chunkedPrefillSize,
      profile.chunkedPrefillSize,
      'profile',
    ),
  };
  const recordedApi = (API_KINDS as readonly string[]).includes(recorded?.api ?? '')
    ? (recorded!.api as ApiKind)
    : undefined;
  const api: ApiKind = !opts.apiChosen && recordedApi !== undefined ? recordedApi : opts.api;
  if (api !== opts.api) notes.push(`api ${api}: the request shape the recording used`);
  let model = opts.model;
  if (model === undefined && api !== 'generate') model = await firstModel(opts.target);

  const driver = createHttpDriver({
    target: opts.target,
    api,
    model,
    timeoutMs: opts.timeoutMs,
    headers: opts.headers,
  });
  // The simulator must see the tokens the target sees: for chat, those of the chat text.
  const seen = api === 'chat' ? mapInputIds(plan, chatRoutingIds) : plan;
  const byId = new Map<number, PlanRequest>();
  for (const r of seen.mode === 'closed' ? seen.clients.flat() : seen.requests) byId.set(r.id, r);

  let recorder: RecordWriter | undefined;
  if (opts.record !== undefined) {
    recorder = openRecord(
      path(opts.record),
      {
        format: 'kvroute-validate-record/v1',
        scenario: plan.scenario,
        mode: plan.mode,
        ranks: ranks.value,
        seed: opts.seed,
        target: opts.target,
        api,
        timeScale,
        startedAt: new Date().toISOString(),
        policy,
        profile: profile.name,
        ...('profileFile' in profileWhich ? { profileFile: profileWhich.profileFile } : {}),
      },
      plan,
    );
  }

  const progress = createProgress(io);
  let done = 0;
  let failed = 0;
  let firstError: string | undefined;
  say(
    `validate: sending ${planned} requests (${plan.mode} loop) of '${plan.scenario}' to ${driver.url}`,
  );
  const drive = await drivePlan(plan, driver, {
    timeScale,
    maxInFlight: plan.mode === 'open' ? opts.concurrency : undefined,
    signal: io.signal,
    onResult(obs, req) {
      done++;
      if (!obs.ok) {
        failed++;
        firstError ??= obs.error;
      }
      recorder?.write(req, obs);
      progress.update(done / planned, `${done}/${planned} requests, ${failed} failed`);
    },
  }).finally(() => {
    progress.done();
    recorder?.close();
    driver.close();
  });
  if (drive.interrupted) {
    notes.push(
      `interrupted: ${drive.observations.length} of ${planned} requests completed; the prediction covers the same ${drive.observations.length}`,
    );
  }
  if (drive.delayedByConcurrency > 0) {
    notes.push(
      `${drive.delayedByConcurrency} requests left later than planned because --concurrency ${opts.concurrency} was reached; the simulator does not model that cap`,
    );
  }
  const mismatched = drive.observations.filter(
    (o) =>
      o.ok && o.promptTokens !== undefined && o.promptTokens !== byId.get(o.id)?.inputIds.length,
  ).length;
  if (mismatched > 0) {
    notes.push(
      `${mismatched} responses reported a prompt length different from the request's token count (a chat template or tokenizer in between): hit rates compare approximately`,
    );
  }
  const noCached = drive.observations.filter((o) => o.ok && o.cachedTokens === undefined).length;
  if (noCached > 0) {
    notes.push(
      `${noCached} responses did not report cached tokens (SGLang: meta_info.cached_tokens; vLLM: start with --enable-prompt-tokens-details); counted as 0`,
    );
  }
  if (failed > 0 && firstError !== undefined) notes.push(`first error: ${firstError}`);

  // The prediction covers the requests the observation does: those that answered, when some
  // failed (a failed one's time and cache effect are not observed), and only those sent, when
  // the run was interrupted.
  if (failed > 0) {
    const ok = drive.observations.length - failed;
    notes.push(
      `${failed} of ${drive.observations.length} requests failed: the prediction covers the ${ok} that succeeded, as the observation does`,
    );
  }
  const simPlan =
    drive.interrupted || failed > 0
      ? restrictPlan(
          seen,
          new Set(drive.observations.filter((o) => failed === 0 || o.ok).map((o) => o.id)),
        )
      : seen;
  const predicted =
    planSize(simPlan) > 0
      ? backend.simulate(simPlan, {
          policy,
          ranks: ranks.value,
          profile,
          seed: opts.seed,
          rank: {
            kvCapacityTokens: rankModel.kvCapacityTokens.value,
            pageSize: rankModel.pageSize.value,
            chunkedPrefillSize: rankModel.chunkedPrefillSize.value,
          },
        })
      : [];

  const report: ValidateReport = buildReport({
    head: {
      target: opts.target,
      endpoint: driver.url,
      api,
      scenario: plan.scenario,
      scenarioOptions: opts.scenarioOptions,
      seed: opts.seed,
      ...(opts.replay !== undefined ? { replayOf: opts.replay } : {}),
      ranks: ranks.value,
      profile: profile.name,
      timeScale,
      policy: { label: policyLabel, config: policy },
      rankModel,
      interrupted: drive.interrupted,
      notes,
    },
    planned,
    plan: byId,
    observations: drive.observations,
    predicted,
  });

  out(formatSummary(report));
  if (opts.json !== undefined) {
    const text = `${JSON.stringify(report, null, 2)}\n`;
    if (jsonToStdout) io.stdout.write(text);
    else writeFileSync(path(opts.json), text);
  }
  if (opts.html !== undefined) {
    // vega loads only when asked for; a literal specifier still bundles under esbuild.
    const { renderValidateHtml } = await import('./html.ts');
    writeFileSync(path(opts.html), await renderValidateHtml(report));
  }

  if (drive.interrupted) return 130;
  if (report.observed.ok === 0) {
    say(
      `kvroute-sim validate: error: no request succeeded against ${driver.url}: ${firstError ?? 'unknown error'}`,
    );
    return 1;
  }
  return 0;
}

export function formatSummary(report: ValidateReport): string {
  const lines = [
    `scenario ${report.scenario}, seed ${report.seed}: ${report.requests.completed} ok, ${report.requests.failed} failed of ${report.requests.planned} planned; target ${report.endpoint}`,
    `prediction: ${report.policy.label} on ${report.ranks} ranks, profile ${report.profile}, kv ${report.rankModel.kvCapacityTokens?.value} tokens/rank`,
    '',
    renderComparison(report.comparison, report.policy.label),
    '',
  ];
  const ra = report.rankAgreement;
  if (ra.compared > 0) {
    lines.push(`rank agreement: ${ra.same}/${ra.compared} requests on the predicted rank`);
  }
  for (const n of report.notes) lines.push(`note: ${n}`);
  return `${lines.join('\n')}\n`;
}

export const command: Subcommand = {
  name: 'validate',
  summary: 'send a scenario to a live endpoint and compare what it did with the prediction',
  usage: `${VALIDATE_USAGE}\n`,
  async run(argv, io) {
    // SIGINT stops sending; what completed is still reported and recorded.
    const ac = new AbortController();
    const onSig = () => {
      io.stderr.write('\nvalidate: interrupted, writing results for what completed...\n');
      ac.abort();
    };
    process.once('SIGINT', onSig);
    try {
      return await runValidate(argv, { ...io, signal: ac.signal });
    } finally {
      process.off('SIGINT', onSig);
    }
  },
};

/** A report file's folder exists (made if missing) and can be written; else a usage error. */
function writableFor(flag: string, file: string): void {
  const dir = dirname(file);
  try {
    mkdirSync(dir, { recursive: true });
    accessSync(dir, constants.W_OK);
  } catch (err) {
    throw new UsageError(
      `--${flag} ${file}: cannot write there (${(err as Error).message})`,
      'validate',
    );
  }
}
