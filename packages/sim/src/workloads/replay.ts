// Replay of a Mooncake-format JSONL trace: one request per line with `timestamp` (ms),
// `input_length`, `output_length` and `hash_ids` (one per 512-token block; equal leading ids
// mean an equal prefix). Each hash id maps to a fixed block of synthetic token ids computed
// from (seed, id, position), so equal ids give equal tokens without storing any block, and
// a request's token array is built only when it is read (the whole trace is ~144M tokens).
import { existsSync, readFileSync } from 'node:fs';
import { isAbsolute, resolve } from 'node:path';
import { repoRoot, sharedFile } from '../cost/calibration.ts';
import { optBool, optInt, optNum } from './options.ts';
import { stream, VOCAB } from './random.ts';
import type { ScenarioDefinition, WorkloadRequest } from './types.ts';

export class TraceFormatError extends Error {
  readonly code = 'TRACE_FORMAT';
}

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

interface TraceLine {
  timestamp: number;
  inputLength: number;
  outputLength: number;
  hashIds: number[];
}

function parseLine(text: string, blockTokens: number): TraceLine | string {
  let o: Record<string, unknown>;
  try {
    o = JSON.parse(text) as Record<string, unknown>;
  } catch {
    return 'invalid JSON';
  }
  if (typeof o !== 'object' || o === null) return 'expected a JSON object';
  const { timestamp, input_length, output_length, hash_ids } = o;
  if (typeof timestamp !== 'number' || !Number.isFinite(timestamp) || timestamp < 0) {
    return `timestamp must be a number >= 0, got ${JSON.stringify(timestamp)}`;
  }
  if (typeof input_length !== 'number' || !Number.isInteger(input_length) || input_length < 1) {
    return `input_length must be an integer >= 1, got ${JSON.stringify(input_length)}`;
  }
  if (typeof output_length !== 'number' || !Number.isInteger(output_length) || output_length < 0) {
    return `output_length must be an integer >= 0, got ${JSON.stringify(output_length)}`;
  }
  if (!Array.isArray(hash_ids) || !hash_ids.every((h) => Number.isInteger(h) && h >= 0)) {
    return 'hash_ids must be an array of non-negative integers';
  }
  const blocks = Math.ceil(input_length / blockTokens);
  if (hash_ids.length < blocks) {
    return `hash_ids has ${hash_ids.length} ids, input_length ${input_length} needs ${blocks}`;
  }
  return { timestamp, inputLength: input_length, outputLength: output_length, hashIds: hash_ids };
}

/** Token `pos` of block `id`: a 32-bit mix of (salt, id, pos), scaled into [1, VOCAB). */
function fillBlock(out: Uint32Array, offset: number, n: number, salt: number, id: number): void {
  let h0 = Math.imul(salt ^ id, 0x9e3779b1) ^ (id >>> 16);
  h0 = Math.imul(h0 ^ (h0 >>> 15), 0x85ebca6b);
  const scale = (VOCAB - 1) / 2 ** 32;
  for (let p = 0; p < n; p++) {
    let h = (h0 + Math.imul(p + 1, 0x9e3779b9)) | 0;
    h = Math.imul(h ^ (h >>> 16), 0x7feb352d);
    h ^= h >>> 15;
    out[offset + p] = 1 + Math.floor((h >>> 0) * scale);
  }
}

export function traceTokens(line: TraceLine, blockTokens: number, salt: number): Uint32Array {
  const out = new Uint32Array(line.inputLength);
  for (let b = 0, off = 0; off < line.inputLength; b++, off += blockTokens) {
    fillBlock(out, off, Math.min(blockTokens, line.inputLength - off), salt, line.hashIds[b]!);
  }
  return out;
}

export const replay: ScenarioDefinition = {
  name: 'replay',
  description:
    'replay a Mooncake-format JSONL trace (default: the Mooncake conversation trace in packages/sim/data/traces); hash blocks map to synthetic token blocks',
  defaults: {
    file: '',
    speedup: 1,
    limit: 0,
    skipInvalid: false,
    blockTokens: 512,
    ranks: 16,
  },
  build(o, seed) {
    const name = 'replay';
    const rawFile = o.file;
    if (typeof rawFile !== 'string') {
      throw new TraceFormatError(`replay: file must be a path, got ${JSON.stringify(rawFile)}`);
    }
    const file = rawFile === '' ? defaultTracePath() : resolveTracePath(rawFile);
    const speedup = optNum(name, o, 'speedup', Number.MIN_VALUE);
    const limit = optInt(name, o, 'limit', 0);
    const skipInvalid = optBool(name, o, 'skipInvalid');
    const blockTokens = optInt(name, o, 'blockTokens', 1);
    const ranks = optInt(name, o, 'ranks', 1);
    let text: string;
    try {
      text = readFileSync(file, 'utf8');
    } catch (err) {
      throw new TraceFormatError(`replay: cannot read ${file} (${(err as Error).message})`);
    }
    const salt = Math.floor(stream(seed, 'replay:blocks')() * 2 ** 32) | 0;
    const requests: WorkloadRequest[] = [];
    let skipped = 0;
    let lineNo = 0;
    let lastTs = 0;
    for (const raw of text.split('\n')) {
      lineNo++;
      if (raw.trim() === '') continue;
      if (limit > 0 && requests.length >= limit) break;
      const parsed = parseLine(raw, blockTokens);
      if (typeof parsed === 'string') {
        if (skipInvalid) {
          skipped++;
          continue;
        }
        throw new TraceFormatError(`${file}:${lineNo}: ${parsed}`);
      }
      if (parsed.timestamp < lastTs) {
        const msg = `timestamp ${parsed.timestamp} goes back in time (previous ${lastTs})`;
        if (skipInvalid) {
          skipped++;
          continue;
        }
        throw new TraceFormatError(`${file}:${lineNo}: ${msg}`);
      }
      lastTs = parsed.timestamp;
      const id = requests.length;
      const h = parsed.hashIds;
      const key = h.length > 1 ? `h${h[0]}-${h[1]}` : `h${h[0] ?? 'none'}`;
      const req = {
        id,
        clientId: id,
        outputTokens: Math.max(1, parsed.outputLength),
        arrivalMs: parsed.timestamp / speedup,
        sessionKey: key,
      } as WorkloadRequest;
      // Built on each read and not kept: holding every request's tokens would take ~576 MB.
      Object.defineProperty(req, 'inputIds', {
        enumerable: true,
        get: () => traceTokens(parsed, blockTokens, salt),
      });
      requests.push(req);
    }
    return {
      scenario: name,
      mode: 'open',
      ranks,
      clients: [],
      requests,
      events: [],
      skippedLines: skipped,
    };
  },
};
