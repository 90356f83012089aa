import { writeFileSync } from 'node:fs';
import { resolve } from 'node:path';
import { FitError, fitProfile } from '../../fit/fit.ts';
import {
  ObservationFormatError,
  type ObservedRequest,
  readObservations,
} from '../../fit/observations.ts';
import { checkName, parseCommandArgs, positiveInt, str, strs } from '../args.ts';
import type { Subcommand } from '../command.ts';
import { UsageError } from '../errors.ts';
import { getProfile, profileNames } from '../sim-api.ts';

const usage = `usage: kvroute-sim fit --input FILE [--input FILE ...] --out PROFILE.json [options]
       kvroute-sim fit --trace RECORDED.jsonl --out PROFILE.json [options]

Fits a cost profile (prefill terms, decode terms, per-request overhead) to observed
per-request timings, prints the fit error and writes a kvroute-cost-profile/v1 file that
--profile-file loads.

Input, one or more files of either kind:
  - a 'kvroute-sim validate --record' file;
  - a trace kvroute-router recorded (--record-trace): requests the worker reported cached
    tokens for, streamed, and answered 2xx are used;
  - a request trace, one JSON object per line with timestamp (send time, ms), input_length,
    output_length, cached_tokens, ttft_ms, e2e_ms and optionally rank (or dp_rank).
Prefill and overhead are fitted from requests that ran alone on an idle rank (the fastest
tenth of their TTFTs: timing noise only adds), decode from requests whose decode saw no
prefill (median step time); record the 'fit-probe' scenario against the target to get both
(with clients=N it runs N closed-loop clients and its burst groups on ranks of their own).

  --input FILE              observations (repeatable)
  --trace FILE              the same as --input (repeatable)
  --out FILE                where to write the profile ('-': stdout)
  --chunked-prefill-size N  the target's prefill chunk (default: --base-profile's)
  --kv-capacity N           KV pool per rank for the written profile (default: --base-profile's)
  --base-profile NAME       built-in profile the two above default from (default h200-llama-3.1-8b)
  --name NAME               profile name (default 'fitted')

example:
  kvroute-sim validate --target http://worker:30000 --scenario fit-probe --record probe.jsonl \\
    --set clients=20 --set singles=128 --set suffixTokens=16 --set suffixMaxTokens=8192 \\
    --set ranks=26 --policy total_requests --affinity routing_key
  kvroute-sim fit --input probe.jsonl --chunked-prefill-size 8192 --out my-gpu.json
  kvroute-sim run --scenario agentic --profile-file my-gpu.json
`;

const pct = (v: number) => `${(v * 100).toFixed(1)}%`;

