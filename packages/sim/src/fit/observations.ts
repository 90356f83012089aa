// Per-request observations a cost profile is fitted to, and the readers that produce them.
//
// Two inputs are read:
// - a `kvroute-sim validate --record` file (JSON Lines, `kvroute-validate-record/v1` header);
// - a request trace, one JSON object per line, with the measured fields in snake_case as a
//   router or benchmark client would log them next to a Mooncake-style trace line:
//   `timestamp` (send time, ms), `input_length`, `output_length`, `cached_tokens`, `ttft_ms`,
//   `e2e_ms`, and optionally `rank` (or `dp_rank`). Other fields (`hash_ids`, ...) are ignored.
// - a trace kvroute-router recorded (`--record-trace`; its first line is a `start` event):
//   read with the trace reader, event lines skipped. Only what the router observed is used:
//   a request without a reported cached-token count, a non-streamed one (its first byte is
//   the whole response) and a failed one are left out and counted, never read as 0.
// What the fit needs of every request: when it was sent, its input, cached and output token
// counts, its TTFT and end-to-end latency, and the rank that served it when there are several.
import { readFileSync } from 'node:fs';
import { parseTrace, TraceFormatError } from '../workloads/trace-file.ts';

export interface ObservedRequest {
  /** Send time, ms (any origin, the same for every request of a file). */
  startMs: number;
  ttftMs: number;
  e2eMs: number;
  inputTokens: number;
  cachedTokens: number;
  outputTokens: number;
  /** The rank that served it; requests without one are taken to share one rank. */
  rank?: number;
  /**
   * Which recording it came from: requests of different recordings never ran side by side,
   * whatever their times say (each recording's clock starts at its own origin).
   */
  source?: number;
}

export class ObservationFormatError extends Error {
  readonly code = 'FIT_INPUT';
  override name = 'ObservationFormatError';
}

const isNum = (v: unknown): v is number => typeof v === 'number' && Number.isFinite(v);

export interface Observations {
  requests: ObservedRequest[];
  /** Requests that failed or whose timing was not measured. */
  skipped: number;
  /** Recorded traces: requests left out because the router could not observe what the fit needs. */
  unobserved?: { cachedUnknown: number; notStreamed: number };
  /** Recorded traces: the share of requests the recording kept (below 1, the fit cannot see every neighbour). */
  sampleRate?: number;
}

function fromRecordedTrace(text: string, path: string, withoutStart = false): Observations {
  let trace: ReturnType<typeof parseTrace>;
  try {
    // Without the start line the block size is unknown; the fit reads no block ids.
    trace = parseTrace(
      text,
      path,
      withoutStart ? { recordedLines: true, blockTokens: 2 ** 30 } : {},
    );
  } catch (e) {
    if (e instanceof TraceFormatError) throw new ObservationFormatError(e.message);
    throw e;
  }
  const requests: ObservedRequest[] = [];
  let skipped = 0;
  let cachedUnknown = 0;
  let notStreamed = 0;
  for (const l of trace.lines) {
    const o = l.observed ?? {};
    const ok = o.status === undefined || (o.status >= 200 && o.status < 300);
    if (!ok || o.ttftMs === undefined || o.e2eMs === undefined) {
      skipped++;
      continue;
    }
    if (o.stream === false) {
      notStreamed++;
      continue;
    }
    if (o.cachedTokens === undefined) {
      cachedUnknown++;
      continue;
    }
    requests.push({
      startMs: l.timestamp,
      ttftMs: o.ttftMs,
      e2eMs: o.e2eMs,
      inputTokens: l.inputLength,
      cachedTokens: o.cachedTokens,
      outputTokens: l.outputLength,
      ...(o.rank !== undefined ? { rank: o.rank } : {}),
    });
  }
  return {
    requests,
    skipped,
    unobserved: { cachedUnknown, notStreamed },
    ...(trace.start?.sampleRate !== undefined ? { sampleRate: trace.start.sampleRate } : {}),
  };
}

const firstLine = (text: string) => {
  for (const l of text.split('\n', 64)) if (l.trim() !== '') return l;
  return '';
};

