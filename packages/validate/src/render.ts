// Text rendering of predicted vs observed: shared with `kvroute-sim replay --observed`.
export { formatError, formatValue, renderComparison } from '@kvroute/sim/report';
