// A replay reads its trace into columns (TraceTable) a chunk of the file at a time, instead
// of holding the file's text and one object per line: the same rows, checks and errors as
// the line reader, in a third of the memory.
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { buildWorkload } from '../src/workloads/registry.ts';
import {
  forEachLine,
  readTraceFile,
  readTraceTable,
  sessionLinks,
  sessionTailIds,
  TraceFormatError,
} from '../src/workloads/trace-file.ts';

const dir = mkdtempSync(join(tmpdir(), 'kvroute-trace-table-'));
let n = 0;
function write(text: string): string {
  const file = join(dir, `t${n++}.jsonl`);
  writeFileSync(file, text);
  return file;
}

function lines(file: string, chunk: number): string[] {
  const out: string[] = [];
  forEachLine(
    file,
    (l) => {
      out.push(l);
      return true;
    },
    chunk,
  );
  return out;
}

describe('forEachLine', () => {
  it('gives the lines split reads, whatever the chunk size (multi-byte text, CRLF, long lines, no final newline)', () => {
    const line = fc.stringMatching(/^[a-z{}":,0-9 é€😀\r]{0,40}$/u);
    fc.assert(
      fc.property(
        fc.array(line, { maxLength: 12 }),
        fc.boolean(),
        fc.integer({ min: 1, max: 64 }),
        (ls, final, chunk) => {
          const text = ls.join('\n') + (final && ls.length > 0 ? '\n' : '');
          // A line ends at a newline; what follows the last newline is a line if not empty.
          const expected = text.split('\n');
          if (expected[expected.length - 1] === '') expected.pop();
          expect(lines(write(text), chunk)).toEqual(expected);
        },
      ),
      { numRuns: 200 },
    );
  });

  it('stops when told to, and names a file it cannot read', () => {
    const file = write('a\nb\nc\n');
    const seen: string[] = [];
    const upToB = (l: string) => {
      seen.push(l);
      return l !== 'b';
    };
    forEachLine(file, upToB, 2);
    expect(seen).toEqual(['a', 'b']);
    expect(() => forEachLine(join(dir, 'missing.jsonl'), () => true)).toThrow(
      /cannot read .*missing\.jsonl/,
    );
  });
});

describe('readTraceTable', () => {
  const row = (timestamp: number, hashIds: number[], extra: Record<string, unknown> = {}) =>
    JSON.stringify({
      timestamp,
      input_length: hashIds.length * 4 - 1,
      output_length: 3,
      hash_ids: hashIds,
      ...extra,
    });

  it('holds the rows readTraceFile gives, Mooncake or recorded, with limit and skipInvalid', () => {
    const mooncake = write(
      [row(0, [0, 1]), 'not json', row(5, [0, 1, 2]), '', row(9, [7])].join('\n'),
    );
    const start = JSON.stringify({ event: 'start', block_tokens: 4, ranks: 2 });
    const recorded = write(
      [
        start,
        row(30, [0, 2], { key: 's', e2e_ms: 5, rank: 1, reason: 'prefix-hash' }),
        JSON.stringify({ event: 'policy_switch', timestamp: 20, method: 'round_robin' }),
        row(10, [0, 1], { key: 's', e2e_ms: 4, cached_tokens: 3 }),
        row(10, [0, 3]),
        row(40, [0, 2, 2 ** 40], { key: 's' }),
      ].join('\n'),
    );
    for (const [file, opts] of [
      [mooncake, { skipInvalid: true, blockTokens: 4 }],
      [mooncake, { skipInvalid: true, blockTokens: 4, limit: 2 }],
      [recorded, {}],
      [recorded, { limit: 2 }],
    ] as const) {
      const a = readTraceFile(file, opts);
      const { table, ...head } = readTraceTable(file, opts);
      expect(table.lines()).toEqual(a.lines);
      expect(head).toEqual({ ...a, lines: undefined, file });
      expect(sessionLinks(table)).toEqual(sessionLinks(a.lines));
      expect(sessionTailIds(table, sessionLinks(table), a.blockTokens)).toEqual(
        sessionTailIds(a.lines, sessionLinks(a.lines), a.blockTokens),
      );
    }
    // A 48-bit id (recorded traces' ids are) is kept exactly.
    expect(readTraceTable(recorded).table.hashId(3, 2)).toBe(2 ** 40);
  });

  it('fails as readTraceFile does, naming file and line', () => {
    const file = write([row(5, [0]), row(1, [0])].join('\n'));
    expect(() => readTraceTable(file, { blockTokens: 4 })).toThrow(TraceFormatError);
    expect(() => readTraceTable(file, { blockTokens: 4 })).toThrow(
      `${file}:2: timestamp 1 goes back in time (previous 5)`,
    );
  });

  it("keeps the trace out of a replay request's enumerable properties", () => {
    const plan = buildWorkload('replay', { limit: 3 }, 1);
    const req = plan.requests[1]!;
    const json = JSON.stringify({ ...req, inputIds: undefined });
    expect(json.length).toBeLessThan(300);
    expect({ ...req }.inputIds).toEqual(req.inputIds);
    expect(Object.keys(req)).not.toContain('context');
  });
});
