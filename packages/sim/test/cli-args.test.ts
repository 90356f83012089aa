import { describe, expect, it } from 'vitest';
import {
  checkName,
  nameList,
  parseAssignments,
  parseCommandArgs,
  parseSeed,
  parseValue,
  positiveInt,
  positiveIntList,
  positiveNumber,
} from '../src/cli/args.ts';
import { UsageError } from '../src/cli/errors.ts';
import { checkTargets } from '../src/cli/outputs.ts';
import { parseAffinityFlag, parsePolicies, parsePolicy } from '../src/cli/policies.ts';
import { createProgress } from '../src/cli/progress.ts';

function usageMessage(fn: () => unknown): string {
  try {
    fn();
  } catch (err) {
    expect(err).toBeInstanceOf(UsageError);
    expect((err as UsageError).exitCode).toBe(2);
    return (err as Error).message;
  }
  throw new Error('expected a UsageError');
}

describe('number flags', () => {
  it('accepts positive integers and rejects zero, negatives, fractions and words', () => {
    expect(positiveInt('ranks', '16')).toBe(16);
    expect(usageMessage(() => positiveInt('ranks', '0'))).toBe(
      "--ranks must be a positive integer, got '0'",
    );
    expect(usageMessage(() => positiveInt('window', '-64'))).toBe(
      "--window must be a positive integer, got '-64'",
    );
    expect(usageMessage(() => positiveInt('ranks', '2.5'))).toContain('positive integer');
    expect(usageMessage(() => positiveInt('ranks', 'sixteen'))).toBe(
      "--ranks must be a number, got 'sixteen'",
    );
    expect(usageMessage(() => positiveInt('ranks', ''))).toContain('must be a number');
  });

  it('parses lists, dropping duplicates, and names the bad entry', () => {
    expect(positiveIntList('window', '64,128, 256,64')).toEqual([64, 128, 256]);
    expect(usageMessage(() => positiveIntList('window', '64,,128'))).toContain('comma-separated');
    expect(usageMessage(() => positiveIntList('window', '64,-1'))).toBe(
      "--window must be a positive integer, got '-1'",
    );
  });

  it('accepts positive reals for the speed-up', () => {
    expect(positiveNumber('speedup', '0.5')).toBe(0.5);
    expect(usageMessage(() => positiveNumber('speedup', '0'))).toContain('positive number');
    expect(usageMessage(() => positiveNumber('speedup', 'Infinity'))).toContain('must be a number');
  });
});

describe('names and assignments', () => {
  it('lists the valid names when one is unknown', () => {
    expect(checkName('scenario', 'a', ['a', 'b'])).toBe('a');
    expect(usageMessage(() => checkName('scenario', 'c', ['a', 'b']))).toBe(
      "unknown scenario 'c'; valid scenarios: a, b",
    );
    expect(usageMessage(() => nameList('policies', 'a,,b'))).toContain(
      'comma-separated list of names',
    );
  });

  it('types --set values and rejects malformed ones', () => {
    expect(
      parseAssignments('set', ['requests=30', 'accumulate=true', 'name=x=y', 'f=0.5', 'neg=-2']),
    ).toEqual({
      requests: 30,
      accumulate: true,
      name: 'x=y',
      f: 0.5,
      neg: -2,
    });
    expect(parseValue('1e3')).toBe(1000);
    expect(parseValue('12abc')).toBe('12abc');
    expect(usageMessage(() => parseAssignments('set', ['noequals']))).toBe(
      "--set expects KEY=VALUE, got 'noequals'",
    );
    expect(usageMessage(() => parseAssignments('set', ['__proto__=1']))).toContain('invalid key');
    // One strict numeral grammar: hex and Infinity stay strings, never numbers.
    expect(parseValue('0x10')).toBe('0x10');
    expect(parseValue('Infinity')).toBe('Infinity');
  });

  it('keeps integer-looking seeds as numbers and others as strings', () => {
    expect(parseSeed(undefined, 1)).toBe(1);
    expect(parseSeed('42', 1)).toBe(42);
    expect(parseSeed('abc', 1)).toBe('abc');
    expect(parseSeed('99999999999999999999', 1)).toBe('99999999999999999999');
  });

  it('turns parseArgs failures into usage errors naming the flag', () => {
    expect(usageMessage(() => parseCommandArgs('run', ['--bogus'], {}))).toContain("'--bogus'");
    expect(usageMessage(() => parseCommandArgs('run', ['extra'], {}))).toContain("'extra'");
    const p = parseCommandArgs(
      'run',
      ['--set', 'a=1', '--set', 'b=2', 'file'],
      { set: { type: 'string', multiple: true } },
      true,
    );
    expect(p.values.set).toEqual(['a=1', 'b=2']);
    expect(p.positionals).toEqual(['file']);
  });
});

