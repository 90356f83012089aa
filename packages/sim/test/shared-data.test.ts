import { existsSync, readFileSync } from 'node:fs';
import { resolve } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { sharedDir, sharedFile, vendoredDataDir } from '../src/cost/calibration.ts';

const FILES = ['calibration/h200-prefill.jsonl', 'traces/mooncake-conversation.jsonl'];

describe('shared material', () => {
  const saved = process.env.KVROUTE_SHARED_DIR;
  afterEach(() => {
    if (saved === undefined) delete process.env.KVROUTE_SHARED_DIR;
    else process.env.KVROUTE_SHARED_DIR = saved;
  });

  it.each(FILES)('vendors %s byte for byte where the canonical copy exists', (rel) => {
    const vendored = readFileSync(resolve(vendoredDataDir(), rel));
    expect(vendored.length).toBeGreaterThan(1000);
    const canonical = resolve(sharedDir(), rel);
    if (existsSync(canonical)) expect(vendored.equals(readFileSync(canonical))).toBe(true);
  });

  it('prefers $KVROUTE_SHARED_DIR, then ../shared, then the vendored copy', () => {
    process.env.KVROUTE_SHARED_DIR = vendoredDataDir();
    expect(sharedFile(FILES[0]!)).toBe(resolve(vendoredDataDir(), FILES[0]!));
    process.env.KVROUTE_SHARED_DIR = '/nonexistent-kvroute-shared';
    const expected = existsSync(resolve(sharedDir(), FILES[0]!))
      ? resolve(sharedDir(), FILES[0]!)
      : resolve(vendoredDataDir(), FILES[0]!);
    expect(sharedFile(FILES[0]!)).toBe(expected);
  });
});
