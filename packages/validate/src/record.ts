// The recording of a validate run: JSON Lines, one header line, then one line per request
// as it completes (so an interrupted run still leaves everything it sent). `--replay` turns
// the file back into a plan with the same token content, order and timing model.
import { closeSync, openSync, readFileSync, writeSync } from 'node:fs';
import { UsageError } from '@kvroute/sim/cli';
import { copyPlanRequest } from './plan.ts';
import type { Observation, PlanRequest, ValidatePlan } from './types.ts';

export const RECORD_FORMAT = 'kvroute-validate-record/v1';

export interface RecordHeader {
  format: typeof RECORD_FORMAT;
  scenario: string;
  mode: 'closed' | 'open';
  ranks: number;
  seed?: string | number;
  target?: string;
  api?: string;
  timeScale?: number;
  startedAt?: string;
  /** The routing policy the prediction used (method plus options), reused by --replay. */
  policy?: Record<string, unknown> & { method: string };
  /** The cost profile the prediction used: a built-in name, or the file it came from. */
  profile?: string;
  profileFile?: string;
}

export interface RecordLine {
  type: 'request';
  id: number;
  clientId: number;
  /** Position within its client's sequence (closed loop). */
  seq: number;
  inputIds: number[];
  outputTokens: number;
  thinkMs?: number;
  arrivalMs?: number;
  routingKey?: string;
  sessionKey: string;
  tenant?: string;
  observed: Omit<Observation, 'id' | 'clientId'>;
}

/** A usage error (exit 2): the recording given to --replay is not one. */
export class RecordFormatError extends UsageError {
  override name = 'RecordFormatError';
  readonly code = 'VALIDATE_RECORD';
}

export interface RecordWriter {
  write(req: PlanRequest, obs: Observation): void;
  close(): void;
}

/** Index of each request within its client's list, for the seq field. */
export function sequenceIndex(plan: ValidatePlan): Map<number, number> {
  const seq = new Map<number, number>();
  if (plan.mode === 'closed') {
    for (const c of plan.clients) {
      for (const [i, r] of c.entries()) seq.set(r.id, i);
    }
  } else {
    for (const [i, r] of plan.requests.entries()) seq.set(r.id, i);
  }
  return seq;
}

export function openRecord(path: string, header: RecordHeader, plan: ValidatePlan): RecordWriter {
  const fd = openSync(path, 'w');
  writeSync(fd, `${JSON.stringify(header)}\n`);
  const seq = sequenceIndex(plan);
  let open = true;
  return {
    write(req, obs) {
      if (!open) return;
      const { id: _id, clientId: _c, ...observed } = obs;
      const line: RecordLine = {
        type: 'request',
        id: req.id,
        clientId: req.clientId,
        seq: seq.get(req.id) ?? 0,
        inputIds: Array.from(req.inputIds),
        outputTokens: req.outputTokens,
        sessionKey: req.sessionKey,
        observed,
      };
      if (req.thinkMs !== undefined) line.thinkMs = req.thinkMs;
      if (req.arrivalMs !== undefined) line.arrivalMs = req.arrivalMs;
      if (req.routingKey !== undefined) line.routingKey = req.routingKey;
      if (req.tenant !== undefined) line.tenant = req.tenant;
      writeSync(fd, `${JSON.stringify(line)}\n`);
    },
    close() {
      if (!open) return;
      open = false;
      closeSync(fd);
    },
  };
}

function isNonNegInt(v: unknown): v is number {
  return typeof v === 'number' && Number.isInteger(v) && v >= 0;
}

export interface LoadedRecord {
  header: RecordHeader;
  plan: ValidatePlan;
  lines: RecordLine[];
}

/** Reads a recording back into a plan. Errors name the file and line. */
export function loadRecord(path: string): LoadedRecord {
  let text: string;
  try {
    text = readFileSync(path, 'utf8');
  } catch (e) {
    throw new RecordFormatError(`--replay: cannot read ${path}: ${(e as Error).message}`);
  }
  const rows = text.split('\n');
  const fail = (line: number, why: string): never => {
    throw new RecordFormatError(`${path}:${line}: ${why}`);
  };
  const parse = (i: number): unknown => {
    try {
      return JSON.parse(rows[i]!);
    } catch {
      return fail(i + 1, 'not valid JSON');
    }
  };
  if (rows.length === 0 || rows[0]!.trim() === '') fail(1, 'empty file, expected a header line');
  const header = parse(0) as RecordHeader;
  if (typeof header !== 'object' || header === null || header.format !== RECORD_FORMAT) {
    fail(1, `not a validate recording (expected "format": "${RECORD_FORMAT}")`);
  }
  if (header.mode !== 'closed' && header.mode !== 'open')
    fail(1, 'mode must be "closed" or "open"');
  if (!isNonNegInt(header.ranks) || header.ranks < 1) fail(1, 'ranks must be a positive integer');

  const lines: RecordLine[] = [];
  for (let i = 1; i < rows.length; i++) {
    if (rows[i]!.trim() === '') continue;
    const l = parse(i) as RecordLine;
    const n = i + 1;
    if (typeof l !== 'object' || l === null || l.type !== 'request')
      fail(n, 'expected a request line');
    if (!isNonNegInt(l.id)) fail(n, 'id must be a non-negative integer');
    if (!isNonNegInt(l.clientId)) fail(n, 'clientId must be a non-negative integer');
    if (!isNonNegInt(l.seq)) fail(n, 'seq must be a non-negative integer');
    if (!Array.isArray(l.inputIds) || !l.inputIds.every((t) => isNonNegInt(t) && t < 2 ** 32)) {
      fail(n, 'inputIds must be an array of integers in [0, 2^32)');
    }
    if (!isNonNegInt(l.outputTokens)) fail(n, 'outputTokens must be a non-negative integer');
    if (typeof l.sessionKey !== 'string') fail(n, 'sessionKey must be a string');
    lines.push(l);
  }

  const plan: ValidatePlan = {
    scenario: header.scenario,
    mode: header.mode,
    ranks: header.ranks,
    clients: [],
    requests: [],
  };
  if (header.mode === 'closed') {
    const byClient = new Map<number, RecordLine[]>();
    for (const l of lines) {
      const list = byClient.get(l.clientId) ?? [];
      list.push(l);
      byClient.set(l.clientId, list);
    }
    const clientIds = [...byClient.keys()].sort((a, b) => a - b);
    for (const c of clientIds) {
      const list = byClient.get(c)!.sort((a, b) => a.seq - b.seq);
      plan.clients.push(list.map(copyPlanRequest));
    }
  } else {
    plan.requests = [...lines]
      .sort((a, b) => (a.arrivalMs ?? 0) - (b.arrivalMs ?? 0) || a.seq - b.seq)
      .map(copyPlanRequest);
  }
  return { header, plan, lines };
}
