// Replay of a Mooncake-format JSONL trace: one request per line with `timestamp` (ms),
// `input_length`, `output_length` and `hash_ids` (one per 512-token block; equal leading ids
// mean an equal prefix). Each hash id maps to a fixed block of synthetic token ids computed
// from (seed, id, position), so equal ids give equal tokens without storing any block, and
// a request's token array is built only when it is read (the whole trace is ~144M tokens).
import { existsSync } from 'node:fs';
import { isAbsolute, resolve } from 'node:path';
import { type BlockTokenSource, describeTokens } from '../cache/token-source.ts';
import { repoRoot, sharedFile } from '../cost/calibration.ts';
import { optBool, optInt, optPositive } from './options.ts';
import { stream } from './random.ts';
import { blockSeed, blockToken, tokenWriter } from './token-fill.ts';
import {
  type RankChange,
  readTraceTable,
  sessionLinks,
  sessionTailIds,
  TraceFormatError,
  type TraceLine,
  type TraceStart,
  type TraceTable,
} from './trace-file.ts';
import { selectGroup } from './trace-groups.ts';
import type { ClusterEvent, ScenarioDefinition, WorkloadRequest } from './types.ts';

export { TraceFormatError } from './trace-file.ts';

export function defaultTracePath(): string {
  return sharedFile('traces/mooncake-conversation.jsonl');
}

/** Absolute paths as given; relative ones from the working directory, else the repo root. */
export function resolveTracePath(file: string): string {
  if (isAbsolute(file)) return file;
  const fromCwd = resolve(file);
  if (existsSync(fromCwd)) return fromCwd;
  const fromRepo = resolve(repoRoot(), file);
  return existsSync(fromRepo) ? fromRepo : fromCwd;
}

/**
 * Tokens synthesised from a request's hash ids (token-source.ts): block b from its id, the
 * last, partial block from `tailId` when there is one. The radix caches keep the source, not a
 * copy of the tokens. A replay's requests are sources themselves (TraceRequest); traceTokens()
 * builds one from a line.
 */
abstract class TraceSource implements BlockTokenSource {
  abstract readonly length: number;
  abstract readonly blockTokens: number;
  /** The salt: with one block size, equal block ids give equal tokens. */
  abstract readonly family: number;
  protected abstract readonly tailId: number | undefined;
  /** The hash id of block b as the trace gives it. */
  protected abstract hashId(b: number): number;

  blockId(b: number): number {
    const partial = (b + 1) * this.blockTokens > this.length;
    return partial && this.tailId !== undefined ? this.tailId : this.hashId(b);
  }

  tokenAt(p: number): number {
    const b = Math.floor(p / this.blockTokens);
    return blockToken(blockSeed(this.family, this.blockId(b)), p - b * this.blockTokens);
  }

  /** A fresh array of the tokens, described by this source. */
  tokens(): Uint32Array {
    const { length, blockTokens, family } = this;
    const writer = tokenWriter();
    writer.begin(length);
    for (let b = 0, off = 0; off < length; b++, off += blockTokens) {
      writer.block(off, Math.min(blockTokens, length - off), blockSeed(family, this.blockId(b)));
    }
    const out = writer.take(length);
    describeTokens(out, this);
    return out;
  }
}

/** A trace line's tokens, for traceTokens(). */
class LineTokens extends TraceSource {
  constructor(
    private readonly hashIds: ArrayLike<number>,
    readonly length: number,
    readonly blockTokens: number,
    readonly family: number,
    protected readonly tailId: number | undefined,
  ) {
    super();
  }

  protected hashId(b: number): number {
    return this.hashIds[b]!;
  }
}

/**
 * A request's synthetic tokens. `tailId`, when given, is the id the last, partial block is
 * filled from instead of its own (sessionTailIds): its head, so it equals the head of that
 * block in the request that continued the session.
 */
export function traceTokens(
  line: Pick<TraceLine, 'inputLength' | 'hashIds'>,
  blockTokens: number,
  salt: number,
  tailId?: number,
): Uint32Array {
  return new LineTokens(line.hashIds, line.inputLength, blockTokens, salt, tailId).tokens();
}

/**
 * A row's session: its recorded key, else its first two hash ids (a conversation's turns
 * share them). One string per session, not per request (`keys` interns them).
 */
function sessionKeyOf(table: TraceTable, row: number, keys: Map<string, string>): string {
  const recorded = table.observed(row)?.key;
  if (recorded !== undefined) return recorded;
  const n = table.hashCount(row);
  const key =
    n > 1
      ? `h${table.hashId(row, 0)}-${table.hashId(row, 1)}`
      : `h${n > 0 ? table.hashId(row, 0) : 'none'}`;
  const known = keys.get(key);
  if (known !== undefined) return known;
  keys.set(key, key);
  return key;
}

/** What every request of one replay shares. */
interface ReplayContext {
  table: TraceTable;
  blockTokens: number;
  salt: number;
}

