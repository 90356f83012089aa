// `run --layout pd` and `sweep --layout pd`: colocated against prefill/decode-disaggregated on
// the same workload and GPU count. Flag names follow the router's PD mode (SGLang's router:
// --prefill-policy, --decode-policy).
import { methodNames } from '@kvroute/policy';
import { type EngineSettings, resolveEngine } from '../entities/presets.ts';
import type { RankOverrides } from '../host/cluster.ts';
import { compareLayouts } from '../pd/compare-layouts.ts';
import {
  LAYOUT_OBJECTIVES,
  type LayoutObjective,
  layoutReport,
  layoutToCsv,
  layoutToJson,
  renderLayoutHtml,
  renderLayoutMarkdown,
  renderLayoutTable,
} from '../report/pd-layout.ts';
import { parseAxisValues } from '../sweep/axes.ts';
import { withRequestRate } from '../workloads/load.ts';
import {
  bool,
  nonNegativeNumber,
  type OptionSpec,
  type Parsed,
  positiveInt,
  positiveNumber,
  str,
} from './args.ts';
import type { CliIo } from './command.ts';
import type { SimFlags } from './common.ts';
import { UsageError } from './errors.ts';
import { emit, stdoutIsData, writeOutput } from './outputs.ts';
import { parsePolicy } from './policies.ts';
import { createProgress } from './progress.ts';
import { buildWorkload } from './sim-api.ts';
import { engineOptions } from './simulate.ts';

export const LAYOUTS = ['colocated', 'pd'] as const;
export const DEFAULT_PREFILL_POLICY = 'cache_aware';
export const DEFAULT_DECODE_POLICY = 'total_tokens';

export const PD_OPTIONS: OptionSpec = {
  layout: { type: 'string' },
  'prefill-ranks': { type: 'string' },
  'decode-ranks': { type: 'string' },
  'pd-ratio': { type: 'string' },
  gpus: { type: 'string' },
  'link-gbps': { type: 'string' },
  'link-setup-ms': { type: 'string' },
  'prefill-policy': { type: 'string' },
  'decode-policy': { type: 'string' },
  'local-prefill-tokens': { type: 'string' },
  'kv-store-gbps': { type: 'string' },
  'kv-store-tokens': { type: 'string' },
  'decode-offload': { type: 'boolean' },
  md: { type: 'string' },
};

export const PD_FLAGS_HELP = `  --layout colocated|pd every rank prefills and decodes (colocated, default), or prefill and
                        decode on separate ranks (pd): then the report compares the layouts
  --prefill-ranks P     pd: prefill ranks (default: half of --ranks, else of the scenario's)
  --decode-ranks D      pd: decode ranks (default: the rest of --ranks); P + D = --ranks
  --link-gbps X         pd: prefill-to-decode link in Gb/s (default 400); the whole prompt's
                        KV (cached prefix included) crosses it
  --link-setup-ms MS    pd: fixed cost per KV transfer (default 1)
  --prefill-policy M    pd: method picking the prefill rank (default ${DEFAULT_PREFILL_POLICY});
                        options as name:key=value
  --decode-policy M     pd: method picking the decode rank (default ${DEFAULT_DECODE_POLICY})
  --local-prefill-tokens N
                        pd: conditional disaggregation: a request with at most N tokens not
                        cached on its decode rank is prefilled there (decode ranks are then
                        full engines with a prefix cache, as vLLM's; needs --decode-policy
                        cache_aware); default off
  --kv-store-gbps X     pd: a KV store the prefill ranks share (SGLang HiCache with a storage
                        backend), loaded from at X Gb/s per rank; prompts are written
                        through (default: no store)
  --kv-store-tokens N   pd: the store's size in tokens (default unbounded)
  --decode-offload      pd: decode ranks write what they generated to the store (SGLang
                        --disaggregation-decode-enable-offload-kvcache): the next turn's
                        prefill finds the previous reply; needs --kv-store-gbps (default off)
  --md FILE|-           pd: the layout table as markdown; '-' = stdout only (default: not written)`;

