// The KV cache event stream vLLM and SGLang publish over ZeroMQ, both directions.
//
// Transport (vLLM's ZmqEventPublisher; SGLang's is the same design): a PUB socket sends
// three-frame messages [topic, seq, payload]: `topic` the configured topic bytes (empty by
// default), `seq` an 8-byte big-endian unsigned sequence number that starts at 0 and grows by
// one per batch, `payload` one msgpack-encoded EventBatch. An optional ROUTER socket serves
// replays: a client sends [empty delimiter, 8-byte start seq] (a REQ socket adds the delimiter
// itself; a DEALER sends it explicitly) and gets back one [empty, seq, payload] message per
// buffered batch with seq >= start, then [empty, END_SEQ, empty payload] where END_SEQ is -1 as
// a signed 8-byte integer. With data parallelism each DP rank publishes on its own port:
// the configured port plus the rank.
//
// Payload (msgspec Structs with array_like=True, omit_defaults=True; events tagged):
//   EventBatch       = [ts: float, events: [...], data_parallel_rank?: int]
//   BlockStored      = ["BlockStored", block_hashes, parent_block_hash | nil, token_ids,
//                       block_size, lora_id | nil, medium? , lora_name?, extra_keys?, ...]
//   BlockRemoved     = ["BlockRemoved", block_hashes, medium?, ...]
//   AllBlocksCleared = ["AllBlocksCleared"]
// Fields after the ones a version knows are optional: omit_defaults drops trailing default
// fields, and SGLang's and older vLLM's events simply end earlier. Block hashes are ints
// (up to 64 bits; vLLM may also send bytes). The decoder also accepts the map form
// ({type: "BlockStored", ...}) a Struct without array_like produces.
import { Unpackr } from 'msgpackr';

/** An engine's block hash as a Map key: a safe integer, or a string for larger ints and bytes. */
export type EngineBlockHash = number | string;

export interface BlockStoredEvent {
  type: 'BlockStored';
  blockHashes: EngineBlockHash[];
  parentBlockHash: EngineBlockHash | null;
  /** Tokens of all the blocks, block after block (blockHashes.length * blockSize of them). */
  tokenIds: number[];
  blockSize: number;
  loraId: number | null;
  medium: string | null;
  loraName?: string | null;
}

export interface BlockRemovedEvent {
  type: 'BlockRemoved';
  blockHashes: EngineBlockHash[];
  medium: string | null;
}

export interface AllBlocksClearedEvent {
  type: 'AllBlocksCleared';
}

export type KvCacheEvent = BlockStoredEvent | BlockRemovedEvent | AllBlocksClearedEvent;

export interface KvEventBatch {
  /** Publisher wall time in seconds (Python's time.time()). */
  ts: number;
  events: KvCacheEvent[];
  dataParallelRank?: number | null;
}

export class KvEventDecodeError extends Error {
  readonly code = 'KV_EVENT_DECODE';
  constructor(message: string) {
    super(`kv-events: ${message}`);
    this.name = 'KvEventDecodeError';
  }
}

/** END_SEQ of a replay: -1 as a signed 8-byte big-endian integer. */
export const REPLAY_END_SEQ = -1;

/** Default ports vLLM and SGLang use (`tcp://*:5557`, replay `tcp://*:5558`). */
export const DEFAULT_EVENTS_PORT = 5557;
export const DEFAULT_REPLAY_PORT = 5558;

/** The 8-byte big-endian sequence frame. */
export function encodeSeq(seq: number): Buffer {
  const b = Buffer.allocUnsafe(8);
  b.writeBigInt64BE(BigInt(seq));
  return b;
}

/** Reads a sequence frame: a number (-1 for the replay end marker). */
export function decodeSeq(frame: Uint8Array): number {
  if (frame.length !== 8) {
    throw new KvEventDecodeError(`sequence frame must be 8 bytes, got ${frame.length}`);
  }
  const view = new DataView(frame.buffer, frame.byteOffset, 8);
  const value = view.getBigInt64(0);
  if (value > BigInt(Number.MAX_SAFE_INTEGER)) {
    throw new KvEventDecodeError(`sequence ${value} exceeds 2^53`);
  }
  return Number(value);
}