export const command: Subcommand = {
  name: 'fit',
  summary: 'fit a cost profile to observed per-request timings and write it as a profile file',
  usage,
  async run(argv, io) {
    const p = parseCommandArgs('fit', argv, {
      input: { type: 'string', multiple: true },
      trace: { type: 'string', multiple: true },
      out: { type: 'string' },
      'chunked-prefill-size': { type: 'string' },
      'kv-capacity': { type: 'string' },
      'base-profile': { type: 'string' },
      name: { type: 'string' },
    });
    const inputs = [...strs(p, 'input'), ...strs(p, 'trace')];
    if (inputs.length === 0)
      throw new UsageError(
        '--input or --trace is required (a recorded trace, a validate record or a request trace)',
      );
    const out = str(p, 'out');
    if (out === undefined) throw new UsageError("--out is required (a file, or '-' for stdout)");
    const base = getProfile(
      checkName('base-profile', str(p, 'base-profile') ?? 'h200-llama-3.1-8b', profileNames()),
    );
    const chunkRaw = str(p, 'chunked-prefill-size');
    const kvRaw = str(p, 'kv-capacity');
    const requests: ObservedRequest[] = [];
    let skipped = 0;
    let unobserved = 0;
    const notes: string[] = [];
    for (const file of inputs) {
      try {
        const r = readObservations(resolve(io.cwd, file));
        const source = inputs.indexOf(file);
        for (const x of r.requests) requests.push({ ...x, source });
        skipped += r.skipped;
        const u = r.unobserved;
        if (u !== undefined) unobserved += u.cachedUnknown + u.notStreamed;
        if (u !== undefined && u.cachedUnknown + u.notStreamed > 0) {
          notes.push(
            `${file}: ${u.cachedUnknown} request(s) without a reported cached-token count and ${u.notStreamed} non-streamed left out (what the fit needs was not observed)`,
          );
        }
        if (r.sampleRate !== undefined && r.sampleRate < 1) {
          notes.push(
            `${file}: recorded at sample rate ${r.sampleRate}: requests the recording dropped are invisible, so some requests taken to run alone did not`,
          );
        }
      } catch (e) {
        if (e instanceof ObservationFormatError) throw new UsageError(e.message);
        throw e;
      }
    }
    if (requests.length + skipped + unobserved === 0) {
      // Not a shortage of lone requests: there is nothing at all to fit (a recording of no
      // traffic, its start line alone, or an empty file); say so, as replay and sweep do.
      throw new UsageError(`${inputs.join(', ')}: the trace has no request lines`);
    }
    let fit: ReturnType<typeof fitProfile>;
    try {
      fit = fitProfile(requests, {
        chunkedPrefillSize:
          chunkRaw !== undefined
            ? positiveInt('chunked-prefill-size', chunkRaw)
            : base.chunkedPrefillSize,
        kvCapacityTokens:
          kvRaw !== undefined ? positiveInt('kv-capacity', kvRaw) : base.kvCapacityTokens,
        name: str(p, 'name') ?? 'fitted',
        source: `kvroute-sim fit of ${inputs.join(', ')}`,
      });
    } catch (e) {
      if (e instanceof FitError) throw new UsageError(e.message);
      throw e;
    }
    // Timings say nothing about the KV pool or the prefill chunk: a profile that takes them
    // from the base profile predicts hit rates for that model's pool, not the user's.
    const baseName = base.name;
    if (kvRaw === undefined) {
      notes.push(
        `the profile's KV pool (kvCapacityTokens ${base.kvCapacityTokens} per rank) is --base-profile ${baseName}'s, not measured: pass --kv-capacity with your server's (SGLang: max_total_num_tokens in /get_server_info), since the predicted hit rate depends on it`,
      );
    }
    if (chunkRaw === undefined) {
      notes.push(
        `chunkedPrefillSize ${base.chunkedPrefillSize} is --base-profile ${baseName}'s: pass --chunked-prefill-size with your server's (SGLang: chunked_prefill_size in /get_server_info)`,
      );
    }
    const text = `${JSON.stringify(fit.spec, null, 2)}\n`;
    const log = out === '-' ? io.stderr : io.stdout;
    const s = fit.spec;
    for (const n of notes) log.write(`note: ${n}\n`);
    log.write(
      `${requests.length} requests used (${skipped} failed or unmeasured and ${unobserved} not observed left out)\n` +
        `prefill + overhead: ${fit.prefill.rows} lone requests (${fit.prefill.excluded} not alone), TTFT error median ${pct(fit.prefill.medianAbsRelError)}, max ${pct(fit.prefill.maxAbsRelError)}\n` +
        `  overheadMs ${s.overheadMs}  floorMs ${s.prefill.floorMs}  perTokenMs ${s.prefill.perTokenMs}  attnMsPerMTokenPairs ${s.prefill.attnMsPerMTokenPairs}  perKCachedTokenMs ${s.prefill.perKCachedTokenMs}\n` +
        `decode: ${fit.decode.rows} decode windows (${fit.decode.excluded} with a prefill alongside or too short), step error median ${pct(fit.decode.medianAbsRelError)}, max ${pct(fit.decode.maxAbsRelError)}\n` +
        `  floorMs ${s.decode.floorMs}  perSeqMs ${s.decode.perSeqMs}  perKContextTokenMs ${s.decode.perKContextTokenMs}\n`,
    );
    if (out === '-') io.stdout.write(text);
    else {
      writeFileSync(resolve(io.cwd, out), text);
      log.write(`wrote ${out}\n`);
    }
    return 0;
  },
};
