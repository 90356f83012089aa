// Reads a trace file: a Mooncake trace (one request per line: `timestamp`, `input_length`,
// `output_length`, `hash_ids`) or a trace the router recorded (docs/recorded-trace.md: the
// same request lines plus what the router observed, and event lines). One reader, so replay,
// `replay --observed`, `fit` and `sweep` accept the same files and fail the same way.
//
// Event lines (an `event` field): `start` gives the block size, the rank count and the routing
// setting the traffic was recorded under (rotation repeats it: repeats must agree);
// `policy_switch` marks a change of method or options at a moment of the recording; any other
// event is skipped. Recorded request lines are written as requests complete, so a recorded
// file is put in timestamp (receipt) order; a plain Mooncake file must already be in order.
import { closeSync, openSync, readSync } from 'node:fs';

export class TraceFormatError extends Error {
  readonly code = 'TRACE_FORMAT';
}

/** The `start` event: how the recording was made. */
export interface TraceStart {
  originUnixMs?: number;
  blockTokens: number;
  sampleRate?: number;
  method?: string;
  options?: Record<string, unknown>;
  ranks?: number;
  /** Rank indexes that were not routable when the file opened (workers removed). */
  down?: number[];
  model?: string;
  /**
   * A router with worker groups (one per model): each group's policy when the file opened.
   * The top-level method and options are the default group's.
   */
  groups?: TraceGroup[];
}

/** One worker group of the `start` event: its model name and its policy. */
export interface TraceGroup {
  group: string;
  method: string;
  options: Record<string, unknown>;
  /** The group's rank indexes when the file opened (routers that write them). */
  ranks?: number[];
}

/**
 * A `ranks` event: from `timestamp` on, the router had `ranks` ranks, of which `down` were not
 * routable (workers added or removed at run time).
 */
export interface RankChange {
  timestamp: number;
  ranks: number;
  down: number[];
}

/** A `policy_switch` event: from `timestamp` on, the router routed with this setting. */
export interface PolicySwitch {
  timestamp: number;
  method: string;
  options: Record<string, unknown>;
  /** With worker groups: the group (model name) that switched; the others did not. */
  group?: string;
}

/** What the router observed about one request (every field optional: Mooncake lines have none). */
export interface TraceObserved {
  rank?: number;
  reason?: string;
  /** Absent when the worker did not report it (never 0 for unknown). */
  cachedTokens?: number;
  /** Router-side time to the first byte of the body; absent when none arrived. */
  ttftMs?: number;
  e2eMs?: number;
  status?: number;
  key?: string;
  model?: string;
  stream?: boolean;
}

export interface TraceLine {
  /** 1-based line number in the file, for errors and per-request reports. */
  line: number;
  timestamp: number;
  inputLength: number;
  outputLength: number;
  hashIds: number[];
  observed?: TraceObserved;
}

export interface TraceFile {
  file: string;
  /** Present for recorded traces. */
  start?: TraceStart;
  switches: PolicySwitch[];
  /** The router's rank changes, in timestamp order. */
  rankChanges: RankChange[];
  /** In timestamp order. */
  lines: TraceLine[];
  /** Malformed lines skipped (skipInvalid) and event lines of kinds not read here. */
  skipped: number;
  /** Block size the hash ids were read with. */
  blockTokens: number;
}

export interface ReadTraceOptions {
  /** Tokens per hash block; default the start line's block_tokens, else 512. */
  blockTokens?: number;
  /** Skip malformed lines (counted) instead of failing. */
  skipInvalid?: boolean;
  /** Keep at most this many requests (0: all). */
  limit?: number;
  /**
   * Read the lines as the router's even without a start line (a recording its events were
   * taken out of): written at completion, so put in timestamp order rather than refused.
   */
  recordedLines?: boolean;
}

type Obj = Record<string, unknown>;

const isInt = (v: unknown, min: number): v is number =>
  typeof v === 'number' && Number.isInteger(v) && v >= min;