/**
 * A ZMQ endpoint with its TCP port offset by a data-parallel rank, as the engines bind one
 * publisher per DP rank (`tcp://host:5557` rank 2 -> `tcp://host:5559`).
 */
export function offsetEndpointPort(endpoint: string, rank: number): string {
  if (rank === 0) return endpoint;
  if (endpoint.startsWith('inproc://')) return `${endpoint}_dp${rank}`;
  const m = /^(tcp:\/\/.+):(\d+)$/.exec(endpoint);
  if (!m) throw new RangeError(`kv-events: endpoint '${endpoint}' has no tcp port to offset`);
  return `${m[1]}:${Number(m[2]) + rank}`;
}

// ---------------------------------------------------------------- decoding

const unpackr = new Unpackr({ useRecords: false, mapsAsObjects: true, int64AsType: 'bigint' });

const MAX_SAFE = BigInt(Number.MAX_SAFE_INTEGER);

function hashKey(v: unknown, field: string): EngineBlockHash {
  if (typeof v === 'number') {
    if (!Number.isInteger(v)) throw new KvEventDecodeError(`${field}: ${v} is not an integer`);
    return v;
  }
  if (typeof v === 'bigint') {
    return v <= MAX_SAFE && v >= -MAX_SAFE ? Number(v) : v.toString();
  }
  if (v instanceof Uint8Array)
    return `x${Buffer.from(v.buffer, v.byteOffset, v.length).toString('hex')}`;
  throw new KvEventDecodeError(`${field}: expected an int or bytes block hash, got ${typeof v}`);
}

function hashList(v: unknown, field: string): EngineBlockHash[] {
  if (!Array.isArray(v)) throw new KvEventDecodeError(`${field} must be an array`);
  const out = new Array<EngineBlockHash>(v.length);
  for (let i = 0; i < v.length; i++) out[i] = hashKey(v[i], field);
  return out;
}

function intList(v: unknown, field: string): number[] {
  if (!Array.isArray(v)) throw new KvEventDecodeError(`${field} must be an array`);
  for (let i = 0; i < v.length; i++) {
    const t = v[i];
    if (typeof t !== 'number' || !Number.isInteger(t) || t < 0) {
      throw new KvEventDecodeError(
        `${field}[${i}] must be a non-negative integer, got ${String(t)}`,
      );
    }
  }
  return v as number[];
}

function optInt(v: unknown, field: string): number | null {
  if (v === undefined || v === null) return null;
  if (typeof v === 'bigint') return Number(v);
  if (typeof v !== 'number' || !Number.isInteger(v)) {
    throw new KvEventDecodeError(`${field} must be an integer or nil, got ${String(v)}`);
  }
  return v;
}

function optStr(v: unknown): string | null {
  return typeof v === 'string' ? v : null;
}

