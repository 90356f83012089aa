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
import { readFileSync } from 'node:fs';

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
  model?: string;
}

/** A `policy_switch` event: from `timestamp` on, the router routed with this setting. */
export interface PolicySwitch {
  timestamp: number;
  method: string;
  options: Record<string, unknown>;
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
}

type Obj = Record<string, unknown>;

const isInt = (v: unknown, min: number): v is number =>
  typeof v === 'number' && Number.isInteger(v) && v >= min;
const isNum = (v: unknown, min: number): v is number =>
  typeof v === 'number' && Number.isFinite(v) && v >= min;
const show = (v: unknown) => JSON.stringify(v) ?? String(v);
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
  return s;
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
  return { timestamp: o.timestamp, method: o.method, options: (o.options as Obj) ?? {} };
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

/** Parses trace text; `file` names it in errors. */
export function parseTrace(text: string, file: string, opts: ReadTraceOptions = {}): TraceFile {
  const skipInvalid = opts.skipInvalid === true;
  const limit = opts.limit ?? 0;
  let start: TraceStart | undefined;
  let blockTokens = opts.blockTokens ?? 512;
  const switches: PolicySwitch[] = [];
  const lines: TraceLine[] = [];
  let skipped = 0;
  let lastTs = 0;
  let lineNo = 0;
  const bad = (msg: string) => {
    if (skipInvalid) {
      skipped++;
      return;
    }
    throw new TraceFormatError(`${file}:${lineNo}: ${msg}`);
  };
  for (const raw of text.split('\n')) {
    lineNo++;
    if (raw.trim() === '') continue;
    let o: unknown;
    try {
      o = JSON.parse(raw);
    } catch {
      bad('invalid JSON');
      continue;
    }
    if (!isObj(o)) {
      bad('expected a JSON object');
      continue;
    }
    if (o.event !== undefined) {
      if (o.event === 'start') {
        const s = parseStart(o);
        if (typeof s === 'string') {
          // The start line sets how every other line is read: never skipped.
          throw new TraceFormatError(`${file}:${lineNo}: ${s}`);
        }
        if (start === undefined) {
          if (lines.length > 0) {
            throw new TraceFormatError(
              `${file}:${lineNo}: a start event after request lines (it must open the recording)`,
            );
          }
          start = s;
          blockTokens = opts.blockTokens ?? s.blockTokens;
        } else if (s.blockTokens !== start.blockTokens) {
          // Rotated files repeat the start line; concatenated ones must be of one recording.
          throw new TraceFormatError(
            `${file}:${lineNo}: start event with block_tokens ${s.blockTokens}, the recording began with ${start.blockTokens}: files of different recordings were concatenated`,
          );
        }
      } else if (o.event === 'policy_switch') {
        const s = parseSwitch(o);
        if (typeof s === 'string') bad(s);
        else switches.push(s);
      } else {
        skipped++;
      }
      continue;
    }
    const parsed = parseRequest(o, lineNo, blockTokens);
    if (typeof parsed === 'string') {
      bad(parsed);
      continue;
    }
    if (start === undefined) {
      if (parsed.timestamp < lastTs) {
        bad(`timestamp ${parsed.timestamp} goes back in time (previous ${lastTs})`);
        continue;
      }
      lastTs = parsed.timestamp;
      if (limit > 0 && lines.length >= limit) break;
    }
    lines.push(parsed);
  }
  if (start !== undefined) {
    // Written at completion, stamped at receipt: put back in arrival order (stable).
    lines.sort((a, b) => a.timestamp - b.timestamp || a.line - b.line);
    if (limit > 0 && lines.length > limit) lines.length = limit;
  }
  switches.sort((a, b) => a.timestamp - b.timestamp);
  return { file, ...(start ? { start } : {}), switches, lines, skipped, blockTokens };
}

export function readTraceFile(file: string, opts: ReadTraceOptions = {}): TraceFile {
  let text: string;
  try {
    text = readFileSync(file, 'utf8');
  } catch (err) {
    throw new TraceFormatError(`cannot read ${file} (${(err as Error).message})`);
  }
  return parseTrace(text, file, opts);
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
export function sessionLinks(lines: readonly TraceLine[]): (SessionLink | undefined)[] {
  // Per key: requests not yet ended at the current timestamp, and the latest that had ended.
  const open = new Map<string, { index: number; end: number }[]>();
  const last = new Map<string, { index: number; end: number }>();
  return lines.map((line, index) => {
    const key = line.observed?.key;
    if (key === undefined) return undefined;
    const ts = line.timestamp;
    const running = open.get(key) ?? [];
    let best = last.get(key);
    const still: { index: number; end: number }[] = [];
    for (const r of running) {
      if (r.end <= ts + END_SLACK_MS) {
        if (best === undefined || r.end >= best.end) best = r;
      } else still.push(r);
    }
    if (best !== undefined) last.set(key, best);
    const e2e = line.observed?.e2eMs;
    if (e2e !== undefined) still.push({ index, end: ts + e2e });
    open.set(key, still);
    return best === undefined ? undefined : { prev: best.index, gapMs: Math.max(0, ts - best.end) };
  });
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
  lines: readonly TraceLine[],
  links: readonly (SessionLink | undefined)[],
  blockTokens: number,
): (number | undefined)[] {
  const follower = new Array<number | undefined>(lines.length);
  links.forEach((l, i) => {
    if (l !== undefined && follower[l.prev] === undefined) follower[l.prev] = i;
  });
  const tail = new Array<number | undefined>(lines.length);
  // Followers come later in the file: resolving from the end settles every chain in one pass.
  for (let i = lines.length - 1; i >= 0; i--) {
    const line = lines[i]!;
    const f = follower[i];
    const whole = Math.floor(line.inputLength / blockTokens);
    if (f === undefined || whole * blockTokens === line.inputLength) continue;
    const next = lines[f]!;
    if (next.inputLength <= line.inputLength) continue;
    if (whole > 0 && next.hashIds[whole - 1] !== line.hashIds[whole - 1]) continue;
    const nextWhole = Math.floor(next.inputLength / blockTokens);
    tail[i] = nextWhole > whole ? next.hashIds[whole] : (tail[f] ?? next.hashIds[whole]);
  }
  return tail;
}
