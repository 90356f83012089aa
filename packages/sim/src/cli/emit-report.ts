// The renderers behind each report kind, so run, replay and sweep emit through one call and
// the table, JSON, CSV and HTML of a report always come from the same object.
import { runToCsv, sweepToCsv } from '../report/csv.ts';
import { renderRunHtml, renderSweepHtml } from '../report/html.ts';
import { toJson } from '../report/json.ts';
import { renderRunTable, renderSweepLoadTable, renderSweepTable } from '../report/table.ts';
import type {
  PolicySamples,
  RunExtras,
  RunReport,
  SweepLoadReport,
  SweepReport,
} from '../report/types.ts';
import type { CliIo } from './command.ts';
import { UsageError } from './errors.ts';
import { emit, type OutputTargets, writeOutput } from './outputs.ts';

export function emitRunReport(
  io: CliIo,
  targets: OutputTargets,
  report: RunReport,
  samples: readonly PolicySamples[],
  extras: () => RunExtras = () => ({}),
): Promise<void> {
  return emit(io, targets, {
    table: () => renderRunTable(report),
    json: () => toJson(report),
    csv: () => runToCsv(report),
    html: () => renderRunHtml(report, samples, extras()),
  });
}

/** A sweep's report (one grid, or the grid at several loads with `--load`). */
export function emitSweepReport(
  io: CliIo,
  targets: OutputTargets,
  report: SweepReport | SweepLoadReport,
): Promise<void> {
  if (report.format === 'kvroute-sim-sweep-load/v1') {
    if (targets.csv !== undefined || targets.html !== undefined) {
      throw new UsageError(
        'a sweep with --load writes the table and --json only (no --csv or --html)',
      );
    }
    return emit(io, targets, {
      table: () => renderSweepLoadTable(report),
      json: () => toJson(report),
      csv: () => '',
      html: async () => '',
    });
  }
  return emit(io, targets, {
    table: () => renderSweepTable(report),
    json: () => toJson(report),
    csv: () => sweepToCsv(report),
    html: () => renderSweepHtml(report),
  });
}

/** Writes a sweep's winning router config to `target` for --out-config. */
export function writeRouterConfig(
  io: CliIo,
  target: string,
  report: SweepReport | SweepLoadReport,
): void {
  writeOutput(io, 'out-config', target, report.routerConfig, (path) => {
    return `wrote the router config to ${path}`;
  });
  // A config predicted worse than what runs now is still written (it is the sweep's best of
  // the settings swept), with its warning on top of it and here.
  for (const line of report.routerConfig.split('\n')) {
    if (line.startsWith('# WARNING: ')) io.stderr.write(`warning: ${line.slice(11)}\n`);
  }
}