const isNum = (v: unknown, min: number): v is number =>
  typeof v === 'number' && Number.isFinite(v) && v >= min;
// JSON.parse reads 1e400 as Infinity, which JSON.stringify writes as null: say what it is.
const show = (v: unknown) =>
  typeof v === 'number' && !Number.isFinite(v)
    ? `a number out of range (parsed as ${v})`
    : (JSON.stringify(v) ?? String(v));
const isObj = (v: unknown): v is Obj => typeof v === 'object' && v !== null && !Array.isArray(v);

function parseStart(o: Obj): TraceStart | string {
  if (!isInt(o.block_tokens, 1)) {
    return `start: block_tokens must be an integer >= 1, got ${show(o.block_tokens)}`;
  }
  const s: TraceStart = { blockTokens: o.block_tokens };
  if (o.origin_unix_ms !== undefined) {
    if (!isNum(o.origin_unix_ms, 0)) return `start: origin_unix_ms must be a number >= 0`;
    s.originUnixMs = o.origin_unix_ms;
  }
  if (o.sample_rate !== undefined) {
    if (!isNum(o.sample_rate, 0) || o.sample_rate > 1 || o.sample_rate === 0) {
      return `start: sample_rate must be a number in (0, 1], got ${show(o.sample_rate)}`;
    }
    s.sampleRate = o.sample_rate;
  }
  if (o.method !== undefined) {
    if (typeof o.method !== 'string' || o.method === '') return 'start: method must be a name';
    s.method = o.method;
  }
  if (o.options !== undefined) {
    if (!isObj(o.options)) return `start: options must be an object, got ${show(o.options)}`;
    s.options = o.options;
  }
  if (o.ranks !== undefined) {
    if (!isInt(o.ranks, 1)) return `start: ranks must be an integer >= 1, got ${show(o.ranks)}`;
    s.ranks = o.ranks;
  }
  if (typeof o.model === 'string') s.model = o.model;
  if (o.down !== undefined && s.ranks !== undefined) {
    const down = rankList(o.down, s.ranks, 'start');
    if (typeof down === 'string') return down;
    if (down.length > 0) s.down = down;
  }
  if (o.groups !== undefined) {
    if (!Array.isArray(o.groups)) return `start: groups must be an array, got ${show(o.groups)}`;
    const groups: TraceGroup[] = [];
    for (const g of o.groups) {
      if (!isObj(g) || typeof g.group !== 'string' || g.group === '') {
        return `start: each of groups needs a group (model name), got ${show(g)}`;
      }
      if (typeof g.method !== 'string' || g.method === '') {
        return `start: group ${g.group}: method must be a name, got ${show(g.method)}`;
      }
      if (g.options !== undefined && !isObj(g.options)) {
        return `start: group ${g.group}: options must be an object, got ${show(g.options)}`;
      }
      const group: TraceGroup = {
        group: g.group,
        method: g.method,
        options: (g.options as Obj) ?? {},
      };
      if (g.ranks !== undefined) {
        const r = g.ranks;
        if (!Array.isArray(r) || !r.every((x) => Number.isInteger(x) && (x as number) >= 0)) {
          return `start: group ${g.group}: ranks must be a list of rank indexes, got ${show(r)}`;
        }
        group.ranks = r as number[];
      }
      groups.push(group);
    }
    if (groups.length > 0) s.groups = groups;
  }
  return s;
}

/** A list of rank indexes below `ranks`, or why not. */
function rankList(v: unknown, ranks: number, where: string): number[] | string {
  if (!Array.isArray(v) || !v.every((r) => Number.isInteger(r) && r >= 0 && r < ranks)) {
    return `${where}: down must be a list of rank indexes below ranks (${ranks}), got ${show(v)}`;
  }
  return v as number[];
}

