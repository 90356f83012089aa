// Written by scripts/fit-cost-model.ts from data/calibration/h200-prefill.jsonl; do not edit.
// Errors are the fit's median and max absolute relative error over that shape's points.
import type { PrefillCoefficients } from './cost-model.ts';

export interface FittedPrefill extends PrefillCoefficients {
  medianAbsRelError: number;
  maxAbsRelError: number;
}

export const H200_PREFILL_FIT: Readonly<Record<string, FittedPrefill>> = {
  'llama-3.2-1b': {
    launchFloorMs: 13.8179,
    floorMs: 4.27443,
    perTokenMs: 0.00422155,
    attnMsPerMTokenPairs: 0.160685,
    perKCachedTokenMs: 0.589931,
    medianAbsRelError: 0.094054,
    maxAbsRelError: 0.601604,
  },
  'llama-3.1-8b': {
    launchFloorMs: 22.4298,
    floorMs: 3.75835,
    perTokenMs: 0.0265317,
    attnMsPerMTokenPairs: 0.589113,
    perKCachedTokenMs: 1.97111,
    medianAbsRelError: 0.0640473,
    maxAbsRelError: 0.479832,
  },
  'qwen2.5-32b': {
    launchFloorMs: 53.0723,
    floorMs: 13.6108,
    perTokenMs: 0.105328,
    attnMsPerMTokenPairs: 2.75825,
    perKCachedTokenMs: 3.85225,
    medianAbsRelError: 0.0929242,
    maxAbsRelError: 0.403179,
  },
};
