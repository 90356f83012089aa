// Fits a cost profile's constants to observed requests. Two linear regressions, each on the
// requests whose timing the profile's formula explains on its own:
//
// - Prefill + overhead, from requests whose whole TTFT window saw no other request on their
//   rank (alone on an idle rank, TTFT = overhead + the sum over its prefill chunks):
//     ttft = overheadMs + floorMs*chunks + perTokenMs*sum(n) + attnMsPerMTokenPairs*sum(n*(c+n))/1e6
//            + perKCachedTokenMs*sum(c)/1000
//   with the chunks the rank would cut (chunkedPrefillSize) from input - cached on top of cached.
// - Decode, from requests whose decode window saw no prefill on their rank: the mean step time
//   (e2e - ttft) / (output - 1) against the time-averaged batch size and total context over
//   that window (the requests decoding alongside, from their own windows):
//     stepMs = floorMs + perSeqMs*batch + perKContextTokenMs*context/1000
//
// Prefill: a low quantile (PREFILL_QUANTILE) of the absolute TTFT residual; decode: the
// median of the step-time residual times the window's steps. Both by iteratively reweighted least squares,
// with non-negative coefficients (a term that comes out negative is dropped and the rest
// refitted). Why these (scripts/fit-accuracy.ts measures each choice on timing noise recorded
// against a mock worker): a client's timing noise is additive (a request is late by the same
// few ms whatever its size) and one-sided with a long tail, so least squares is pulled up by
// every late request, relative weighting hands the short requests' TTFTs (where the noise is
// the largest share) the most say, and the fastest tenth of the requests follows the
// undisturbed timings more tightly than the fastest fifth. A decode window's noise is the
// difference of two late deliveries (its first and last token), so it is two-sided and the
// median suits it; its size does not grow with the window, so a mean step over more steps
// is known more precisely and counts for more.
// The profile's launch floor is not fitted (0): a lone-request workload cannot tell it from
// the additive floor.
import { type CostProfileSpec, MIN_CHUNKED_PREFILL_SIZE } from '../cost/cost-model.ts';
import type { ObservedRequest } from './observations.ts';

/**
 * Prefill and overhead follow the fastest tenth of the lone requests' TTFTs: on a busy host
 * most requests are late by a few ms and some by far more. The fitted overheadMs therefore
 * carries this quantile of the client's timing noise, as it carries the server's HTTP path.
 */
export const PREFILL_QUANTILE = 0.1;

/** Decode step times are fitted to their median: a window's noise has both signs. */
export const DECODE_QUANTILE = 0.5;

export interface FitOptions {
  chunkedPrefillSize: number;
  kvCapacityTokens: number;
  name?: string;
  source?: string;
}

export interface TermFit {
  /** Rows (requests) the regression used, and those left out as not isolated. */
  rows: number;
  excluded: number;
  medianAbsRelError: number;
  maxAbsRelError: number;
}

export interface FitResult {
  spec: CostProfileSpec;
  prefill: TermFit;
  decode: TermFit;
}

export class FitError extends Error {
  readonly code = 'FIT';
  override name = 'FitError';
}

interface Window {
  a: number;
  b: number;
}

const overlap = (x: Window, y: Window) => Math.max(0, Math.min(x.b, y.b) - Math.max(x.a, y.a));

/** Weighted non-negative least squares by refitting without negative terms. */
function nnls(xs: number[][], ys: number[], ws?: readonly number[]): number[] {
  const k = xs[0]!.length;
  const active = new Array<boolean>(k).fill(true);
  for (let round = 0; round <= k; round++) {
    const idx = active.flatMap((on, i) => (on ? [i] : []));
    const beta = solveWls(
      xs.map((row) => idx.map((i) => row[i]!)),
      ys,
      ws,
    );
    const full = new Array<number>(k).fill(0);
    idx.forEach((i, j) => {
      full[i] = beta[j]!;
    });
    const neg = idx.filter((i) => full[i]! < 0);
    if (neg.length === 0) return full;
    // Drop the most negative term and refit.
    let worst = neg[0]!;
    for (const i of neg) if (full[i]! < full[worst]!) worst = i;
    active[worst] = false;
  }
  return new Array<number>(k).fill(0);
}

/**
 * Quantile regression by iteratively reweighted least squares: minimises
 * sum(rho_tau((y - x.b) / scale)) with rho_tau(r) = tau*r above the fit and (1 - tau)*|r|
 * below. Timing noise only ever makes a request later (a late timer, a descheduled process, a
 * busy event loop): a low quantile follows the undisturbed timings, where least squares is
 * pulled up by every late one, and by the rare very late ones most. `scale` is each row's
 * noise scale (default 1).
 */