function parseRankChange(o: Obj): RankChange | string {
  if (!isNum(o.timestamp, 0)) {
    return `ranks: timestamp must be a number >= 0, got ${show(o.timestamp)}`;
  }
  if (!Number.isInteger(o.ranks) || (o.ranks as number) < 1) {
    return `ranks: ranks must be a whole number >= 1, got ${show(o.ranks)}`;
  }
  const ranks = o.ranks as number;
  const down = o.down === undefined ? [] : rankList(o.down, ranks, 'ranks');
  if (typeof down === 'string') return down;
  return { timestamp: o.timestamp, ranks, down };
}

function parseSwitch(o: Obj): PolicySwitch | string {
  if (!isNum(o.timestamp, 0)) {
    return `policy_switch: timestamp must be a number >= 0, got ${show(o.timestamp)}`;
  }
  if (typeof o.method !== 'string' || o.method === '') {
    return `policy_switch: method must be a name, got ${show(o.method)}`;
  }
  if (o.options !== undefined && !isObj(o.options)) {
    return `policy_switch: options must be an object, got ${show(o.options)}`;
  }
  if (o.group !== undefined && (typeof o.group !== 'string' || o.group === '')) {
    return `policy_switch: group must be a model name, got ${show(o.group)}`;
  }
  return {
    timestamp: o.timestamp,
    method: o.method,
    options: (o.options as Obj) ?? {},
    ...(o.group !== undefined ? { group: o.group as string } : {}),
  };
}

function parseObserved(o: Obj, inputLength: number): TraceObserved | string | undefined {
  const obs: TraceObserved = {};
  let any = false;
  const take = <K extends keyof TraceObserved>(k: K, v: TraceObserved[K]) => {
    obs[k] = v;
    any = true;
  };
  if (o.rank !== undefined) {
    if (!isInt(o.rank, 0)) return `rank must be an integer >= 0, got ${show(o.rank)}`;
    take('rank', o.rank);
  }
  if (o.reason !== undefined) {
    if (typeof o.reason !== 'string') return `reason must be a string, got ${show(o.reason)}`;
    take('reason', o.reason);
  }
  if (o.cached_tokens !== undefined && o.cached_tokens !== null) {
    if (!isInt(o.cached_tokens, 0) || o.cached_tokens > inputLength) {
      return `cached_tokens must be an integer in [0, input_length ${inputLength}], got ${show(o.cached_tokens)}`;
    }
    take('cachedTokens', o.cached_tokens);
  }
  if (o.ttft_ms !== undefined && o.ttft_ms !== null) {
    if (!isNum(o.ttft_ms, 0)) return `ttft_ms must be a number >= 0, got ${show(o.ttft_ms)}`;
    take('ttftMs', o.ttft_ms);
  }
  if (o.e2e_ms !== undefined) {
    if (!isNum(o.e2e_ms, 0)) return `e2e_ms must be a number >= 0, got ${show(o.e2e_ms)}`;
    take('e2eMs', o.e2e_ms);
  }
  if (o.status !== undefined) {
    if (!isInt(o.status, 0)) return `status must be an HTTP status code, got ${show(o.status)}`;
    take('status', o.status);
  }
  if (o.key !== undefined) {
    if (typeof o.key !== 'string') return `key must be a string, got ${show(o.key)}`;
    take('key', o.key);
  }
  if (typeof o.model === 'string') take('model', o.model);
  if (o.stream !== undefined) {
    if (typeof o.stream !== 'boolean') return `stream must be true or false, got ${show(o.stream)}`;
    take('stream', o.stream);
  }
  return any ? obs : undefined;
}

