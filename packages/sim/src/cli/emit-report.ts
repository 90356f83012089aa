// The renderers behind each report kind, so run, replay and sweep emit through one call and
// the table, JSON, CSV and HTML of a report always come from the same object.
import { runToCsv, sweepToCsv } from '../report/csv.ts';
import { renderRunHtml, renderSweepHtml } from '../report/html.ts';
import { toJson } from '../report/json.ts';
import { renderRunTable, renderSweepTable } from '../report/table.ts';
import type { PolicySamples, RunExtras, RunReport, SweepReport } from '../report/types.ts';
import type { CliIo } from './command.ts';
import { emit, type OutputTargets } from './outputs.ts';

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

export function emitSweepReport(
  io: CliIo,
  targets: OutputTargets,
  report: SweepReport,
): Promise<void> {
  return emit(io, targets, {
    table: () => renderSweepTable(report),
    json: () => toJson(report),
    csv: () => sweepToCsv(report),
    html: () => renderSweepHtml(report),
  });
}
