// `pnpm screenshots --only NAME`: the page names are checked before any report or browser
// runs, so a misspelt name fails instead of making nothing and exiting 0.
import { describe, expect, it } from 'vitest';
import {
  COMPARISON_PAGE,
  screenshotNames,
  screenshotReports,
  selectScreenshots,
} from '../scripts/screenshot-pages.ts';
import { repoRoot } from '../src/cost/calibration.ts';

const root = repoRoot();

describe('screenshots --only', () => {
  it('takes every page name, alone or listed, and all pages without --only', () => {
    const names = screenshotNames(root);
    expect(names).toEqual([...screenshotReports(root).map(([n]) => n), COMPARISON_PAGE]);
    expect(names).toContain('run-policy-switch');
    expect(selectScreenshots(undefined, root)).toBeUndefined();
    expect(selectScreenshots('run-policy-switch', root)).toEqual(['run-policy-switch']);
    expect(selectScreenshots(' sweep-agentic, policy-comparison ', root)).toEqual([
      'sweep-agentic',
      'policy-comparison',
    ]);
  });

  it('refuses unknown names, listing the valid ones', () => {
    const valid = screenshotNames(root).join(', ');
    expect(() => selectScreenshots('run-seed-sequential,sweep', root)).toThrow(
      `--only: unknown page 'sweep'; valid pages: ${valid}`,
    );
    expect(() => selectScreenshots('a,b', root)).toThrow(`unknown pages 'a', 'b'`);
    expect(() => selectScreenshots('', root)).toThrow(
      `--only names no page; valid pages: ${valid}`,
    );
  });
});