/**
 * One trace row as a request. Its tokens are built on each read of `inputIds` and not kept:
 * holding every request's tokens would take ~576 MB. The request is their token source too
 * (token-source.ts), so a radix node holding its prompt holds the request, nothing more.
 * `inputIds` is an own, enumerable accessor, so a copy by spread (`{ ...request }`) carries
 * the tokens; every request shares one descriptor, so all keep one shape (an accessor with
 * its own getter per request made each a dictionary of ~800 bytes).
 */
class TraceRequest extends TraceSource implements WorkloadRequest {
  private static readonly inputIdsProperty: PropertyDescriptor = {
    enumerable: true,
    get(this: TraceRequest): Uint32Array {
      return this.tokens();
    },
  };

  readonly clientId: number;
  readonly outputTokens: number;
  readonly arrivalMs: number;
  readonly sessionKey: string;
  declare readonly inputIds: Uint32Array;
  declare after?: { id: number; gapMs: number };
  declare routingKey?: string;

  /** Not enumerable: a copy or JSON of a request leaves the shared trace out. */
  declare private readonly context: ReplayContext;

  /** Request `id` is the table's row `id`. */
  constructor(
    readonly id: number,
    context: ReplayContext,
    speedup: number,
    protected readonly tailId: number | undefined,
    sessionKey: string,
  ) {
    super();
    Object.defineProperty(this, 'context', { value: context });
    const { table } = context;
    this.clientId = id;
    this.outputTokens = Math.max(1, table.outputLength(id));
    this.arrivalMs = table.timestamp(id) / speedup;
    this.sessionKey = sessionKey;
    Object.defineProperty(this, 'inputIds', TraceRequest.inputIdsProperty);
  }

  /** The salt: with one block size, equal block ids give equal tokens. */
  get family(): number {
    return this.context.salt;
  }

  get blockTokens(): number {
    return this.context.blockTokens;
  }

  /** Prompt tokens. */
  get length(): number {
    return this.context.table.inputLength(this.id);
  }

  protected hashId(b: number): number {
    return this.context.table.hashId(this.id, b);
  }
}