function parseRequest(o: Obj, line: number, blockTokens: number): TraceLine | string {
  const { timestamp, input_length, output_length, hash_ids } = o;
  if (!isNum(timestamp, 0)) return `timestamp must be a number >= 0, got ${show(timestamp)}`;
  if (!isInt(input_length, 1)) {
    return `input_length must be an integer >= 1, got ${show(input_length)}`;
  }
  if (!isInt(output_length, 0)) {
    return `output_length must be an integer >= 0, got ${show(output_length)}`;
  }
  if (!Array.isArray(hash_ids) || !hash_ids.every((h) => isInt(h, 0))) {
    return 'hash_ids must be an array of non-negative integers';
  }
  const blocks = Math.ceil(input_length / blockTokens);
  if (hash_ids.length < blocks) {
    return `hash_ids has ${hash_ids.length} ids, input_length ${input_length} needs ${blocks} (blocks of ${blockTokens} tokens)`;
  }
  const observed = parseObserved(o, input_length);
  if (typeof observed === 'string') return observed;
  return {
    line,
    timestamp,
    inputLength: input_length,
    outputLength: output_length,
    hashIds: hash_ids as number[],
    ...(observed ? { observed } : {}),
  };
}

/** Where parsed request lines go: an array of lines, or a TraceTable. */
interface RequestSink {
  readonly length: number;
  push(line: TraceLine): void;
}

/**
 * A trace's request lines as columns: what a replay keeps of each line. A TraceLine object
 * with its hash id array takes ~300 bytes; a row here takes 20 bytes plus 4 per hash id (8
 * once an id needs more than 32 bits: a recorded trace's ids are 48-bit), so a long trace
 * costs a replay a third of the memory. `line(i)` gives the row as a TraceLine.
 */
export class TraceTable implements RequestSink {
  length = 0;
  private lineNos = new Uint32Array(1024);
  private timestamps = new Float64Array(1024);
  private inputs = new Uint32Array(1024);
  private outputs = new Uint32Array(1024);
  /** Row i's hash ids are ids[idStart[i], idStart[i + 1]). */
  private idStart = new Uint32Array(1025);
  private ids: Uint32Array | Float64Array = new Uint32Array(16384);
  /** Per row, only once some row has observations. */
  private observations: (TraceObserved | undefined)[] | undefined;

  push(line: TraceLine): void {
    const i = this.length;
    if (i === this.timestamps.length) this.growRows();
    const from = this.idStart[i]!;
    const to = from + line.hashIds.length;
    if (to > this.ids.length) this.ids = grown(this.ids, to);
    let ids = this.ids;
    for (let b = 0; b < line.hashIds.length; b++) {
      const id = line.hashIds[b]!;
      if (id > 0xffffffff && ids instanceof Uint32Array) {
        ids = this.ids = Float64Array.from(ids);
      }
      ids[from + b] = id;
    }
    this.lineNos[i] = line.line;
    this.timestamps[i] = line.timestamp;
    this.inputs[i] = line.inputLength;
    this.outputs[i] = line.outputLength;
    this.idStart[i + 1] = to;
    if (line.observed !== undefined) {
      this.observations ??= new Array<TraceObserved | undefined>(i).fill(undefined);
    }
    if (this.observations !== undefined) this.observations[i] = line.observed;
    this.length = i + 1;
  }

  private growRows(): void {
    const n = this.timestamps.length * 2;
    this.lineNos = grown(this.lineNos, n);
    this.timestamps = grown(this.timestamps, n);
    this.inputs = grown(this.inputs, n);
    this.outputs = grown(this.outputs, n);
    this.idStart = grown(this.idStart, n + 1);
  }

  timestamp(i: number): number {
    return this.timestamps[i]!;
  }
  inputLength(i: number): number {
    return this.inputs[i]!;
  }
  outputLength(i: number): number {
    return this.outputs[i]!;
  }
  hashCount(i: number): number {
    return this.idStart[i + 1]! - this.idStart[i]!;
  }
  hashId(i: number, b: number): number {
    return this.ids[this.idStart[i]! + b]!;
  }
  observed(i: number): TraceObserved | undefined {
    return this.observations?.[i];
  }