function decodeEvent(raw: unknown, index: number): KvCacheEvent {
  let tag: unknown;
  let f: (i: number, name: string) => unknown;
  if (Array.isArray(raw)) {
    tag = raw[0];
    f = (i) => raw[i + 1];
  } else if (raw !== null && typeof raw === 'object') {
    const obj = raw as Record<string, unknown>;
    tag = obj.type;
    f = (_i, name) => obj[name];
  } else {
    throw new KvEventDecodeError(`events[${index}] must be an array or map`);
  }
  switch (tag) {
    case 'BlockStored': {
      const blockHashes = hashList(f(0, 'block_hashes'), 'BlockStored.block_hashes');
      const parent = f(1, 'parent_block_hash');
      const tokenIds = intList(f(2, 'token_ids'), 'BlockStored.token_ids');
      const blockSize = optInt(f(3, 'block_size'), 'BlockStored.block_size');
      if (blockSize === null || blockSize < 1) {
        throw new KvEventDecodeError('BlockStored.block_size must be an integer >= 1');
      }
      if (tokenIds.length !== blockHashes.length * blockSize) {
        throw new KvEventDecodeError(
          `BlockStored carries ${tokenIds.length} tokens for ${blockHashes.length} blocks of ${blockSize}`,
        );
      }
      const ev: BlockStoredEvent = {
        type: 'BlockStored',
        blockHashes,
        parentBlockHash:
          parent === null || parent === undefined
            ? null
            : hashKey(parent, 'BlockStored.parent_block_hash'),
        tokenIds,
        blockSize,
        loraId: optInt(f(4, 'lora_id'), 'BlockStored.lora_id'),
        medium: optStr(f(5, 'medium')),
      };
      const loraName = f(6, 'lora_name');
      if (typeof loraName === 'string') ev.loraName = loraName;
      return ev;
    }
    case 'BlockRemoved':
      return {
        type: 'BlockRemoved',
        blockHashes: hashList(f(0, 'block_hashes'), 'BlockRemoved.block_hashes'),
        medium: optStr(f(1, 'medium')),
      };
    case 'AllBlocksCleared':
      return { type: 'AllBlocksCleared' };
    default:
      throw new KvEventDecodeError(`events[${index}]: unknown event type ${JSON.stringify(tag)}`);
  }
}

/** Decodes one msgpack EventBatch payload; throws KvEventDecodeError naming what is wrong. */
export function decodeKvEventBatch(payload: Uint8Array): KvEventBatch {
  let raw: unknown;
  try {
    raw = unpackr.unpack(payload);
  } catch (error) {
    throw new KvEventDecodeError(`payload is not msgpack: ${(error as Error).message}`);
  }
  let ts: unknown;
  let events: unknown;
  let rank: unknown;
  if (Array.isArray(raw)) {
    [ts, events, rank] = raw;
  } else if (raw !== null && typeof raw === 'object') {
    const obj = raw as Record<string, unknown>;
    ts = obj.ts;
    events = obj.events;
    rank = obj.data_parallel_rank ?? obj.attn_dp_rank;
  } else {
    throw new KvEventDecodeError('EventBatch must be an array [ts, events, dp_rank?]');
  }
  // NaN or Infinity would reach the lag histogram, which throws on them.
  if (typeof ts !== 'number' || !Number.isFinite(ts)) {
    throw new KvEventDecodeError(`EventBatch.ts must be a finite number, got ${String(ts)}`);
  }
  if (!Array.isArray(events)) throw new KvEventDecodeError('EventBatch.events must be an array');
  const out: KvCacheEvent[] = new Array(events.length);
  for (let i = 0; i < events.length; i++) out[i] = decodeEvent(events[i], i);
  const batch: KvEventBatch = { ts, events: out };
  const dp = optInt(rank, 'EventBatch.data_parallel_rank');
  if (dp !== null) batch.dataParallelRank = dp;
  return batch;
}

// ---------------------------------------------------------------- encoding
// A small msgpack writer for exactly these shapes, so integer widths match what msgspec
// writes (smallest representation; hashes up to 64 bits as uint64) and floats are float64.