export function quantileFit(
  xs: number[][],
  ys: number[],
  tau: number,
  scale?: readonly number[],
): number[] {
  const sc = (r: number) => scale?.[r] ?? 1;
  let beta = nnls(
    xs,
    ys,
    ys.map((_, r) => 1 / (sc(r) * sc(r))),
  );
  for (let it = 0; it < 40; it++) {
    const ws = xs.map((row, r) => {
      const res = (ys[r]! - row.reduce((s, v, i) => s + v * beta[i]!, 0)) / sc(r);
      const side = res > 0 ? tau : 1 - tau;
      return (
        side / (sc(r) * sc(r) * Math.max(Math.abs(res), 1e-6 * (Math.abs(ys[r]!) / sc(r) + 1)))
      );
    });
    const next = nnls(xs, ys, ws);
    const moved = next.some((b, i) => Math.abs(b - beta[i]!) > 1e-9 * (Math.abs(b) + 1e-9));
    beta = next;
    if (!moved) break;
  }
  return beta;
}

/** Weighted least squares (weights default 1/y^2: relative error, sum(((x.b - y) / y)^2)). */
function solveWls(xs: number[][], ys: number[], ws?: readonly number[]): number[] {
  const k = xs[0]?.length ?? 0;
  if (k === 0) return [];
  const a = Array.from({ length: k }, () => new Array<number>(k + 1).fill(0));
  xs.forEach((row, r) => {
    const w = ws !== undefined ? ws[r]! : 1 / (ys[r]! * ys[r]!);
    for (let i = 0; i < k; i++) {
      for (let j = 0; j < k; j++) a[i]![j]! += w * row[i]! * row[j]!;
      a[i]![k]! += w * row[i]! * ys[r]!;
    }
  });
  // Gaussian elimination with partial pivoting; a singular column gets 0.
  const beta = new Array<number>(k).fill(0);
  const rowsOf = [...a.keys()];
  for (let c = 0; c < k; c++) {
    let p = c;
    for (let r = c + 1; r < k; r++)
      if (Math.abs(a[rowsOf[r]!]![c]!) > Math.abs(a[rowsOf[p]!]![c]!)) p = r;
    [rowsOf[c], rowsOf[p]] = [rowsOf[p]!, rowsOf[c]!];
    const piv = a[rowsOf[c]!]![c]!;
    if (Math.abs(piv) < 1e-12) continue;
    for (let r = 0; r < k; r++) {
      if (r === c) continue;
      const f = a[rowsOf[r]!]![c]! / piv;
      if (f === 0) continue;
      for (let j = c; j <= k; j++) a[rowsOf[r]!]![j]! -= f * a[rowsOf[c]!]![j]!;
    }
  }
  for (let c = 0; c < k; c++) {
    const piv = a[rowsOf[c]!]![c]!;
    beta[c] = Math.abs(piv) < 1e-12 ? 0 : a[rowsOf[c]!]![k]! / piv;
  }
  return beta;
}

function errors(xs: number[][], ys: number[], beta: number[]) {
  const errs = xs.map((row, r) => {
    const pred = row.reduce((s, v, i) => s + v * beta[i]!, 0);
    return Math.abs(pred - ys[r]!) / ys[r]!;
  });
  const sorted = [...errs].sort((p, q) => p - q);
  const mid = sorted.length >> 1;
  const median =
    sorted.length === 0
      ? Number.NaN
      : sorted.length % 2 === 1
        ? sorted[mid]!
        : (sorted[mid - 1]! + sorted[mid]!) / 2;
  return { median, max: sorted.length === 0 ? Number.NaN : sorted[sorted.length - 1]! };
}

/** The chunk terms of one request's prefill: [chunks, sum n, sum n(c+n)/1e6, sum c/1000]. */
export function prefillTerms(input: number, cached: number, chunk: number): number[] {
  let c = Math.min(cached, input - 1);
  let left = input - c;
  let chunks = 0;
  let tokens = 0;
  let pairs = 0;
  let cachedK = 0;
  while (left > 0) {
    const n = Math.min(chunk, left);
    chunks++;
    tokens += n;
    pairs += (n * (c + n)) / 1e6;
    cachedK += c / 1000;
    c += n;
    left -= n;
  }
  return [chunks, tokens, pairs, cachedK];
}