describe('policies', () => {
  it('builds dispatcher configs with shared flags and per-policy options', () => {
    const [rr, pm] = parsePolicies(['round_robin', 'prefix_match:window=128:prefixLength=2048'], {
      window: 64,
      affinity: 'routing_key',
    });
    expect(rr!.config).toEqual({
      method: 'round_robin',
      window: 64,
      affinity: { kind: 'routing_key' },
    });
    // round_robin reads no window, so the report does not claim one.
    expect(rr!.reportOptions).toEqual({ affinity: { kind: 'routing_key' } });
    expect(pm!.config).toEqual({
      method: 'prefix_match',
      window: 64,
      affinity: { kind: 'routing_key' },
      options: { window: 128, prefixLength: 2048 },
    });
    expect(pm!.reportOptions).toEqual({
      window: 128,
      prefixLength: 2048,
      affinity: { kind: 'routing_key' },
    });
  });

  it('reads affinity table options from --affinity KIND:key=value and passes them to every policy', () => {
    expect(parseAffinityFlag(undefined)).toEqual({});
    expect(parseAffinityFlag('none')).toEqual({ affinity: 'none' });
    const flags = parseAffinityFlag('routing_key:maxEntries=1000:ttlMs=0');
    expect(flags).toEqual({
      affinity: 'routing_key',
      affinityOptions: { maxEntries: 1000, ttlMs: 0 },
    });
    const [pm] = parsePolicies(['prefix_match'], flags);
    expect(pm!.config.affinity).toEqual({ kind: 'routing_key', maxEntries: 1000, ttlMs: 0 });
    expect(pm!.reportOptions).toEqual({
      affinity: { kind: 'routing_key', maxEntries: 1000, ttlMs: 0 },
    });
    expect(usageMessage(() => parseAffinityFlag('sticky:maxEntries=1'))).toMatch(
      /unknown affinity kind 'sticky'/,
    );
    expect(usageMessage(() => parseAffinityFlag('none:maxEntries=1'))).toContain('no options');
    expect(usageMessage(() => parseAffinityFlag('routing_key:'))).toContain('empty option');
  });

  it('rejects unknown policies with the valid names', () => {
    const msg = usageMessage(() => parsePolicy('fastest', {}));
    expect(msg).toMatch(/^unknown policy 'fastest'; valid policies: round_robin, .*prefix_match/);
    expect(usageMessage(() => parsePolicy('prefix_match:', {}))).toContain('empty option');
    expect(usageMessage(() => parsePolicies([], {}))).toContain('at least one');
    expect(
      usageMessage(() => parsePolicies(['round_robin', 'prefix_match', 'round_robin'], {})),
    ).toBe("--policies lists 'round_robin' twice");
  });
});

describe('output targets', () => {
  it('allows only one stdout target', () => {
    expect(() => checkTargets({ json: '-', html: 'r.html' })).not.toThrow();
    expect(usageMessage(() => checkTargets({ json: '-', csv: '-' }))).toContain(
      'only one of --json, --csv, --html',
    );
    expect(usageMessage(() => checkTargets({ html: ' ' }))).toContain('--html needs a file name');
  });
});

describe('progress bar', () => {
  function fakeErr(isTTY: boolean) {
    const chunks: string[] = [];
    let t = 0;
    return {
      io: {
        stdout: { write: () => true },
        stderr: { isTTY, columns: 80, write: (s: string) => chunks.push(s) },
        cwd: '/',
        now: () => t,
      },
      chunks,
      advance: (ms: number) => {
        t += ms;
      },
    };
  }

  it('stays silent for the first second and when stderr is not a terminal', () => {
    const tty = fakeErr(true);
    const bar = createProgress(tty.io);
    tty.advance(500);
    bar.update(0.5, 'x');
    expect(tty.chunks).toEqual([]);
    tty.advance(600);
    bar.update(0.5, 'round_robin 1/3');
    expect(tty.chunks).toHaveLength(1);
    expect(tty.chunks[0]).toContain(' 50% round_robin 1/3');
    // Redraws are throttled.
    bar.update(0.6, 'x');
    expect(tty.chunks).toHaveLength(1);
    bar.done();
    expect(tty.chunks.at(-1)).toBe('\r\x1b[K');

    // A pty that reports 0 columns still gets the whole line.
    const zero = fakeErr(true);
    zero.io.stderr.columns = 0;
    const z = createProgress(zero.io);
    zero.advance(2000);
    z.update(0.25, 'prefix_match (2/3)');
    expect(zero.chunks[0]).toContain(' 25% prefix_match (2/3)');

    const pipe = fakeErr(false);
    const quiet = createProgress(pipe.io);
    pipe.advance(5000);
    quiet.update(0.9, 'x');
    quiet.done();
    expect(pipe.chunks).toEqual([]);
  });
});
