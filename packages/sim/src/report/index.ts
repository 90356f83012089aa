// The report renderers (`@kvroute/sim/report`): they read the model's result types and know
// nothing of the engine or the CLI.
export {
  ecdfPoints,
  hitRateSpec,
  rankLoadSpec,
  sweepHeatmapSpec,
  tradeOffSpec,
  ttftCdfSpec,
  ttftTimelineSpec,
} from './charts.ts';
export { runToCsv, sweepToCsv } from './csv.ts';
export { fmtInt, fmtMs, fmtNum, fmtPct, renderTable } from './format.ts';
export { escapeHtml, htmlPage, renderRunHtml, renderSvg, renderSweepHtml } from './html.ts';
export { toJson } from './json.ts';
export {
  type ComparisonRow,
  compareSummaries,
  type Distribution,
  distribution,
  formatError,
  formatValue,
  type OutcomeRecord,
  percentile as outcomePercentile,
  type RunSummary,
  rankAgreement,
  relativeError,
  renderComparison,
  summarizeOutcomes,
} from './observed-comparison.ts';
export type { LayoutReport } from './pd-layout.ts';
export {
  layoutReport,
  layoutToCsv,
  layoutToJson,
  renderLayoutHtml,
  renderLayoutMarkdown,
  renderLayoutTable,
} from './pd-layout.ts';
export { chooseBest } from './sweep-choice.ts';
export { policyLabel, renderRunTable, renderSweepTable } from './table.ts';
export type {
  PolicyReport,
  PolicySamples,
  RunExtras,
  RunMarker,
  RunReport,
  SweepCell,
  SweepObjective,
  SweepReport,
} from './types.ts';