class Writer {
  buf = Buffer.allocUnsafe(1024);
  pos = 0;
  ensure(n: number): void {
    if (this.pos + n <= this.buf.length) return;
    const next = Buffer.allocUnsafe(Math.max(this.buf.length * 2, this.pos + n));
    this.buf.copy(next, 0, 0, this.pos);
    this.buf = next;
  }
  nil(): void {
    this.ensure(1);
    this.buf[this.pos++] = 0xc0;
  }
  arrayHeader(n: number): void {
    this.ensure(5);
    if (n < 16) this.buf[this.pos++] = 0x90 | n;
    else if (n < 0x10000) {
      this.buf[this.pos++] = 0xdc;
      this.buf.writeUInt16BE(n, this.pos);
      this.pos += 2;
    } else {
      this.buf[this.pos++] = 0xdd;
      this.buf.writeUInt32BE(n, this.pos);
      this.pos += 4;
    }
  }
  str(s: string): void {
    const len = Buffer.byteLength(s);
    this.ensure(len + 5);
    if (len < 32) this.buf[this.pos++] = 0xa0 | len;
    else if (len < 256) {
      this.buf[this.pos++] = 0xd9;
      this.buf[this.pos++] = len;
    } else {
      this.buf[this.pos++] = 0xda;
      this.buf.writeUInt16BE(len, this.pos);
      this.pos += 2;
    }
    this.pos += this.buf.write(s, this.pos);
  }
  float(v: number): void {
    this.ensure(9);
    this.buf[this.pos++] = 0xcb;
    this.buf.writeDoubleBE(v, this.pos);
    this.pos += 8;
  }
  int(v: number | bigint): void {
    this.ensure(9);
    if (typeof v === 'number') {
      if (!Number.isSafeInteger(v)) throw new RangeError(`kv-events: ${v} is not a safe integer`);
      if (v >= 0) {
        if (v < 128) this.buf[this.pos++] = v;
        else if (v < 256) {
          this.buf[this.pos++] = 0xcc;
          this.buf[this.pos++] = v;
        } else if (v < 0x10000) {
          this.buf[this.pos++] = 0xcd;
          this.buf.writeUInt16BE(v, this.pos);
          this.pos += 2;
        } else if (v < 0x100000000) {
          this.buf[this.pos++] = 0xce;
          this.buf.writeUInt32BE(v, this.pos);
          this.pos += 4;
        } else {
          this.buf[this.pos++] = 0xcf;
          this.buf.writeBigUInt64BE(BigInt(v), this.pos);
          this.pos += 8;
        }
        return;
      }
      if (v >= -32) {
        this.buf[this.pos++] = v & 0xff;
        return;
      }
      this.buf[this.pos++] = 0xd3;
      this.buf.writeBigInt64BE(BigInt(v), this.pos);
      this.pos += 8;
      return;
    }
    if (v >= 0n) {
      this.buf[this.pos++] = 0xcf;
      this.buf.writeBigUInt64BE(v, this.pos);
    } else {
      this.buf[this.pos++] = 0xd3;
      this.buf.writeBigInt64BE(v, this.pos);
    }
    this.pos += 8;
  }
  hash(h: EngineBlockHash): void {
    if (typeof h === 'number') this.int(h);
    else this.int(BigInt(h));
  }
}

/**
 * Encodes a batch as vLLM's publisher does (array_like, tagged, trailing defaults omitted).
 * `dataParallelRank` is written when set (vLLM always sets it; SGLang's batch ends at events).
 */
export function encodeKvEventBatch(batch: KvEventBatch): Buffer {
  const w = new Writer();
  const hasRank = batch.dataParallelRank !== undefined && batch.dataParallelRank !== null;
  w.arrayHeader(hasRank ? 3 : 2);
  w.float(batch.ts);
  w.arrayHeader(batch.events.length);
  for (const ev of batch.events) {
    switch (ev.type) {
      case 'BlockStored':
        w.arrayHeader(7);
        w.str('BlockStored');
        w.arrayHeader(ev.blockHashes.length);
        for (const h of ev.blockHashes) w.hash(h);
        if (ev.parentBlockHash === null) w.nil();
        else w.hash(ev.parentBlockHash);
        w.arrayHeader(ev.tokenIds.length);
        for (const t of ev.tokenIds) w.int(t);
        w.int(ev.blockSize);
        if (ev.loraId === null) w.nil();
        else w.int(ev.loraId);
        if (ev.medium === null) w.nil();
        else w.str(ev.medium);
        break;
      case 'BlockRemoved':
        w.arrayHeader(3);
        w.str('BlockRemoved');
        w.arrayHeader(ev.blockHashes.length);
        for (const h of ev.blockHashes) w.hash(h);
        if (ev.medium === null) w.nil();
        else w.str(ev.medium);
        break;
      case 'AllBlocksCleared':
        w.arrayHeader(1);
        w.str('AllBlocksCleared');
        break;
    }
  }
  if (hasRank) w.int(batch.dataParallelRank as number);
  return Buffer.from(w.buf.subarray(0, w.pos));
}