export const replay: ScenarioDefinition = {
  name: 'replay',
  description:
    "replay a Mooncake-format JSONL trace or a trace kvroute-router recorded (default: the Mooncake conversation trace in packages/sim/data/traces); hash blocks map to synthetic token blocks; blockTokens and ranks 0 = the recording's start line, else 512 and 16; a recorded trace's sessions (key + e2e_ms) replay closed loop: each turn is sent its recorded think gap after the previous turn's predicted completion (openLoop: every request at its timestamp)",
  defaults: {
    file: '',
    speedup: 1,
    limit: 0,
    skipInvalid: false,
    blockTokens: 0,
    ranks: 0,
    openLoop: false,
    group: '',
  },
  build(o, seed) {
    const name = 'replay';
    const rawFile = o.file;
    // Several paths: one recording split in files (rotated: PATH.000001 ... PATH), in order.
    const paths =
      Array.isArray(rawFile) && rawFile.length > 0 && rawFile.every((f) => typeof f === 'string')
        ? (rawFile as string[])
        : typeof rawFile === 'string'
          ? [rawFile]
          : undefined;
    if (paths === undefined) {
      throw new TraceFormatError(`replay: file must be a path, got ${JSON.stringify(rawFile)}`);
    }
    const files = paths.map((f) => (f === '' ? defaultTracePath() : resolveTracePath(f)));
    const file = files.join(' ');
    const speedup = optPositive(name, o, 'speedup');
    const limit = optInt(name, o, 'limit', 0);
    const skipInvalid = optBool(name, o, 'skipInvalid');
    const blockOpt = optInt(name, o, 'blockTokens', 0);
    const ranksOpt = optInt(name, o, 'ranks', 0);
    const openLoop = optBool(name, o, 'openLoop');
    const groupOpt = o.group ?? '';
    if (typeof groupOpt !== 'string') {
      throw new TraceFormatError(
        `replay: group must be a model name, got ${JSON.stringify(groupOpt)}`,
      );
    }
    const read = readTraceTable(files, {
      skipInvalid,
      limit,
      ...(blockOpt > 0 ? { blockTokens: blockOpt } : {}),
    });
    // A router with worker groups: one group's requests, ranks, policy and switches.
    const picked = selectGroup(file, read.start, read.table, read.switches, groupOpt);
    const { start: _s, ...readRest } = read;
    const trace = {
      ...readRest,
      ...(picked.start ? { start: picked.start } : {}),
      table: picked.table,
      switches: picked.switches,
    };
    if (picked.group !== undefined) o.group = picked.group.name;
    if (trace.table.length === 0) {
      // A run over no requests would report every statistic as 0, which reads as a result.
      const n = trace.skipped;
      const skipped = n > 0 ? ` (${n} line${n === 1 ? '' : 's'} skipped)` : '';
      throw new TraceFormatError(`${file}: the trace has no request lines${skipped}`);
    }
    const blockTokens = trace.blockTokens;
    const ranks = ranksOpt > 0 ? ranksOpt : (trace.start?.ranks ?? 16);
    const warnings: string[] = [];
    // The router's rank changes (workers added or removed while recording: its `ranks`
    // events) replay as cluster events, unless --ranks sets the count or one group is taken
    // (a group's ranks are renumbered; its changes are not followed).
    const follow = ranksOpt === 0 && picked.group === undefined && trace.start !== undefined;
    const events = follow ? rankEvents(trace.start!, trace.rankChanges, ranks, speedup) : [];
    if (!follow && trace.rankChanges.length > 0) {
      warnings.push(
        `${trace.rankChanges.length} rank change(s) recorded (workers added or removed) are not replayed ${ranksOpt > 0 ? 'with --ranks' : 'for one worker group'}: the replay keeps ${ranks} rank(s) throughout`,
      );
    }
    let most = ranks;
    for (const e of events) if (e.kind === 'set-ranks') most = Math.max(most, e.ranks!);
    // A rank the lines name beyond every count the replay has: routed elsewhere.
    let beyond = 0;
    let top = -1;
    for (let i = 0; i < trace.table.length; i++) {
      const r = trace.table.observed(i)?.rank;
      if (r !== undefined && r >= most) {
        beyond++;
        top = Math.max(top, r);
      }
    }
    if (beyond > 0) {
      warnings.push(
        `${beyond} request line(s) name a rank up to ${top}, beyond the ${most} rank(s) replayed (a router that did not record its rank changes, or --ranks): the replay routes them among ranks 0..${most - 1}; --ranks ${top + 1} replays with that many`,
      );
    }
    // Reports show what the replay used, not the "from the trace" zeros.
    o.blockTokens = blockTokens;
    o.ranks = ranks;
    const salt = Math.floor(stream(seed, 'replay:blocks')() * 2 ** 32) | 0;
    // Live, a session's next turn waits for the previous answer; replayed at its recorded
    // time it would arrive however slow or fast the predicted system is (open loop), and a
    // slower prediction would pile requests up that the live system never had in flight.
    const { table } = trace;
    const links = sessionLinks(table);
    const tails = sessionTailIds(table, links, blockTokens);
    const context: ReplayContext = { table, blockTokens, salt };
    let linked = 0;
    const keys = new Map<string, string>();
    const requests: WorkloadRequest[] = new Array(table.length);
    for (let id = 0; id < table.length; id++) {
      const link = openLoop ? undefined : links[id];
      if (link !== undefined) linked++;
      const req = new TraceRequest(id, context, speedup, tails[id], sessionKeyOf(table, id, keys));
      if (link !== undefined) req.after = { id: link.prev, gapMs: link.gapMs / speedup };
      // The recorded (keyed) routing key or session: replayed affinity sticks as it did.
      const key = table.observed(id)?.key;
      if (key !== undefined) req.routingKey = key;
      requests[id] = req;
    }
    return {
      scenario: name,
      mode: 'open',
      ranks,
      clients: [],
      requests,
      events,
      skippedLines: trace.skipped,
      ...(warnings.length > 0 ? { warnings } : {}),
      ...(trace.start
        ? {
            recorded: {
              start: trace.start,
              switches: trace.switches.map((s) => ({ ...s, timestamp: s.timestamp / speedup })),
              lines: table.lines(),
              speedup,
              closedLoop: linked,
              ...(picked.group ? { group: picked.group } : {}),
            },
          }
        : {}),
    };
  },
};

/**
 * A recording's rank changes as cluster events, at their replayed times: the count (ranks
 * added come up cold; ranks past a smaller count are gone) and the ranks not routable (a
 * removed worker's, until a new one takes its place). The start line's are at time 0.
 */
export function rankEvents(
  start: TraceStart,
  changes: readonly RankChange[],
  ranks: number,
  speedup: number,
): ClusterEvent[] {
  const events: ClusterEvent[] = [];
  let count = ranks;
  let down = new Set<number>();
  const to = (atMs: number, n: number, next: readonly number[]) => {
    if (n !== count) {
      events.push({ atMs, kind: 'set-ranks', ranks: n });
      // Ranks past the new count are gone, down or not; new ones come up healthy.
      for (const r of down) if (r >= n) down.delete(r);
      count = n;
    }
    const want = new Set(next);
    for (const r of down) if (!want.has(r)) events.push({ atMs, kind: 'rank-up', rank: r });
    for (const r of want) if (!down.has(r)) events.push({ atMs, kind: 'rank-down', rank: r });
    down = want;
  };
  to(0, ranks, start.down ?? []);
  for (const c of changes) to(c.timestamp / speedup, c.ranks, c.down);
  return events;
}