  /** Row i as a TraceLine. */
  line(i: number): TraceLine {
    const from = this.idStart[i]!;
    const observed = this.observed(i);
    return {
      line: this.lineNos[i]!,
      timestamp: this.timestamps[i]!,
      inputLength: this.inputs[i]!,
      outputLength: this.outputs[i]!,
      hashIds: Array.from(this.ids.subarray(from, this.idStart[i + 1]!)),
      ...(observed ? { observed } : {}),
    };
  }

  lines(): TraceLine[] {
    return Array.from({ length: this.length }, (_, i) => this.line(i));
  }

  /** Rows in timestamp order, ties in line order (a recorded trace is written at completion). */
  sortByTimestamp(): void {
    const order = Array.from({ length: this.length }, (_, i) => i);
    order.sort((a, b) => this.timestamps[a]! - this.timestamps[b]! || a - b);
    if (order.every((r, i) => r === i)) return;
    const rows = order.map((r) => this.line(r));
    this.length = 0;
    this.idStart[0] = 0;
    this.observations = undefined;
    for (const l of rows) this.push(l);
  }

  /** Keeps the first n rows. */
  truncate(n: number): void {
    if (n < this.length) this.length = n;
  }

  /** Releases spare capacity (the columns double as they grow). */
  trim(): void {
    const n = this.length;
    this.lineNos = this.lineNos.slice(0, n);
    this.timestamps = this.timestamps.slice(0, n);
    this.inputs = this.inputs.slice(0, n);
    this.outputs = this.outputs.slice(0, n);
    this.idStart = this.idStart.slice(0, n + 1);
    this.ids = this.ids.slice(0, this.idStart[n]!);
    if (this.observations !== undefined) this.observations.length = n;
  }
}

function grown<T extends Uint32Array | Float64Array>(a: T, atLeast: number): T {
  let n = a.length * 2;
  while (n < atLeast) n *= 2;
  const out = new (a.constructor as { new (n: number): T })(n);
  out.set(a);
  return out;
}

/** What a parse found besides the request lines. */
interface TraceHead {
  start?: TraceStart;
  switches: PolicySwitch[];
  rankChanges: RankChange[];
  skipped: number;
  blockTokens: number;
}

/**
 * The line-by-line parse behind every reader: `feed` each raw line in order (false: the
 * limit was reached, stop), then `finish`. Request lines go to the sink.
 */
class TraceParser {
  private start: TraceStart | undefined;
  private blockTokens: number;
  private readonly switches: PolicySwitch[] = [];
  private readonly rankChanges: RankChange[] = [];
  private skipped = 0;
  private lastTs = 0;
  private lineNo = 0;
  private readonly skipInvalid: boolean;
  private readonly limit: number;

  constructor(
    private file: string,
    private readonly opts: ReadTraceOptions,
    private readonly sink: RequestSink,
  ) {
    this.skipInvalid = opts.skipInvalid === true;
    this.limit = opts.limit ?? 0;
    this.blockTokens = opts.blockTokens ?? 512;
  }

  /** The next file of a recording split in several (rotated files, in order): as `cat` joins them. */
  nextFile(file: string): void {
    this.file = file;
    this.lineNo = 0;
  }

  private bad(msg: string): void {
    if (this.skipInvalid) {
      this.skipped++;
      return;
    }
    throw new TraceFormatError(`${this.file}:${this.lineNo}: ${msg}`);
  }

  feed(raw: string): boolean {
    this.lineNo++;
    if (raw.trim() === '') return true;
    let o: unknown;
    try {
      o = JSON.parse(raw);
    } catch {
      this.bad('invalid JSON');
      return true;
    }
    if (!isObj(o)) {
      this.bad('expected a JSON object');
      return true;
    }
    if (o.event !== undefined) {
      this.event(o);
      return true;
    }
    const parsed = parseRequest(o, this.lineNo, this.blockTokens);
    if (typeof parsed === 'string') {
      this.bad(parsed);
      return true;
    }
    if (!this.recorded) {
      if (parsed.timestamp < this.lastTs) {
        this.bad(`timestamp ${parsed.timestamp} goes back in time (previous ${this.lastTs})`);
        return true;
      }
      this.lastTs = parsed.timestamp;
      if (this.limit > 0 && this.sink.length >= this.limit) return false;
    }
    this.sink.push(parsed);
    return true;
  }

