import { Packr } from 'msgpackr';
import { describe, expect, it } from 'vitest';
import {
  decodeKvEventBatch,
  decodeSeq,
  encodeKvEventBatch,
  encodeSeq,
  type KvEventBatch,
  KvEventDecodeError,
  offsetEndpointPort,
} from '../src/kv-events.ts';

const packr = new Packr({ useRecords: false });

describe('kv-events wire format', () => {
  it('round-trips a batch with every event type, rank and 64-bit hashes', () => {
    const batch: KvEventBatch = {
      ts: 1_700_000_000.25,
      events: [
        {
          type: 'BlockStored',
          blockHashes: [7, '18446744073709551615'],
          parentBlockHash: null,
          tokenIds: [1, 2, 3, 4, 70000, 6, 7, 8],
          blockSize: 4,
          loraId: null,
          medium: 'GPU',
        },
        { type: 'BlockRemoved', blockHashes: [7], medium: null },
        { type: 'AllBlocksCleared' },
      ],
      dataParallelRank: 3,
    };
    expect(decodeKvEventBatch(encodeKvEventBatch(batch))).toEqual(batch);
  });

  it('writes msgspec array_like tagged arrays with smallest integer widths', () => {
    const bytes = encodeKvEventBatch({
      ts: 1.5,
      events: [
        {
          type: 'BlockStored',
          blockHashes: [300],
          parentBlockHash: 5,
          tokenIds: [1],
          blockSize: 1,
          loraId: null,
          medium: null,
        },
      ],
    });
    // [1.5, [["BlockStored", [300], 5, [1], 1, nil, nil]]]
    expect(bytes.toString('hex')).toBe(
      `92cb3ff8000000000000919${7}ab${Buffer.from('BlockStored').toString('hex')}91cd012c0591010${1}c0c0`,
    );
  });

  it('decodes SGLang-style batches (no rank, events ending at lora_id) and the map form', () => {
    const sglang = packr.pack([
      2.0,
      [
        ['BlockStored', [1, 2], 9, [5, 6], 1, null],
        ['BlockRemoved', [1]],
      ],
    ]);
    const d = decodeKvEventBatch(sglang);
    expect(d.dataParallelRank).toBeUndefined();
    expect(d.events[0]).toMatchObject({ parentBlockHash: 9, medium: null, loraId: null });
    expect(d.events[1]).toEqual({ type: 'BlockRemoved', blockHashes: [1], medium: null });
    const map = packr.pack({
      ts: 1,
      events: [{ type: 'AllBlocksCleared' }],
      data_parallel_rank: 1,
    });
    expect(decodeKvEventBatch(map)).toEqual({
      ts: 1,
      events: [{ type: 'AllBlocksCleared' }],
      dataParallelRank: 1,
    });
  });

  it('keys byte-string hashes (vLLM may send bytes) as hex strings', () => {
    const payload = packr.pack([1, [['BlockRemoved', [new Uint8Array([0xab, 0x01])], 'GPU']]]);
    expect(decodeKvEventBatch(payload).events[0]).toEqual({
      type: 'BlockRemoved',
      blockHashes: ['xab01'],
      medium: 'GPU',
    });
  });

  it('names what is wrong in a bad payload', () => {
    const bad = (v: unknown) => () => decodeKvEventBatch(packr.pack(v));
    expect(() => decodeKvEventBatch(new Uint8Array([0xc1]))).toThrow(KvEventDecodeError);
    expect(bad('x')).toThrow(/EventBatch must be an array/);
    expect(bad([1, [['Nope']]])).toThrow(/unknown event type "Nope"/);
    expect(bad([1, [['BlockStored', [1], null, [1, 2], 1, null, null]]])).toThrow(
      /2 tokens for 1 blocks of 1/,
    );
    expect(bad([1, [['BlockStored', [1.5], null, [1], 1, null, null]]])).toThrow(/not an integer/);
    expect(bad([1, [['BlockStored', [1], null, [-1], 1, null, null]]])).toThrow(/token_ids\[0\]/);
    expect(bad([Number.NaN, []])).toThrow(/EventBatch.ts must be a finite number, got NaN/);
    expect(bad([Number.POSITIVE_INFINITY, []])).toThrow(/EventBatch.ts .* got Infinity/);
    expect(bad(['1', []])).toThrow(/EventBatch.ts must be a finite number, got 1/);
  });

  it('encodes sequences as 8-byte big-endian and reads the -1 end marker', () => {
    expect(encodeSeq(258).toString('hex')).toBe('0000000000000102');
    expect(decodeSeq(encodeSeq(123456789))).toBe(123456789);
    expect(decodeSeq(Buffer.from('ffffffffffffffff', 'hex'))).toBe(-1);
    expect(() => decodeSeq(new Uint8Array(4))).toThrow(/8 bytes/);
  });

  it('offsets endpoint ports per data-parallel rank as the engines do', () => {
    expect(offsetEndpointPort('tcp://10.0.0.1:5557', 0)).toBe('tcp://10.0.0.1:5557');
    expect(offsetEndpointPort('tcp://10.0.0.1:5557', 3)).toBe('tcp://10.0.0.1:5560');
    expect(offsetEndpointPort('inproc://cache', 2)).toBe('inproc://cache_dp2');
    expect(() => offsetEndpointPort('ipc:///tmp/x', 1)).toThrow(/no tcp port/);
  });
});
