import { existsSync, mkdirSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { sharedFile, vendoredDataDir } from '../src/cost/calibration.ts';

const FILES = ['calibration/h200-prefill.jsonl', 'traces/mooncake-conversation.jsonl'];

describe('shared material', () => {
  const saved = process.env.KVROUTE_SHARED_DIR;
  afterEach(() => {
    if (saved === undefined) delete process.env.KVROUTE_SHARED_DIR;
    else process.env.KVROUTE_SHARED_DIR = saved;
  });

  it.each(FILES)('ships %s in the package', (rel) => {
    const vendored = readFileSync(resolve(vendoredDataDir(), rel));
    expect(vendored.length).toBeGreaterThan(1000);
  });

  it('reads $KVROUTE_SHARED_DIR when it holds the file, else only the packaged copy', () => {
    const alt = mkdtempSync(join(tmpdir(), 'kvroute-shared-'));
    mkdirSync(join(alt, 'calibration'));
    writeFileSync(join(alt, FILES[0]!), '{}\n');
    process.env.KVROUTE_SHARED_DIR = alt;
    expect(sharedFile(FILES[0]!)).toBe(resolve(alt, FILES[0]!));
    process.env.KVROUTE_SHARED_DIR = '/nonexistent-kvroute-shared';
    expect(sharedFile(FILES[0]!)).toBe(resolve(vendoredDataDir(), FILES[0]!));
    delete process.env.KVROUTE_SHARED_DIR;
    expect(sharedFile(FILES[1]!)).toBe(resolve(vendoredDataDir(), FILES[1]!));
    expect(existsSync(sharedFile(FILES[1]!))).toBe(true);
  });
});