  private event(o: Obj): void {
    if (o.event === 'start') {
      const s = parseStart(o);
      if (typeof s === 'string') {
        // The start line sets how every other line is read: never skipped.
        throw new TraceFormatError(`${this.file}:${this.lineNo}: ${s}`);
      }
      if (this.start === undefined) {
        if (this.sink.length > 0) {
          throw new TraceFormatError(
            `${this.file}:${this.lineNo}: a start event after request lines (it must open the recording)`,
          );
        }
        this.start = s;
        this.blockTokens = this.opts.blockTokens ?? s.blockTokens;
      } else if (s.blockTokens !== this.start.blockTokens) {
        // Rotated files repeat the start line; concatenated ones must be of one recording.
        throw new TraceFormatError(
          `${this.file}:${this.lineNo}: start event with block_tokens ${s.blockTokens}, the recording began with ${this.start.blockTokens}: files of different recordings were concatenated`,
        );
      } else if (
        s.originUnixMs !== undefined &&
        this.start.originUnixMs !== undefined &&
        s.originUnixMs !== this.start.originUnixMs
      ) {
        // A router run's timestamps count from its own origin: two runs laid on one clock
        // would replay as one run of overlapping traffic under the first run's policy.
        throw new TraceFormatError(
          `${this.file}:${this.lineNo}: start event with origin_unix_ms ${s.originUnixMs}, the recording began at ${this.start.originUnixMs}: files of two router runs were concatenated (replay each run's files on their own; the first line of each file says which run it is)`,
        );
      }
    } else if (o.event === 'policy_switch') {
      const s = parseSwitch(o);
      if (typeof s === 'string') this.bad(s);
      else this.switches.push(s);
    } else if (o.event === 'ranks') {
      const c = parseRankChange(o);
      if (typeof c === 'string') this.bad(c);
      else this.rankChanges.push(c);
    } else {
      this.skipped++;
    }
  }

  /** Whether the lines need putting in timestamp order (a recording: written at completion). */
  get recorded(): boolean {
    return this.start !== undefined || this.opts.recordedLines === true;
  }

  finish(): TraceHead {
    this.switches.sort((a, b) => a.timestamp - b.timestamp);
    this.rankChanges.sort((a, b) => a.timestamp - b.timestamp);
    return {
      ...(this.start ? { start: this.start } : {}),
      switches: this.switches,
      rankChanges: this.rankChanges,
      skipped: this.skipped,
      blockTokens: this.blockTokens,
    };
  }
}

/** Parses trace text; `file` names it in errors. */
export function parseTrace(text: string, file: string, opts: ReadTraceOptions = {}): TraceFile {
  const lines: TraceLine[] = [];
  const parser = new TraceParser(file, opts, lines);
  for (const raw of text.split('\n')) if (!parser.feed(raw)) break;
  return linesFile(file, parser, lines, opts.limit ?? 0);
}

function linesFile(file: string, parser: TraceParser, lines: TraceLine[], limit: number) {
  if (parser.recorded) {
    // Written at completion, stamped at receipt: put back in arrival order (stable).
    lines.sort((a, b) => a.timestamp - b.timestamp || a.line - b.line);
    if (limit > 0 && lines.length > limit) lines.length = limit;
  }
  const head = parser.finish();
  return { file, ...head, lines };
}

const CHUNK_BYTES = 1 << 22;

/**
 * Calls `each` with every line of the file (without its newline), read a chunk at a time,
 * until it returns false: a trace is never held whole as text (the Mooncake trace ten times
 * over is 30 MB of text and ~100 MB while split). A line longer than a chunk grows the
 * buffer. Lines are UTF-8; a newline byte never occurs inside a multi-byte character.
 */
