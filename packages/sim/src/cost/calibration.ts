// Reading the H200 prefill calibration and scoring a cost model against it. Shared by the
// fit script (which chooses the coefficients) and the test (which checks the committed ones).
import { existsSync, readFileSync } from 'node:fs';
import { dirname, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { PrefillCoefficients } from './cost-model.ts';
import { costModelFromSpec } from './cost-model.ts';

export interface CalibrationPoint {
  shape: string;
  kind: 'cold' | 'cached';
  newTokens: number;
  cachedTokens: number;
  medianMs: number;
}

/** The monorepo root (this file is packages/sim/src/cost/calibration.ts). */
export function repoRoot(): string {
  return resolve(dirname(fileURLToPath(import.meta.url)), '../../../..');
}

/**
 * Copies of the shared material committed in this package (packages/sim/data), found from
 * this file so the same path holds for src/ in the workspace and dist/ in an installed package.
 */
export function vendoredDataDir(): string {
  return resolve(dirname(fileURLToPath(import.meta.url)), '../../data');
}

/**
 * A data file: `$KVROUTE_SHARED_DIR` when set and holding the file (to fit or replay another
 * copy of the material), else the copy committed in this package, so nothing outside the
 * repository is ever read by default.
 */
export function sharedFile(relative: string): string {
  const roots = [process.env.KVROUTE_SHARED_DIR, vendoredDataDir()];
  for (const root of roots) {
    if (root && existsSync(resolve(root, relative))) return resolve(root, relative);
  }
  return resolve(vendoredDataDir(), relative);
}

export function defaultCalibrationPath(): string {
  return sharedFile('calibration/h200-prefill.jsonl');
}

export function readCalibration(path = defaultCalibrationPath()): CalibrationPoint[] {
  const points: CalibrationPoint[] = [];
  const lines = readFileSync(path, 'utf8').split('\n');
  for (const [i, line] of lines.entries()) {
    if (line.trim() === '') continue;
    let row: Record<string, unknown>;
    try {
      row = JSON.parse(line) as Record<string, unknown>;
    } catch {
      throw new Error(`${path}:${i + 1}: invalid JSON`);
    }
    if (row.kind !== 'cold' && row.kind !== 'cached') continue;
    points.push({
      shape: String(row.shape),
      kind: row.kind,
      newTokens: Number(row.new),
      cachedTokens: Number(row.cached),
      medianMs: Number(row.median_ms),
    });
  }
  return points;
}

export interface FitError {
  shape: string;
  points: number;
  medianAbsRelError: number;
  maxAbsRelError: number;
}

export function prefillErrors(points: readonly CalibrationPoint[], coef: PrefillCoefficients) {
  const model = costModelFromSpec({
    format: 'kvroute-cost-profile/v1',
    name: 'fit',
    description: '',
    prefill: coef,
    decode: { floorMs: 1, perSeqMs: 0, perKContextTokenMs: 0 },
    kvCapacityTokens: 1,
    chunkedPrefillSize: 1,
  });
  return points.map(
    (p) => Math.abs(model.prefillMs(p.newTokens, p.cachedTokens) - p.medianMs) / p.medianMs,
  );
}

export function median(values: readonly number[]): number {
  const s = [...values].sort((a, b) => a - b);
  const mid = s.length >> 1;
  if (s.length === 0) return Number.NaN;
  return s.length % 2 === 1 ? s[mid]! : (s[mid - 1]! + s[mid]!) / 2;
}

export function summarizeErrors(
  shape: string,
  points: readonly CalibrationPoint[],
  coef: PrefillCoefficients,
): FitError {
  const errs = prefillErrors(points, coef);
  return {
    shape,
    points: points.length,
    medianAbsRelError: median(errs),
    maxAbsRelError: Math.max(...errs),
  };
}
