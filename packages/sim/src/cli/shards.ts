// Shard files of a sweep split over machines (`sweep --shard K/N`), and `merge`, which turns
// all N of them into the report one run of the whole grid gives, byte for byte.
import { readFileSync } from 'node:fs';
import type { CellResult } from '../parallel/cell.ts';
import type { SweepLoadReport, SweepReport } from '../report/types.ts';
import type { CliIo } from './command.ts';
import { UsageError } from './errors.ts';
import { writeOutput } from './outputs.ts';
import { assembleSweep, SHARD_FORMAT, type SweepShard, shardIndices } from './simulate.ts';

export function writeShard(io: CliIo, target: string, shard: SweepShard): void {
  writeOutput(
    io,
    'json',
    target,
    `${JSON.stringify(shard)}\n`,
    (path) =>
      `wrote shard ${shard.shard.index}/${shard.shard.count} (${shard.cells.length} of ${shard.total} cells) to ${path}`,
  );
}

export function readShard(path: string): SweepShard {
  let raw: unknown;
  try {
    raw = JSON.parse(readFileSync(path, 'utf8'));
  } catch (err) {
    throw new UsageError(`${path}: not a readable JSON shard file (${(err as Error).message})`);
  }
  const s = raw as Partial<SweepShard>;
  if (s?.format !== SHARD_FORMAT || !s.shard || !s.sweep || !Array.isArray(s.cells)) {
    throw new UsageError(`${path}: not a sweep shard file (expected format ${SHARD_FORMAT})`);
  }
  return s as SweepShard;
}

/** Checks the shards are all N of one sweep and assembles its report. */
export function mergeShards(
  shards: readonly { path: string; shard: SweepShard }[],
): SweepReport | SweepLoadReport {
  if (shards.length === 0) throw new UsageError('merge needs the shard files');
  const first = shards[0]!.shard;
  const spec = JSON.stringify(first.sweep);
  const count = first.shard.count;
  const byIndex = new Map<number, string>();
  const results: (CellResult | undefined)[] = new Array(first.total);
  for (const { path, shard } of shards) {
    if (JSON.stringify(shard.sweep) !== spec || shard.total !== first.total) {
      throw new UsageError(`${path}: a shard of a different sweep than ${shards[0]!.path}`);
    }
    if (shard.shard.count !== count) {
      throw new UsageError(`${path}: shard of ${shard.shard.count}, the others are of ${count}`);
    }
    const seen = byIndex.get(shard.shard.index);
    if (seen !== undefined) {
      throw new UsageError(`shard ${shard.shard.index}/${count} given twice: ${seen} and ${path}`);
    }
    byIndex.set(shard.shard.index, path);
    const expected = shardIndices(first.total, shard.shard.index, count);
    const got = shard.cells.map((c) => c.index);
    if (JSON.stringify(expected) !== JSON.stringify(got)) {
      throw new UsageError(`${path}: its cells are not shard ${shard.shard.index}/${count}'s`);
    }
    for (const c of shard.cells) results[c.index] = c.result;
  }
  const missing: number[] = [];
  for (let k = 1; k <= count; k++) if (!byIndex.has(k)) missing.push(k);
  if (missing.length > 0) {
    throw new UsageError(
      `missing shard${missing.length > 1 ? 's' : ''} ${missing.map((k) => `${k}/${count}`).join(', ')}`,
    );
  }
  return assembleSweep(first.sweep, results as CellResult[]);
}