export function forEachLine(
  file: string,
  each: (raw: string) => boolean,
  chunkBytes = CHUNK_BYTES,
): void {
  let fd: number;
  try {
    fd = openSync(file, 'r');
  } catch (err) {
    throw new TraceFormatError(`cannot read ${file} (${(err as Error).message})`);
  }
  try {
    let buf = Buffer.allocUnsafe(chunkBytes);
    let kept = 0;
    for (;;) {
      if (kept === buf.length) {
        // One line longer than the buffer: make room for it.
        const bigger = Buffer.allocUnsafe(buf.length * 2);
        buf.copy(bigger, 0, 0, kept);
        buf = bigger;
      }
      let n: number;
      try {
        n = readSync(fd, buf, kept, buf.length - kept, null);
      } catch (err) {
        throw new TraceFormatError(`cannot read ${file} (${(err as Error).message})`);
      }
      const end = kept + n;
      let from = 0;
      for (let nl = buf.indexOf(10, from); nl >= 0 && nl < end; nl = buf.indexOf(10, from)) {
        if (!each(buf.toString('utf8', from, nl))) return;
        from = nl + 1;
      }
      if (n === 0) {
        if (from < end) each(buf.toString('utf8', from, end));
        return;
      }
      kept = end - from;
      buf.copy(buf, 0, from, end);
    }
  } finally {
    closeSync(fd);
  }
}

export function readTraceFile(file: string, opts: ReadTraceOptions = {}): TraceFile {
  const lines: TraceLine[] = [];
  const parser = new TraceParser(file, opts, lines);
  forEachLine(file, (raw) => parser.feed(raw));
  return linesFile(file, parser, lines, opts.limit ?? 0);
}

/** A trace read into a TraceTable (what a replay keeps), with what else the file said. */
export interface TraceTableFile extends TraceHead {
  file: string;
  table: TraceTable;
}

/**
 * readTraceFile, into columns: the same checks and errors, a third of the memory. Several
 * files are read in the order given as one (a rotated recording: `PATH.000001 ... PATH`), with
 * the checks a concatenation gets: their start lines must be of one router run.
 */
export function readTraceTable(
  files: string | readonly string[],
  opts: ReadTraceOptions = {},
): TraceTableFile {
  const list = typeof files === 'string' ? [files] : files;
  const file = list.join(' ');
  const table = new TraceTable();
  const parser = new TraceParser(list[0] ?? '', opts, table);
  for (const f of list) {
    parser.nextFile(f);
    let more = true;
    forEachLine(f, (raw) => {
      more = parser.feed(raw);
      return more;
    });
    if (!more) break;
  }
  const limit = opts.limit ?? 0;
  if (parser.recorded) {
    table.sortByTimestamp();
    if (limit > 0) table.truncate(limit);
  }
  table.trim();
  return { file, ...parser.finish(), table };
}

/** A request that waited for an earlier one of its session: sent `gapMs` after it ended. */
export interface SessionLink {
  /** Index (in `lines`) of the request whose answer it waited for. */
  prev: number;
  /** Recorded think gap: this request's timestamp - (prev's timestamp + prev's e2e), >= 0. */
  gapMs: number;
}

/**
 * Timestamps are whole milliseconds and e2e times are not, so an answer that ended "after" the
 * next turn's receipt by less than this still counts as received before it.
 */
const END_SLACK_MS = 1;

/**
 * Which request each one waited for. A request with a session key (`key`: the keyed hash of
 * the routing key or session) follows the same-key request whose answer had most recently
 * ended (timestamp + observed e2e) when it was received: an agent sends turn k+1 once it has
 * turn k's answer, after thinking. Requests without a key, or whose key had no answer out yet
 * (the first turn; a request sent while the previous ones were all still running), and
 * requests of traces without observed e2e times, have no link: they stand on their own
 * timestamp. Indexes refer to `lines`, which must be in timestamp order (as read).
 */
