// The router's traffic recorder (--record-trace PATH, or on/off through the admin API): one
// JSON line per completed request, in the format docs/recorded-trace.md defines (Mooncake's
// timestamp, input_length, output_length, hash_ids, plus what the router observed), and event
// lines for the recording's start and for policy switches. Never prompt text: prompts become
// HMAC-keyed block ids (block-hasher.ts), routing keys a keyed hash.
//
// The request path pays nothing while recording is off (one boolean read), and while it is
// on, only for the sampled requests: their full prompt's tokens are kept (routing may read
// fewer) and, once the response is done, the request's facts are handed over with room held
// for its line in the bounded queue (or dropped and counted when it is full). The work comes
// after: once per event-loop turn (setImmediate) the handed-over requests are hashed
// (memoized on repeated prefixes) and written out as lines by a hand-written builder, and
// the file is written asynchronously in batches (trace-writer.ts). What waits for that turn
// is the requests of one turn, so it is bounded by the router's own concurrency.
import { randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { methodOptionSchema } from '@kvroute/policy';
import type { ReportedUsage } from '@kvroute/protocol';
import { Counter, Gauge, type Registry } from 'prom-client';
import type { RouterConfig } from '../config.ts';
import { BlockHasher } from './block-hasher.ts';
import { TraceWriter } from './trace-writer.ts';

export interface RecordingSettings {
  /** The live file; rotated files sit beside it as PATH.000001, ... */
  path: string;
  /** A file holding the per-deployment HMAC secret; absent: a random secret per recording. */
  secretFile?: string;
  /** Prompt tokens per hash id (Mooncake traces use 512). */
  blockTokens: number;
  /** Share of requests recorded, (0, 1]. */
  sampleRate: number;
  /** Rotate the live file at this size; 0 = never. */
  rotateBytes: number;
  /** Rotate the live file at this age; 0 = never. */
  rotateMs: number;
  /** Lines waiting for the disk, at most this many bytes; beyond it lines are dropped. */
  queueBytes: number;
}

/** What the proxy knows about one finished request. Times are performance.now() ms. */
export interface RecordedRequest {
  receivedAt: number;
  /** The whole prompt's routing tokens. */
  ids: Uint32Array;
  rank: number;
  reason: string;
  usage?: ReportedUsage | undefined;
  /** Token-carrying stream events relayed (output length when the worker reported none). */
  streamedTokens?: number | undefined;
  /** Time to first token: a stream's first event carrying output, else the first body byte. */
  ttftAt?: number | undefined;
  endAt: number;
  status: number;
  routingKey?: string | undefined;
  model?: string | undefined;
  stream: boolean;
}

/** The policy in force, as the `start` and `policy_switch` lines state it. */
export interface PolicyDescription {
  method: string;
  options: Record<string, unknown>;
  group?: string;
  /** With worker groups, on the start line: the group's rank indexes. */
  ranks?: number[];
}

export interface RecorderContext {
  /** The method and options in force now (the default group's, with worker groups). */
  policy(): PolicyDescription;
  /** With worker groups: each group's policy (model name as `group`); else none. */
  groups?(): PolicyDescription[];
  /** Ranks routed to now. */
  ranks(): number;
  /** Rank indexes not routable now because their worker was removed (ascending). */
  down?(): number[];
  /** The routing tokenizer's kind (approximate or huggingface): what a token is. */
  tokenizer: string;
  registry: Registry;
  log: { warn(obj: object, msg: string): void; info(obj: object, msg: string): void };
}

export interface RecordingStatus {
  recording: boolean;
  path?: string;
  block_tokens?: number;
  sample_rate?: number;
  origin_unix_ms?: number;
  /** Whether ids are keyed with a secret from a file (stable across recordings) or a random one. */
  secret?: 'file' | 'random';
  queued_lines?: number;
  written_lines?: number;
  rotations?: number;
  recorded: number;
  dropped: number;
}

/** The recording settings the config describes, at `path`. */
export function recordingSettings(config: RouterConfig, path: string): RecordingSettings {
  const out: RecordingSettings = {
    path,
    blockTokens: config.recordBlockTokens,
    sampleRate: config.recordSampleRate,
    rotateBytes: config.recordRotateBytes,
    rotateMs: config.recordRotateMs,
    queueBytes: config.recordQueueBytes,
  };
  if (config.recordTraceSecretFile !== undefined) out.secretFile = config.recordTraceSecretFile;
  return out;
}

/** The effective options of a method: those set, then the schema's defaults. */
export function effectiveOptions(
  method: string,
  set: Readonly<Record<string, unknown>>,
): Record<string, unknown> {
  let schema: Record<string, { default: unknown }>;
  try {
    schema = methodOptionSchema(method) as Record<string, { default: unknown }>;
  } catch {
    return { ...set };
  }
  const out: Record<string, unknown> = {};
  for (const [name, spec] of Object.entries(schema)) out[name] = set[name] ?? spec.default;
  return out;
}

/** Reads a secret file: its bytes, a trailing newline dropped; at least 16 bytes. */
export function readSecretFile(path: string): Buffer {
  let raw: Buffer;
  try {
    raw = readFileSync(path);
  } catch (err) {
    throw new Error(`--record-trace-secret-file ${path}: ${(err as Error).message}`);
  }
  let end = raw.length;
  while (end > 0 && (raw[end - 1] === 0x0a || raw[end - 1] === 0x0d)) end--;
  if (end < 16) {
    throw new Error(
      `--record-trace-secret-file ${path}: the secret must be at least 16 bytes, the file has ${end} (e.g. openssl rand -hex 32 > ${path})`,
    );
  }
  return raw.subarray(0, end);
}

export class TraceRecorder {
  /** True while a recording runs: the one thing the request path reads when it is off. */
  active = false;
  private settings: RecordingSettings | undefined;
  private writer: TraceWriter | undefined;
  private hasher: BlockHasher | undefined;
  private originPerf = 0;
  private originUnix = 0;
  private secretKind: 'file' | 'random' = 'random';
  private recordedCount = 0;
  private droppedCount = 0;
  /** Requests handed over this turn (room held in the writer's queue for each line). */
  private pending: RecordedRequest[] = [];
  private drainScheduled: NodeJS.Immediate | undefined;
  /** The rank count and removed ranks last written (start line or `ranks` event). */
  private lastRanks = '';
  private readonly recorded: Counter;
  private readonly dropped: Counter;
  private readonly errors: Counter;

  constructor(private readonly ctx: RecorderContext) {
    const registers = [ctx.registry];
    this.recorded = new Counter({
      name: 'kvroute_trace_recorded_total',
      help: 'Request lines queued for the recorded trace (--record-trace)',
      registers,
    });
    this.dropped = new Counter({
      name: 'kvroute_trace_dropped_total',
      help: 'Recorded-trace lines dropped because the write queue was full or a write failed',
      registers,
    });
    this.errors = new Counter({
      name: 'kvroute_trace_write_errors_total',
      help: 'Recorded-trace file writes, rotations or closes that failed',
      registers,
    });
    const self = this;
    new Gauge({
      name: 'kvroute_trace_recording',
      help: '1 while the router records its traffic, else 0',
      registers,
      collect() {
        this.set(self.active ? 1 : 0);
      },
    });
    new Gauge({
      name: 'kvroute_trace_queue_lines',
      help: 'Recorded-trace lines waiting for the disk',
      registers,
      collect() {
        this.set(self.writer?.queuedLines ?? 0);
      },
    });
  }

  /** Whether this request is recorded (the sampling draw); false while off. */
  sample(): boolean {
    if (!this.active) return false;
    const rate = this.settings!.sampleRate;
    return rate >= 1 || Math.random() < rate;
  }

  /** Starts a recording (stopping one that runs). Throws, naming the problem, on a bad setting. */
  async start(settings: RecordingSettings): Promise<RecordingStatus> {
    checkSettings(settings);
    const secret =
      settings.secretFile !== undefined ? readSecretFile(settings.secretFile) : randomBytes(32);
    if (this.active) await this.stop();
    this.originPerf = performance.now();
    this.originUnix = Date.now();
    this.secretKind = settings.secretFile !== undefined ? 'file' : 'random';
    const hasher = new BlockHasher({ secret, blockTokens: settings.blockTokens });
    const header = JSON.stringify(this.startLine(settings));
    // The header states the policy at the start of the recording; a rotated file repeats
    // the policy in force when it opens, so each file stands alone.
    let first = true;
    let writer: TraceWriter;
    try {
      writer = new TraceWriter({
        path: settings.path,
        rotateBytes: settings.rotateBytes,
        rotateMs: settings.rotateMs,
        queueBytes: settings.queueBytes,
        header: () => {
          if (first) {
            first = false;
            return header;
          }
          return JSON.stringify(this.startLine(settings));
        },
        onDrop: () => {
          this.droppedCount++;
          this.dropped.inc();
        },
        onError: (err) => {
          this.errors.inc();
          this.ctx.log.warn({ err, path: settings.path }, 'recorded trace: write failed');
        },
      });
    } catch (err) {
      throw new Error(`record trace ${settings.path}: ${(err as Error).message}`);
    }
    this.settings = settings;
    this.hasher = hasher;
    this.writer = writer;
    this.active = true;
    this.ctx.log.info(
      { path: settings.path, sampleRate: settings.sampleRate, blockTokens: settings.blockTokens },
      'recording traffic',
    );
    return this.status();
  }

  /** Stops the recording: what is queued is written, the file closed. */
  async stop(): Promise<RecordingStatus> {
    this.drain();
    const writer = this.writer;
    this.active = false;
    this.writer = undefined;
    this.hasher = undefined;
    if (writer) {
      await writer.close();
      this.ctx.log.info({ path: this.settings?.path }, 'recording stopped');
    }
    const out = this.status();
    return out;
  }

  status(): RecordingStatus {
    const s = this.settings;
    const w = this.writer;
    if (!this.active || !s || !w) {
      return { recording: false, recorded: this.recordedCount, dropped: this.droppedCount };
    }
    return {
      recording: true,
      path: s.path,
      block_tokens: s.blockTokens,
      sample_rate: s.sampleRate,
      origin_unix_ms: this.originUnix,
      secret: this.secretKind,
      queued_lines: w.queuedLines,
      written_lines: w.written,
      rotations: w.rotations,
      recorded: this.recordedCount,
      dropped: this.droppedCount,
    };
  }

  /**
   * One request's line (the proxy calls it once the response is over): room for the line is
   * held now (or the line is dropped and counted), the line is built after this turn.
   */
  record(r: RecordedRequest): void {
    const writer = this.writer;
    if (!this.active || !writer || !this.hasher) return;
    if (!writer.reserve(requestLineBound(r, this.settings!.blockTokens))) return;
    this.recordedCount++;
    this.pending.push(r);
    this.drainScheduled ??= setImmediate(this.drainNow);
  }

  private readonly drainNow = (): void => {
    this.drainScheduled = undefined;
    this.drain();
  };

  /** Builds and queues the lines of the requests handed over since the last drain. */
  private drain(): void {
    if (this.drainScheduled !== undefined) {
      clearImmediate(this.drainScheduled);
      this.drainScheduled = undefined;
    }
    const batch = this.pending;
    if (batch.length === 0) return;
    this.pending = [];
    const writer = this.writer;
    const hasher = this.hasher;
    if (!writer || !hasher) return;
    const blockTokens = this.settings!.blockTokens;
    for (const r of batch) {
      writer.pushReserved(
        requestLine(r, this.originPerf, hasher),
        requestLineBound(r, blockTokens),
      );
    }
    this.recorded.inc(batch.length);
  }

  /** Marks a switch of method or options (hot reload) in the recording, if one runs. */
  markPolicySwitch(p: PolicyDescription): void {
    const writer = this.writer;
    if (!this.active || !writer) return;
    // Requests that finished before the switch are written before it.
    this.drain();
    const line: Record<string, unknown> = {
      event: 'policy_switch',
      timestamp: Math.max(0, Math.round(performance.now() - this.originPerf)),
      method: p.method,
      options: p.options,
    };
    if (p.group !== undefined) line.group = p.group;
    writer.push(JSON.stringify(line));
  }

  /**
   * Marks a change of the router's ranks (a worker added or removed) in the recorded trace,
   * if one runs and the count or the removed ranks differ from what the file last said, so a
   * replay follows them.
   */
  markRanks(): void {
    const writer = this.writer;
    if (!this.active || !writer) return;
    const ranks = this.ctx.ranks();
    const down = this.ctx.down?.() ?? [];
    const key = `${ranks}:${down.join(',')}`;
    if (key === this.lastRanks) return;
    this.lastRanks = key;
    // Requests that finished before the change are written before it.
    this.drain();
    writer.push(
      JSON.stringify({
        event: 'ranks',
        timestamp: Math.max(0, Math.round(performance.now() - this.originPerf)),
        ranks,
        down,
      }),
    );
  }

  async close(): Promise<void> {
    await this.stop();
  }

  private startLine(s: RecordingSettings): Record<string, unknown> {
    const p = this.ctx.policy();
    const line: Record<string, unknown> = {
      event: 'start',
      origin_unix_ms: this.originUnix,
      block_tokens: s.blockTokens,
      sample_rate: s.sampleRate,
      method: p.method,
      options: p.options,
      ranks: this.ctx.ranks(),
      tokenizer: this.ctx.tokenizer,
    };
    const down = this.ctx.down?.() ?? [];
    if (down.length > 0) line.down = down;
    this.lastRanks = `${line.ranks}:${down.join(',')}`;
    if (p.group !== undefined) line.group = p.group;
    const groups = this.ctx.groups?.() ?? [];
    if (groups.length > 0) line.groups = groups;
    return line;
  }
}

/**
 * An upper bound of a request's line length, its newline included: the fixed fields with
 * their longest numbers, 16 characters per block id (15 digits and a comma), and the strings
 * escaped at worst. Room for this much is held in the queue until the line is built.
 */
export function requestLineBound(r: RecordedRequest, blockTokens: number): number {
  const blocks = Math.ceil(r.ids.length / blockTokens);
  return (
    LINE_FIXED +
    16 * blocks +
    6 * r.reason.length +
    (r.model === undefined ? 0 : 6 * r.model.length + 12) +
    (r.routingKey === undefined ? 0 : 26)
  );
}

/**
 * The request line, fields in the order docs/recorded-trace.md lists them, built by hand:
 * the same text JSON.stringify gives for the object with those fields, at a fraction of
 * the cost (no object to walk, numbers and ids joined straight into the string).
 */
export function requestLine(r: RecordedRequest, originPerf: number, hasher: BlockHasher): string {
  const usage = r.usage;
  let line = `{"timestamp":${Math.max(0, Math.round(r.receivedAt - originPerf))},"input_length":${Math.max(1, usage?.promptTokens ?? r.ids.length)},"output_length":${usage?.outputTokens ?? r.streamedTokens ?? 0},"hash_ids":[${hasher.hashIds(r.ids).join(',')}],"rank":${r.rank},"reason":${JSON.stringify(r.reason)}`;
  if (usage?.cachedTokens !== undefined) line += `,"cached_tokens":${usage.cachedTokens}`;
  if (r.ttftAt !== undefined) line += `,"ttft_ms":${round3(r.ttftAt - r.receivedAt)}`;
  line += `,"e2e_ms":${round3(r.endAt - r.receivedAt)},"status":${r.status}`;
  if (r.routingKey !== undefined) line += `,"key":"${hasher.keyHash(r.routingKey)}"`;
  if (r.model !== undefined) line += `,"model":${JSON.stringify(r.model)}`;
  return `${line},"stream":${r.stream ? 'true' : 'false'}}`;
}

/**
 * A request line's length without its block ids, reason, model and key: the field names and
 * punctuation (144 characters with every optional field, rounded up) and its numbers at
 * their longest (any double prints in at most 24 characters: timestamp, lengths, cached
 * tokens, times; 11 for rank and status).
 */
const LINE_FIXED = 150 + 6 * 24 + 2 * 11;

/** Milliseconds to the microsecond, never negative, always a finite JSON number. */
function round3(ms: number): number {
  const v = Math.round(Math.max(0, ms) * 1000) / 1000;
  return Number.isFinite(v) ? v : 0;
}

function checkSettings(s: RecordingSettings): void {
  if (typeof s.path !== 'string' || s.path.length === 0) {
    throw new Error('record trace: the path must be a non-empty file path');
  }
  if (!Number.isInteger(s.blockTokens) || s.blockTokens < 1) {
    throw new Error(`record trace: block tokens must be an integer >= 1, got ${s.blockTokens}`);
  }
  if (!(s.sampleRate > 0 && s.sampleRate <= 1)) {
    throw new Error(`record trace: the sample rate must be in (0, 1], got ${s.sampleRate}`);
  }
  if (!(s.queueBytes >= 1024)) {
    throw new Error(`record trace: the queue must hold at least 1024 bytes, got ${s.queueBytes}`);
  }
  if (!(s.rotateBytes >= 0) || !(s.rotateMs >= 0)) {
    throw new Error('record trace: rotation size and age must be >= 0 (0 = never)');
  }
}
