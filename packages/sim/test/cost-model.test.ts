import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { readCalibration, summarizeErrors } from '../src/cost/calibration.ts';
import { loadProfileFile, parseProfileSpec } from '../src/cost/cost-model.ts';
import { H200_PREFILL_FIT } from '../src/cost/h200-fit.ts';
import { getProfile, getProfileSpec, profileNames } from '../src/cost/profiles.ts';

describe('fitted H200 profiles', () => {
  const points = readCalibration();
  for (const shape of ['llama-3.2-1b', 'llama-3.1-8b', 'qwen2.5-32b']) {
    it(`h200-${shape} predicts the calibration with median abs relative error <= 12%`, () => {
      const mine = points.filter((p) => p.shape === shape);
      expect(mine.length).toBeGreaterThanOrEqual(20);
      const prefill = getProfileSpec(`h200-${shape}`).prefill;
      const err = summarizeErrors(shape, mine, prefill);
      expect(err.medianAbsRelError).toBeLessThanOrEqual(0.12);
      // The committed report matches what the committed coefficients give.
      expect(err.medianAbsRelError).toBeCloseTo(H200_PREFILL_FIT[shape]!.medianAbsRelError, 4);
    });
  }

  it('prefill grows with new tokens and with the cached prefix; decode with batch and context', () => {
    const m = getProfile('h200-llama-3.1-8b');
    expect(m.prefillMs(8192, 0)).toBeGreaterThan(m.prefillMs(4096, 0));
    expect(m.prefillMs(1024, 30000)).toBeGreaterThan(m.prefillMs(1024, 0));
    expect(m.decodeStepMs(64, 100_000)).toBeGreaterThan(m.decodeStepMs(1, 1000));
    expect(m.kvCapacityTokens).toBeGreaterThan(500_000);
    expect(m.chunkedPrefillSize).toBe(8192);
  });
});

describe('seed-qwen3-moe-dp16', () => {
  it('takes 7.4 s for a cold 22,651-token prefill in 8192-token chunks and 1.29 s for a hit', () => {
    const m = getProfile('seed-qwen3-moe-dp16');
    const cold = m.prefillMs(8192, 0) + m.prefillMs(8192, 8192) + m.prefillMs(6267, 16384);
    expect(cold).toBeCloseTo(7400, 6);
    expect(m.prefillMs(64, 22651)).toBeCloseTo(1290, 6);
  });
});

describe('profile lookup and files', () => {
  it('lists the built-in profiles and names them in the error for an unknown one', () => {
    expect(profileNames()).toEqual([
      'h200-llama-3.2-1b',
      'h200-llama-3.1-8b',
      'h200-qwen2.5-32b',
      'seed-qwen3-moe-dp16',
    ]);
    expect(() => getProfile('h100')).toThrow(/unknown profile 'h100'.*seed-qwen3-moe-dp16/);
  });

  it('loads a kvroute-cost-profile/v1 file with the spec formula', () => {
    const dir = mkdtempSync(join(tmpdir(), 'kvroute-profile-'));
    const file = join(dir, 'p.json');
    writeFileSync(
      file,
      JSON.stringify({
        format: 'kvroute-cost-profile/v1',
        name: 'gpu-worker-llama-3.2-1b-h200',
        description: 'x',
        source: 'test',
        prefill: { floorMs: 10, perTokenMs: 0.01, attnMsPerMTokenPairs: 0.5 },
        decode: { floorMs: 8, perSeqMs: 0.05, perKContextTokenMs: 0.001 },
        kvCapacityTokens: 500000,
        chunkedPrefillSize: 8192,
      }),
    );
    const m = loadProfileFile(file);
    expect(m.name).toBe('gpu-worker-llama-3.2-1b-h200');
    expect(m.prefillMs(1000, 1000)).toBeCloseTo(10 + 10 + (0.5 * 1000 * 2000) / 1e6, 9);
    expect(m.decodeStepMs(4, 10_000)).toBeCloseTo(8 + 0.2 + 0.01, 9);
    const bad = join(dir, 'bad.json');
    writeFileSync(
      bad,
      JSON.stringify({ format: 'kvroute-cost-profile/v1', name: 'x', prefill: {}, decode: {} }),
    );
    expect(() => loadProfileFile(bad)).toThrow(/bad\.json.*kvCapacityTokens/);
    writeFileSync(bad, '{');
    expect(() => loadProfileFile(bad)).toThrow(/invalid JSON/);
    expect(() => loadProfileFile(join(dir, 'missing.json'))).toThrow(/cannot read/);
    const dp = join(dir, 'dp.json');
    writeFileSync(dp, JSON.stringify(getProfileSpec('seed-qwen3-moe-dp16')));
    expect(loadProfileFile(dp).dpAttention).toBe(true);
    expect(getProfile('h200-llama-3.1-8b').dpAttention).toBe(false);
  });

  it('refuses a negative or non-finite time coefficient, naming the term', () => {
    // Every built-in profile is valid as a file (its memory model included).
    for (const name of profileNames()) {
      expect(() => parseProfileSpec(getProfileSpec(name), name)).not.toThrow();
    }
    const base = getProfileSpec('h200-llama-3.1-8b');
    const terms: [string, string][] = [
      ['prefill', 'floorMs'],
      ['prefill', 'perTokenMs'],
      ['prefill', 'attnMsPerMTokenPairs'],
      ['prefill', 'launchFloorMs'],
      ['prefill', 'perKCachedTokenMs'],
      ['decode', 'floorMs'],
      ['decode', 'perSeqMs'],
      ['decode', 'perKContextTokenMs'],
      ['memory', 'weightBytes'],
    ];
    for (const [part, field] of terms) {
      const spec = structuredClone(base) as unknown as Record<string, Record<string, unknown>>;
      spec[part]![field] = -1;
      expect(() => parseProfileSpec(spec, 'p.json'), `${part}.${field}`).toThrow(
        `cost profile p.json ${part}: ${field} must be a finite number >= 0, got -1`,
      );
    }
    // 1e400 in a file parses as Infinity: said so, not shown as null.
    const huge = JSON.parse('{"floorMs": 1, "perTokenMs": 1e400, "attnMsPerMTokenPairs": 0}');
    expect(() => parseProfileSpec({ ...base, prefill: huge }, 'p.json')).toThrow(
      'cost profile p.json prefill: perTokenMs must be a finite number, got Infinity (out of range)',
    );
    expect(() => parseProfileSpec({ ...base, overheadMs: -0.5 }, 'p.json')).toThrow(
      'cost profile p.json: overheadMs must be a finite number >= 0, got -0.5',
    );
  });

  it('refuses a chunked prefill size below the minimum the --chunked-prefill-size flags take', () => {
    const base = getProfileSpec('seed-qwen3-moe-dp16');
    // A chunk of 1 would run a step per token: the run would take minutes, not fail.
    for (const chunk of [1, 63, 100.5]) {
      expect(() => parseProfileSpec({ ...base, chunkedPrefillSize: chunk }, 'p.json')).toThrow(
        `cost profile p.json: chunkedPrefillSize must be an integer >= 64 (a step prefills at most that many tokens; engines' defaults are 2048 or more), got ${chunk}`,
      );
    }
    expect(parseProfileSpec({ ...base, chunkedPrefillSize: 64 }, 'p.json').chunkedPrefillSize).toBe(
      64,
    );
  });
});
