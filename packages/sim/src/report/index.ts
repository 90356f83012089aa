// The report renderers' public surface, re-exported from @kvroute/sim's index.
export {
  ecdfPoints,
  hitRateSpec,
  rankLoadSpec,
  sweepHeatmapSpec,
  ttftCdfSpec,
  ttftTimelineSpec,
} from './charts.ts';
export { runToCsv, sweepToCsv } from './csv.ts';
export { escapeHtml, renderRunHtml, renderSvg, renderSweepHtml } from './html.ts';
export { toJson } from './json.ts';
export { chooseBest } from './sweep-choice.ts';
export { policyLabel, renderRunTable, renderSweepTable } from './table.ts';
export type {
  PolicyReport,
  PolicySamples,
  RunReport,
  SweepCell,
  SweepObjective,
  SweepReport,
} from './types.ts';
