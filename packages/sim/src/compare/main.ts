// `pnpm compare` (also `kvroute-sim compare`): regenerates docs/policy-comparison.md and
// docs/policy-comparison.html. Progress goes to stderr; the files are deterministic for the
// same arguments (no wall-clock figures in them).
import { mkdirSync, writeFileSync } from 'node:fs';
import { resolve } from 'node:path';
import { parseArgs } from 'node:util';
import { methodNames } from '@kvroute/policy';
import { repoRoot } from '../cost/calibration.ts';
import {
  methodOptionFlags,
  methodOptionsHelp,
  readMethodOptionFlags,
} from '../method-option-flags.ts';
import { runPolicyComparison } from './policy-comparison.ts';
import { renderHtml, renderMarkdown } from './render.ts';

export const USAGE = `usage: pnpm compare [--quick] [--out-dir DIR] [--methods a,b] [--seed S] [--trace FILE] [--jobs N]
       kvroute-sim compare [same flags]

Runs every registered method on hot-prefix, rank-failure, scale-out, agentic, seed-sequential
and the Mooncake replay (own pace, the speed-up at which round_robin's busiest rank is >= 70%
busy, and x8) on 16 ranks of h200-llama-3.1-8b, and writes docs/policy-comparison.md and
docs/policy-comparison.html with the one-big-cache bound and the load-aware targets judged.
  --quick        small sizes (a smoke run; the files say so)
  --out-dir DIR  where to write (default: <repo>/docs)
  --methods a,b  a subset of the registered methods
  --seed S       run seed (default 1)
  --trace FILE   Mooncake-format trace (default: the shared conversation trace)
  --jobs N       runs at once, on this thread and N - 1 worker threads (integer >= 1;
                 default: one per core). The files are the same bytes for any N.
method options, set for every method that reads them (default: each method's own):
${methodOptionsHelp()}
`;

/** Where `main` writes and resolves paths; the CLI's io has this shape, so it passes its own. */
export interface CompareIo {
  stdout: { write(chunk: string): unknown };
  stderr: { write(chunk: string): unknown };
  cwd: string;
}

// pnpm runs scripts in the package directory; INIT_CWD is where the user typed the command.
const processIo: CompareIo = {
  stdout: process.stdout,
  stderr: process.stderr,
  cwd: process.env.INIT_CWD ?? process.cwd(),
};

export async function main(argv: string[], io: CompareIo = processIo): Promise<number> {
  let values: {
    quick?: boolean;
    'out-dir'?: string;
    methods?: string;
    seed?: string;
    trace?: string;
    jobs?: string;
    help?: boolean;
  };
  try {
    ({ values } = parseArgs({
      // pnpm passes the `--` of `pnpm compare -- --quick` through; it is not an argument.
      args: argv[0] === '--' ? argv.slice(1) : argv,
      options: {
        quick: { type: 'boolean' },
        'out-dir': { type: 'string' },
        methods: { type: 'string' },
        seed: { type: 'string' },
        trace: { type: 'string' },
        jobs: { type: 'string' },
        ...methodOptionFlags(),
        help: { type: 'boolean', short: 'h' },
      },
    }));
  } catch (error) {
    io.stderr.write(`compare: ${(error as Error).message}\n`);
    return 2;
  }
  let methodOptions: Record<string, number | string>;
  try {
    const flags = values as Record<string, unknown>;
    methodOptions = readMethodOptionFlags((flag) => {
      const v = flags[flag];
      return typeof v === 'string' ? v : undefined;
    });
  } catch (error) {
    io.stderr.write(`compare: ${(error as Error).message}\n`);
    return 2;
  }
  if (values.help) {
    io.stdout.write(USAGE);
    return 0;
  }
  const valid = methodNames();
  const methods = values.methods
    ?.split(',')
    .map((m) => m.trim())
    .filter(Boolean);
  for (const m of methods ?? []) {
    if (!valid.includes(m)) {
      io.stderr.write(`compare: unknown method '${m}'; valid methods: ${valid.join(', ')}\n`);
      return 2;
    }
  }
  let workers: number | undefined;
  if (values.jobs !== undefined) {
    workers = /^\d+$/.test(values.jobs) ? Number(values.jobs) : Number.NaN;
    if (!(workers >= 1)) {
      io.stderr.write(`compare: --jobs must be an integer >= 1, got '${values.jobs}'\n`);
      return 2;
    }
  }
  const seed =
    values.seed === undefined ? 1 : /^\d+$/.test(values.seed) ? Number(values.seed) : values.seed;
  const outDir = values['out-dir']
    ? resolve(io.cwd, values['out-dir'])
    : resolve(repoRoot(), 'docs');
  const t0 = performance.now();
  const comparison = await runPolicyComparison({
    quick: values.quick ?? false,
    ...(workers !== undefined ? { workers } : {}),
    seed,
    methodOptions,
    ...(methods ? { methods } : {}),
    ...(values.trace ? { traceFile: resolve(io.cwd, values.trace) } : {}),
    log: (line) => io.stderr.write(`${line}\n`),
  });
  mkdirSync(outDir, { recursive: true });
  const md = resolve(outDir, 'policy-comparison.md');
  const html = resolve(outDir, 'policy-comparison.html');
  writeFileSync(md, renderMarkdown(comparison));
  writeFileSync(html, await renderHtml(comparison));
  const missed = comparison.targets.filter((t) => !t.met).length;
  io.stderr.write(
    `wrote ${md} and ${html} in ${((performance.now() - t0) / 1000).toFixed(0)} s; targets: ${comparison.targets.length - missed} met, ${missed} missed\n`,
  );
  return 0;
}

if (import.meta.url === `file://${process.argv[1]}`) {
  main(process.argv.slice(2)).then(
    (code) => process.exit(code),
    (error) => {
      process.stderr.write(`compare: ${(error as Error).stack ?? String(error)}\n`);
      process.exit(1);
    },
  );
}
