// The simulator's model: engine, entities, cache, cost, workloads, metrics, and the
// simulate/compare drivers over them. `@kvroute/sim/model` resolves here, so a host that only
// needs the model (the mock worker) loads no report, CLI or HTTP code: nothing below may
// import from report/, cli/, compare/ or another package's host code.

export type {
  MatchResult,
  RadixCacheHooks,
  RadixCacheOptions,
  RadixHandle,
} from './cache/radix-cache.ts';
export { RadixCache } from './cache/radix-cache.ts';
export type {
  ComparisonOptions,
  ComparisonResult,
  ComparisonRun,
} from './compare.ts';
export { policyConfig, runComparison, runComparisonDetailed } from './compare.ts';
export { readCalibration, repoRoot, sharedFile } from './cost/calibration.ts';
export type {
  CostModel,
  CostProfileSpec,
  DecodeCoefficients,
  PrefillCoefficients,
} from './cost/cost-model.ts';
export {
  costModelFromSpec,
  loadProfileFile,
  MIN_CHUNKED_PREFILL_SIZE,
  parseProfileSpec,
} from './cost/cost-model.ts';
export type { KvLink } from './cost/kv-transfer.ts';
export {
  checkKvLink,
  DEFAULT_KV_LINK_GBPS,
  DEFAULT_KV_SETUP_MS,
  kvLoadTokensPerMs,
  kvTransferBytes,
  kvTransferMs,
  profileKvBytesPerToken,
} from './cost/kv-transfer.ts';
export type { MemoryModel, ModelShape } from './cost/memory.ts';
export { kvBytesPerToken, kvCapacityFromMemory } from './cost/memory.ts';
export { getProfile, getProfileSpec, profileNames } from './cost/profiles.ts';
export type { ScheduledEvent, Scheduler } from './engine/event-queue.ts';
export { EventHeap, EventQueue, HeapEvent } from './engine/event-queue.ts';
export { DpAttentionGroup } from './entities/dp-attention-group.ts';
export type {
  HostKvOptions,
  RankLoad,
  RankModelOptions,
  RankRequest,
  RankStats,
  StepDriver,
} from './entities/rank.ts';
export { finishedPath, KvCapacityError, RankModel, writeBack } from './entities/rank.ts';
export { latencyStats, percentile, summarize } from './metrics/summary.ts';
export type {
  LatencyStats,
  PolicyRunResult,
  PolicyRunSummary,
  RankSummary,
  RequestRecord,
  SubsetLatency,
} from './metrics/types.ts';
export type {
  HitRateTarget,
  LayoutComparison,
  LayoutComparisonOptions,
  LayoutRow,
} from './pd/compare-layouts.ts';
export { compareLayouts, replyShare } from './pd/compare-layouts.ts';
export type {
  DecodeRankOptions,
  DecodeRankStats,
  DecodeRequest,
  DecodeStepRecord,
} from './pd/decode-rank.ts';
export { DecodeRankModel } from './pd/decode-rank.ts';
export type {
  DecodeRankSummary,
  PdRequestRecord,
  PdRunResult,
  PdSimulateOptions,
  PdSummary,
} from './pd/simulate-pd.ts';
export { recordItlMs, simulatePd } from './pd/simulate-pd.ts';
export type { RankOverrides, SimulateOptions } from './simulate.ts';
export { simulatePlan } from './simulate.ts';
export { WorkloadOptionError } from './workloads/options.ts';
export { stream, VOCAB, zipfSampler } from './workloads/random.ts';
export {
  buildWorkload,
  getScenario,
  registerScenario,
  scenarioList,
  scenarioNames,
} from './workloads/registry.ts';
export { defaultTracePath, resolveTracePath, TraceFormatError } from './workloads/replay.ts';
export {
  type PolicySwitch,
  parseTrace,
  readTraceFile,
  type TraceFile,
  type TraceLine,
  type TraceStart,
} from './workloads/trace-file.ts';
export type {
  ClusterEvent,
  ScenarioDefinition,
  WorkloadPlan,
  WorkloadRequest,
} from './workloads/types.ts';