export const PD_SWEEP_HELP = `  --layout colocated|pd pd: sweep the prefill:decode split instead of a policy's options
                        (default colocated: the policy sweep)
  --gpus N              pd: GPUs per layout (default: --ranks, else the scenario's ranks)
  --pd-ratio LIST       pd: splits P:D of --gpus, e.g. 1:3,1:1,3:1 (default: every split
                        from 1:N-1 to N-1:1)
  --prefill-ranks LIST  pd: the same axis as prefill rank counts: 2,4,6 or a range 1..7 or
                        2..6:2 (default: as --pd-ratio)
  --objective OBJ       pd: ${LAYOUT_OBJECTIVES.join(' | ')} names the best split
                        (default ttft-p99)
  --prefill-policy M, --decode-policy M, --link-gbps X, --link-setup-ms MS, --md FILE|-
                        pd: as for run --layout pd (defaults ${DEFAULT_PREFILL_POLICY}, ${DEFAULT_DECODE_POLICY}, 400, 1; --md not written)
  --local-prefill-tokens N, --kv-store-gbps X, --kv-store-tokens N, --decode-offload
                        pd: as for run --layout pd (default: off, no store)`;

export function readLayout(p: Parsed): 'colocated' | 'pd' {
  const raw = str(p, 'layout') ?? 'colocated';
  if (!(LAYOUTS as readonly string[]).includes(raw)) {
    throw new UsageError(`unknown layout '${raw}'; valid layouts: ${LAYOUTS.join(', ')}`);
  }
  const layout = raw as 'colocated' | 'pd';
  if (layout === 'colocated') {
    for (const flag of Object.keys(PD_OPTIONS)) {
      const given =
        PD_OPTIONS[flag]?.type === 'boolean' ? bool(p, flag) : str(p, flag) !== undefined;
      if (flag !== 'layout' && given) {
        throw new UsageError(`--${flag} needs --layout pd`);
      }
    }
  }
  return layout;
}

/** `--pd-ratio 1:3,1:1`: splits of `gpus`; each part a positive integer, summing to gpus. */
export function parseSplits(raw: string | undefined, gpus: number): [number, number][] {
  if (gpus < 2) throw new UsageError(`the pd layout needs at least 2 GPUs, got ${gpus}`);
  if (raw === undefined) {
    return Array.from({ length: gpus - 1 }, (_, i) => [i + 1, gpus - i - 1] as [number, number]);
  }
  const out: [number, number][] = [];
  for (const part of raw.split(',')) {
    const m = /^\s*(\d+)\s*:\s*(\d+)\s*$/.exec(part);
    if (!m) throw new UsageError(`--pd-ratio entries are P:D (e.g. 1:3), got '${part}'`);
    const a = Number(m[1]);
    const b = Number(m[2]);
    if (a < 1 || b < 1) throw new UsageError(`--pd-ratio: both sides need >= 1, got '${part}'`);
    // A ratio that does not divide the GPU count exactly is scaled to it, if it can be.
    const p = (a * gpus) / (a + b);
    if (!Number.isInteger(p)) {
      throw new UsageError(
        `--pd-ratio ${a}:${b} does not split ${gpus} GPUs into whole ranks (use P:D with P + D dividing ${gpus})`,
      );
    }
    if (!out.some(([x]) => x === p)) out.push([p, gpus - p]);
  }
  return out;
}

/** `--prefill-ranks 2,4,6` or a range `1..7`, `2..6:2`: prefill ranks of `gpus`, the rest decode. */
export function prefillSplits(raw: string, gpus: number): [number, number][] {
  if (gpus < 2) throw new UsageError(`the pd layout needs at least 2 GPUs, got ${gpus}`);
  let values: number[];
  try {
    // The sweep's own axis syntax: a list, or LO..HI[:STEP] / LO..HI:xF.
    values = parseAxisValues('--prefill-ranks', raw, 'int').map(Number);
  } catch (err) {
    throw new UsageError((err as Error).message);
  }
  const out: [number, number][] = [];
  for (const v of values) {
    if (!Number.isInteger(v) || v < 1 || v >= gpus) {
      throw new UsageError(
        `--prefill-ranks ${v} leaves no ${v < 1 ? 'prefill' : 'decode'} rank of ${gpus} GPUs`,
      );
    }
    if (!out.some(([x]) => x === v)) out.push([v, gpus - v]);
  }
  return out;
}

function methodFlag(p: Parsed, flag: string, fallback: string, flags: SimFlags) {
  const raw = str(p, flag) ?? fallback;
  try {
    return parsePolicy(raw, flags.policyFlags);
  } catch (err) {
    if (err instanceof UsageError) {
      throw new UsageError(`--${flag}: ${err.message.replace(/^--policies: /, '')}`);
    }
    throw err;
  }
}

