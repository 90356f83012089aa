// The validate harness's public surface (`@kvroute/validate`): drive a plan against a live
// endpoint, record it, and compare what happened with the simulator's prediction.
export { command as validateCommand, runValidate, type ValidateIo } from './command.ts';
export {
  chatRoutingIds,
  createHttpDriver,
  type DriverOptions,
  endpointUrl,
  type HttpDriver,
  idsToChatText,
  type SendResult,
} from './http-driver.ts';
export { parseValidateArgs, VALIDATE_USAGE, type ValidateOptions } from './options.ts';
export { materializePlan, restrictPlan, scalePlan } from './plan.ts';
export {
  type LoadedRecord,
  loadRecord,
  openRecord,
  RECORD_FORMAT,
  RecordFormatError,
  type RecordHeader,
  type RecordLine,
} from './record.ts';
export { renderComparison } from './render.ts';
export { REPORT_FORMAT, type ValidateReport } from './report.ts';
export { type DriveOptions, type DriveResult, drivePlan, type Sender } from './runner.ts';
export { defaultBackend, type SimBackend } from './sim-backend.ts';
export {
  type ComparisonRow,
  compareSummaries,
  type RunSummary,
  relativeError,
  summarize as summarizeOutcomes,
} from './stats.ts';
export type { ApiKind, Observation, OutcomeRecord, PlanRequest, ValidatePlan } from './types.ts';