export function fitProfile(requests: readonly ObservedRequest[], o: FitOptions): FitResult {
  if (!Number.isInteger(o.chunkedPrefillSize) || o.chunkedPrefillSize < MIN_CHUNKED_PREFILL_SIZE) {
    // The profile it writes could not be loaded otherwise.
    throw new FitError(
      `chunkedPrefillSize must be an integer >= ${MIN_CHUNKED_PREFILL_SIZE}, got ${o.chunkedPrefillSize}`,
    );
  }
  const byRank = new Map<string, ObservedRequest[]>();
  for (const r of requests) {
    const k = `${r.source ?? 0}:${r.rank ?? -1}`;
    const list = byRank.get(k) ?? [];
    list.push(r);
    byRank.set(k, list);
  }
  const px: number[][] = [];
  const py: number[] = [];
  const dx: number[][] = [];
  const dy: number[] = [];
  const dsteps: number[] = [];
  let prefillExcluded = 0;
  let decodeExcluded = 0;
  for (const list of byRank.values()) {
    const P = list.map((r) => ({ a: r.startMs, b: r.startMs + r.ttftMs }));
    const D = list.map((r) => ({ a: r.startMs + r.ttftMs, b: r.startMs + r.e2eMs }));
    list.forEach((r, i) => {
      // Prefill rows: nothing else on the rank during this request's TTFT window.
      let alone = true;
      for (let j = 0; j < list.length && alone; j++) {
        if (j === i) continue;
        if (overlap(P[i]!, P[j]!) > 0 || overlap(P[i]!, D[j]!) > 0) alone = false;
      }
      if (alone && r.ttftMs > 0 && r.inputTokens > 0) {
        px.push([1, ...prefillTerms(r.inputTokens, r.cachedTokens, o.chunkedPrefillSize)]);
        py.push(r.ttftMs);
      } else prefillExcluded++;
      // Decode rows: no prefill on the rank during this request's decode window.
      const w = D[i]!;
      const len = w.b - w.a;
      // A few steps are too short a window to average out timing noise.
      if (r.outputTokens < 8 || len <= 0) {
        decodeExcluded++;
        return;
      }
      let clean = true;
      // Requests batched into one prefill step get their first tokens at one moment; the
      // client sees them a few ms apart. An overlap shorter than half a mean step cannot hold
      // a prefill step, so it is delivery jitter, not a prefill in the window.
      const jitter = len / (r.outputTokens - 1) / 2;
      let batch = 0;
      let ctx = 0;
      for (let j = 0; j < list.length && clean; j++) {
        if (j !== i && overlap(w, P[j]!) > jitter) clean = false;
        // Batch-mates that started or stopped decoding with this request did so on the same
        // step; their client-side times differ by delivery noise only. Read as they are, a
        // batch-mate's window would cover a little less than this one, the batch would come
        // out below its true size and perSeqMs above; so ends within the jitter coincide.
        const raw = D[j]!;
        const dj = {
          a: Math.abs(raw.a - w.a) <= jitter ? w.a : raw.a,
          b: Math.abs(raw.b - w.b) <= jitter ? w.b : raw.b,
        };
        const ov = overlap(w, dj);
        if (ov <= 0) continue;
        const rj = list[j]!;
        const mid = (Math.max(w.a, dj.a) + Math.min(w.b, dj.b)) / 2;
        const generated = dj.b > dj.a ? ((mid - dj.a) / (dj.b - dj.a)) * rj.outputTokens : 0;
        batch += ov / len;
        ctx += (ov / len) * (rj.inputTokens + generated);
      }
      if (!clean) {
        decodeExcluded++;
        return;
      }
      dx.push([1, batch, ctx / 1000]);
      dy.push(len / (r.outputTokens - 1));
      dsteps.push(r.outputTokens - 1);
    });
  }
  if (px.length < 8) {
    throw new FitError(
      `only ${px.length} requests ran alone on an idle rank (at least 8 are needed to fit prefill and overhead); record a run of the fit-probe scenario with gaps longer than a request takes`,
    );
  }
  if (dx.length < 4) {
    throw new FitError(
      `only ${dx.length} requests decoded without a prefill alongside (at least 4 are needed to fit decode); record a run of the fit-probe scenario`,
    );
  }
  const pb = quantileFit(px, py, PREFILL_QUANTILE);
  // A window's noise (its first and last token's lateness) does not grow with its length, so
  // a mean step's noise shrinks with the steps it averages. Relative weighting instead (1/y)
  // let one window whose first token came very late, and so looked almost empty, pull every
  // decode term to 0 in a recording under heavy load.
  const db = quantileFit(
    dx,
    dy,
    DECODE_QUANTILE,
    dsteps.map((n) => 1 / n),
  );
  // Errors over every usable row, outliers included: what the profile gets wrong.
  const pe = errors(px, py, pb);
  const de = errors(dx, dy, db);
  const r6 = (v: number) => Number(v.toPrecision(6));
  const spec: CostProfileSpec = {
    format: 'kvroute-cost-profile/v1',
    name: o.name ?? 'fitted',
    description: `fitted by kvroute-sim fit to ${px.length} lone prefills (median error ${(pe.median * 100).toFixed(1)}%) and ${dx.length} decode windows (median error ${(de.median * 100).toFixed(1)}%)`,
    ...(o.source !== undefined ? { source: o.source } : {}),
    prefill: {
      floorMs: r6(pb[1]!),
      perTokenMs: r6(pb[2]!),
      attnMsPerMTokenPairs: r6(pb[3]!),
      perKCachedTokenMs: r6(pb[4]!),
    },
    decode: { floorMs: r6(db[0]!), perSeqMs: r6(db[1]!), perKContextTokenMs: r6(db[2]!) },
    overheadMs: r6(pb[0]!),
    kvCapacityTokens: o.kvCapacityTokens,
    chunkedPrefillSize: o.chunkedPrefillSize,
  };
  return {
    spec,
    prefill: {
      rows: px.length,
      excluded: prefillExcluded,
      medianAbsRelError: pe.median,
      maxAbsRelError: pe.max,
    },
    decode: {
      rows: dx.length,
      excluded: decodeExcluded,
      medianAbsRelError: de.median,
      maxAbsRelError: de.max,
    },
  };
}