function readObjective(p: Parsed): LayoutObjective {
  const raw = str(p, 'objective') ?? 'ttft-p99';
  if (!(LAYOUT_OBJECTIVES as readonly string[]).includes(raw)) {
    throw new UsageError(
      `unknown objective '${raw}' for --layout pd; valid objectives: ${LAYOUT_OBJECTIVES.join(', ')}`,
    );
  }
  return raw as LayoutObjective;
}

/**
 * The policy sweep's flags, refused with `sweep --layout pd`. Checked before the shared flags
 * are read: consistent_hash's `load` option shares its flag with `--load`, whose rate:LIST
 * would be read as that option's value and refused for the wrong reason.
 */
export function refusePdSweepFlags(p: Parsed): void {
  for (const flag of [
    'jobs',
    'shard',
    'load',
    'policy',
    'option',
    'current',
    'hit-rate-within',
    'out-config',
  ]) {
    if (str(p, flag) !== undefined) {
      throw new UsageError(`--${flag} is not available with --layout pd (the split is the axis)`);
    }
  }
}

export interface PdLayoutInput {
  command: 'run' | 'sweep';
  scenario: string;
  flags: SimFlags;
}

export async function runPdLayout(io: CliIo, p: Parsed, input: PdLayoutInput): Promise<number> {
  const { flags, scenario } = input;
  if (str(p, 'policies') !== undefined) {
    throw new UsageError(
      `--layout pd takes --prefill-policy and --decode-policy instead of --policies (valid methods: ${methodNames().join(', ')})`,
    );
  }
  for (const flag of ['replicas', 'index-source', 'event-lag-ms', 'switch-policy']) {
    if (str(p, flag) !== undefined) {
      throw new UsageError(
        `--${flag} is not modelled with --layout pd (one router, its own learned index, one policy per side for the whole run)`,
      );
    }
  }
  const prefill = methodFlag(p, 'prefill-policy', DEFAULT_PREFILL_POLICY, flags);
  const decode = methodFlag(p, 'decode-policy', DEFAULT_DECODE_POLICY, flags);
  let plan = buildWorkload(scenario, flags.scenarioOptions, flags.seed);
  const engine = flags.engine;
  if (engine.requestRate !== undefined)
    plan = withRequestRate(plan, engine.requestRate, flags.seed);
  const total = flags.ranks ?? plan.ranks;
  let splits: [number, number][];
  if (input.command === 'sweep') {
    // (The policy sweep's own flags were refused by the sweep command, before flag parsing.)
    const gpusRaw = str(p, 'gpus');
    const gpus = gpusRaw !== undefined ? positiveInt('gpus', gpusRaw) : total;
    if (str(p, 'decode-ranks') !== undefined) {
      throw new UsageError(
        '--decode-ranks is for run; sweep takes --pd-ratio or --prefill-ranks LIST',
      );
    }
    const ratio = str(p, 'pd-ratio');
    const prefillList = str(p, 'prefill-ranks');
    if (ratio !== undefined && prefillList !== undefined) {
      throw new UsageError('give either --pd-ratio or --prefill-ranks, not both');
    }
    splits =
      prefillList !== undefined ? prefillSplits(prefillList, gpus) : parseSplits(ratio, gpus);
  } else {
    for (const flag of ['pd-ratio', 'gpus']) {
      if (str(p, flag) !== undefined) throw new UsageError(`--${flag} is for sweep --layout pd`);
    }
    const pr = str(p, 'prefill-ranks');
    const dr = str(p, 'decode-ranks');
    let P = pr !== undefined ? positiveInt('prefill-ranks', pr) : undefined;
    let D = dr !== undefined ? positiveInt('decode-ranks', dr) : undefined;
    if (P !== undefined && D !== undefined) {
      if (flags.ranks !== undefined && P + D !== flags.ranks) {
        throw new UsageError(
          `--prefill-ranks ${P} + --decode-ranks ${D} must equal --ranks ${flags.ranks} (or leave --ranks out)`,
        );
      }
    } else {
      if (total < 2) throw new UsageError(`the pd layout needs at least 2 ranks, got ${total}`);
      P ??= D !== undefined ? total - D : Math.floor(total / 2);
      D ??= total - P;
      if (P < 1 || D < 1) {
        throw new UsageError(
          `--ranks ${total} leaves no ${P < 1 ? 'prefill' : 'decode'} rank: give both --prefill-ranks and --decode-ranks`,
        );
      }
    }
    splits = [[P, D]];
  }
  const gbps = str(p, 'link-gbps');
  const setup = str(p, 'link-setup-ms');
  let setupMs: number | undefined;
  if (setup !== undefined) {
    setupMs = nonNegativeNumber('link-setup-ms', setup);
  }
  const localRaw = str(p, 'local-prefill-tokens');
  const localPrefillTokens =
    localRaw !== undefined ? positiveInt('local-prefill-tokens', localRaw) : undefined;
  const storeGbps = str(p, 'kv-store-gbps');
  const storeTokens = str(p, 'kv-store-tokens');
  const decodeOffload = bool(p, 'decode-offload');
  if (storeGbps === undefined && (storeTokens !== undefined || decodeOffload)) {
    throw new UsageError(
      `--${decodeOffload ? 'decode-offload' : 'kv-store-tokens'} needs --kv-store-gbps (the store it writes to)`,
    );
  }
  const kvStore =
    storeGbps === undefined
      ? undefined
      : {
          gbps: positiveNumber('kv-store-gbps', storeGbps),
          ...(storeTokens !== undefined
            ? { capacityTokens: positiveInt('kv-store-tokens', storeTokens) }
            : {}),
          decodeOffload,
        };
  const link = {
    gbps: gbps !== undefined ? positiveNumber('link-gbps', gbps) : 400,
    ...(setupMs !== undefined ? { setupMs } : {}),
  };
  // The same engine resolution as a colocated run (host tier included).
  const resolvedFlags = engineOptions(flags.profile, engine);
  const resolved = resolveEngine(
    flags.profile,
    'engine' in resolvedFlags ? (resolvedFlags.engine as EngineSettings) : {},
  );
  const { engine: _name, ...rank } = resolved;
  const rankOverrides: RankOverrides = rank;
  const progress = createProgress(io);
  let comparison: ReturnType<typeof compareLayouts>;
  try {
    comparison = compareLayouts(plan, {
      profile: flags.profile,
      seed: flags.seed,
      prefillPolicy: prefill.config,
      decodePolicy: decode.config,
      splits,
      // run: the same GPU count and the same prefill GPU count; sweep: the GPU count only.
      ...(input.command === 'sweep' ? { colocatedRanks: [splits[0]![0] + splits[0]![1]] } : {}),
      link,
      ...(localPrefillTokens !== undefined ? { localPrefillTokens } : {}),
      ...(kvStore !== undefined ? { kvStore } : {}),
      rank: rankOverrides,
      ...(engine.maxConcurrency !== undefined ? { maxConcurrency: engine.maxConcurrency } : {}),
      onProgress: (f) => progress.update(f, 'layouts'),
    });
  } catch (err) {
    // Bad combinations of input (a profile without a memory model, a scenario with cluster
    // events) come back as RangeErrors from the model: they are the user's to fix.
    if (err instanceof RangeError) throw new UsageError(err.message);
    throw err;
  } finally {
    progress.done();
  }
  const report = layoutReport(
    {
      command: input.command,
      scenario: plan.scenario,
      scenarioOptions: {
        ...(plan.options ?? flags.scenarioOptions),
        ...(flags.displayOptions ?? {}),
      },
      profile: flags.profile.name,
      seed: flags.seed,
      link: { gbps: link.gbps, setupMs: link.setupMs ?? 1 },
      prefillPolicy: prefill.method,
      decodePolicy: decode.method,
      ...(localPrefillTokens !== undefined ? { localPrefillTokens } : {}),
      ...(kvStore !== undefined ? { kvStore } : {}),
    },
    comparison.rows,
    comparison.targets,
    input.command === 'sweep' ? readObjective(p) : undefined,
  );
  const md = str(p, 'md');
  if (md !== undefined && md.trim() === '') throw new UsageError(`--md needs a file name or '-'`);
  if (md === '-' && stdoutIsData(flags.outputs)) {
    throw new UsageError(`only one of --json, --csv, --html, --md can be '-' (stdout)`);
  }
  await emit(io, flags.outputs, {
    // With `--md -` stdout carries the markdown only.
    table: () => (md === '-' ? '' : renderLayoutTable(report)),
    json: () => layoutToJson(report),
    csv: () => layoutToCsv(report),
    html: () => renderLayoutHtml(report, comparison.rows),
  });
  if (md !== undefined) writeOutput(io, 'md', md, renderLayoutMarkdown(report));
  return 0;
}