export function sessionLinks(lines: readonly TraceLine[] | TraceRows): (SessionLink | undefined)[] {
  const rows = asRows(lines);
  // Per key: requests not yet ended at the current timestamp, and the latest that had ended.
  const open = new Map<string, { index: number; end: number }[]>();
  const last = new Map<string, { index: number; end: number }>();
  const links = new Array<SessionLink | undefined>(rows.length).fill(undefined);
  for (let index = 0; index < rows.length; index++) {
    const observed = rows.observed(index);
    const key = observed?.key;
    if (key === undefined) continue;
    const ts = rows.timestamp(index);
    const running = open.get(key) ?? [];
    let best = last.get(key);
    const still: { index: number; end: number }[] = [];
    for (const r of running) {
      if (r.end <= ts + END_SLACK_MS) {
        if (best === undefined || r.end >= best.end) best = r;
      } else still.push(r);
    }
    if (best !== undefined) last.set(key, best);
    const e2e = observed?.e2eMs;
    if (e2e !== undefined) still.push({ index, end: ts + e2e });
    open.set(key, still);
    if (best !== undefined) links[index] = { prev: best.index, gapMs: Math.max(0, ts - best.end) };
  }
  return links;
}

/**
 * Block ids to synthesize each request's last, partial block from, so that a session's turn
 * shares its whole prompt with the next turn, not only its whole blocks. A partial block's id
 * hashes fewer tokens than the next turn's block at the same place, so the ids differ although
 * the tokens they share are the same: read as they are, a replay loses up to a block per turn
 * of the reuse a worker sees (about half a block on average; 3.9 points of hit rate on 512-token
 * blocks of the agentic traffic of the tune-loop test). When the request that followed this one
 * in its session (`links`) agrees with it on every whole block and is longer, this one's
 * partial block is taken to be the head of that request's block at the same place (and, if
 * that one is partial too, of its follower's, and so on). Undefined where there is nothing to
 * infer: the prompt ends on a block boundary, no follower, or one that does not extend it.
 */
export function sessionTailIds(
  lines: readonly TraceLine[] | TraceRows,
  links: readonly (SessionLink | undefined)[],
  blockTokens: number,
): (number | undefined)[] {
  const rows = asRows(lines);
  const follower = new Array<number | undefined>(rows.length);
  links.forEach((l, i) => {
    if (l !== undefined && follower[l.prev] === undefined) follower[l.prev] = i;
  });
  const tail = new Array<number | undefined>(rows.length);
  // Followers come later in the file: resolving from the end settles every chain in one pass.
  for (let i = rows.length - 1; i >= 0; i--) {
    const f = follower[i];
    const length = rows.inputLength(i);
    const whole = Math.floor(length / blockTokens);
    if (f === undefined || whole * blockTokens === length) continue;
    const nextLength = rows.inputLength(f);
    if (nextLength <= length) continue;
    if (whole > 0 && rows.hashId(f, whole - 1) !== rows.hashId(i, whole - 1)) continue;
    const nextWhole = Math.floor(nextLength / blockTokens);
    tail[i] = nextWhole > whole ? rows.hashId(f, whole) : (tail[f] ?? rows.hashId(f, whole));
  }
  return tail;
}

/** What sessionLinks and sessionTailIds read of a trace's requests: a TraceTable or lines. */
export type TraceRows = Pick<
  TraceTable,
  'length' | 'timestamp' | 'inputLength' | 'hashId' | 'observed'
>;

function asRows(lines: readonly TraceLine[] | TraceRows): TraceRows {
  if (!Array.isArray(lines)) return lines as TraceRows;
  const l = lines as readonly TraceLine[];
  return {
    length: l.length,
    timestamp: (i) => l[i]!.timestamp,
    inputLength: (i) => l[i]!.inputLength,
    hashId: (i, b) => l[i]!.hashIds[b]!,
    observed: (i) => l[i]!.observed,
  };
}