/** A request line the router wrote: Mooncake's fields with the router's status and stream. */
function routerLine(raw: string): boolean {
  try {
    const o = JSON.parse(raw) as Record<string, unknown>;
    return (
      typeof o === 'object' &&
      o !== null &&
      Array.isArray(o.hash_ids) &&
      typeof o.status === 'number' &&
      typeof o.stream === 'boolean'
    );
  } catch {
    return false;
  }
}

/** Reads one file of any of the formats; failed requests (no TTFT, not ok) are skipped and counted. */
export function readObservations(path: string): Observations {
  let text: string;
  try {
    text = readFileSync(path, 'utf8');
  } catch (e) {
    throw new ObservationFormatError(`${path}: cannot read (${(e as Error).message})`);
  }
  const first = firstLine(text);
  if (/"event"\s*:\s*"start"/.test(first)) return fromRecordedTrace(text, path);
  // The router's request lines without their event lines (the docs' pure Mooncake file): read
  // them as a recording, or a missing cached_tokens would read as 0, a non-streamed answer's
  // whole time as its TTFT, and a failed request (a 500 in ~3 ms) as a fast lone prefill.
  if (routerLine(first)) return fromRecordedTrace(text, path, true);
  const requests: ObservedRequest[] = [];
  let skipped = 0;
  let validate = false;
  const lines = text.split('\n');
  for (let i = 0; i < lines.length; i++) {
    const raw = lines[i]!.trim();
    if (raw === '') continue;
    let o: Record<string, unknown>;
    try {
      o = JSON.parse(raw) as Record<string, unknown>;
    } catch {
      throw new ObservationFormatError(`${path}:${i + 1}: not valid JSON`);
    }
    if (typeof o !== 'object' || o === null) {
      throw new ObservationFormatError(`${path}:${i + 1}: expected a JSON object`);
    }
    if (o.format === 'kvroute-validate-record/v1') {
      validate = true;
      continue;
    }
    const where = `${path}:${i + 1}`;
    if (validate || o.type === 'request') {
      const obs = o.observed as Record<string, unknown> | undefined;
      if (typeof obs !== 'object' || obs === null) {
        throw new ObservationFormatError(`${where}: a validate record line needs 'observed'`);
      }
      if (obs.ok !== true || !isNum(obs.ttftMs)) {
        skipped++;
        continue;
      }
      const ids = o.inputIds as unknown[] | undefined;
      const input = isNum(obs.promptTokens) ? obs.promptTokens : ids?.length;
      const out = isNum(obs.outputTokens) ? obs.outputTokens : o.outputTokens;
      if (!isNum(input) || !isNum(out) || !isNum(obs.e2eMs) || !isNum(obs.startMs)) {
        throw new ObservationFormatError(
          `${where}: needs input tokens, output tokens, startMs and e2eMs`,
        );
      }
      requests.push({
        startMs: obs.startMs,
        ttftMs: obs.ttftMs,
        e2eMs: obs.e2eMs,
        inputTokens: input,
        cachedTokens: isNum(obs.cachedTokens) ? obs.cachedTokens : 0,
        outputTokens: out,
        ...(isNum(obs.rank) ? { rank: obs.rank } : {}),
      });
      continue;
    }
    const need = ['timestamp', 'input_length', 'output_length', 'ttft_ms', 'e2e_ms'] as const;
    const missing = need.filter((k) => !isNum(o[k]));
    if (missing.length > 0) {
      // A line without a TTFT is a request that failed or was not measured.
      if (missing.length === 1 && missing[0] === 'ttft_ms' && o.ttft_ms === null) {
        skipped++;
        continue;
      }
      throw new ObservationFormatError(
        `${where}: missing or non-numeric ${missing.join(', ')} (a trace line needs ${need.join(', ')}, cached_tokens and optionally rank)`,
      );
    }
    const rank = isNum(o.rank) ? o.rank : isNum(o.dp_rank) ? o.dp_rank : undefined;
    requests.push({
      startMs: o.timestamp as number,
      ttftMs: o.ttft_ms as number,
      e2eMs: o.e2e_ms as number,
      inputTokens: o.input_length as number,
      cachedTokens: isNum(o.cached_tokens) ? o.cached_tokens : 0,
      outputTokens: o.output_length as number,
      ...(rank !== undefined ? { rank } : {}),
    });
  }
  return { requests, skipped };
}
