import { resolve } from 'node:path';
import { parseCommandArgs, str } from '../args.ts';
import type { Subcommand } from '../command.ts';
import { emitSweepReport, writeRouterConfig } from '../emit-report.ts';
import { UsageError } from '../errors.ts';
import { checkTargets, type OutputTargets } from '../outputs.ts';
import { mergeShards, readShard } from '../shards.ts';

const usage = `usage: kvroute-sim merge SHARD.json... [--json FILE|-] [--csv FILE|-] [--html FILE|-] [--out-config FILE]

Combines the N files of 'kvroute-sim sweep ... --shard K/N --json FILE' (one per K, from any
machines, in any order) into the sweep's report: the same table, JSON, CSV and HTML bytes one
'kvroute-sim sweep' over the whole grid writes. Refuses shards of different sweeps, a shard
given twice, or a missing one.

  SHARD.json            path: shard result files, all N of them
  --json FILE|-         write the JSON report; '-' = stdout only
  --csv FILE|-          write one CSV row per grid cell
  --html FILE|-         write the HTML report with the heatmaps
  --out-config FILE     write the winner as a kvroute-router YAML config
  -h, --help            this help

example:
  kvroute-sim merge shards/*.json --html sweep.html
`;

export const command: Subcommand = {
  name: 'merge',
  summary: "combine 'sweep --shard K/N' results into the report one sweep run gives",
  usage,
  async run(argv, io) {
    const p = parseCommandArgs(
      'merge',
      argv,
      {
        json: { type: 'string' },
        csv: { type: 'string' },
        html: { type: 'string' },
        'out-config': { type: 'string' },
      },
      true,
    );
    if (p.positionals.length === 0) throw new UsageError('merge needs the shard files');
    const outputs: OutputTargets = {
      json: str(p, 'json'),
      csv: str(p, 'csv'),
      html: str(p, 'html'),
    };
    checkTargets(outputs);
    const shards = p.positionals.map((f) => {
      const path = resolve(io.cwd, f);
      return { path, shard: readShard(path) };
    });
    const report = mergeShards(shards);
    await emitSweepReport(io, outputs, report);
    const outConfig = str(p, 'out-config');
    if (outConfig !== undefined) writeRouterConfig(io, outConfig, report);
    return 0;
  },
};
