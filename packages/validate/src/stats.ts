// The predicted-vs-observed summaries live in the simulator's report module, so validate (live
// runs) and `kvroute-sim replay --observed` (recorded traces) compare with the same code.
export {
  type ComparisonRow,
  compareSummaries,
  type Distribution,
  distribution,
  outcomePercentile as percentile,
  type RunSummary,
  rankAgreement,
  relativeError,
  summarizeOutcomes as summarize,
} from '@kvroute/sim/report';
