// The pages `pnpm screenshots` makes, by name, and the check of its --only list: apart from
// the script so a test can reach the check without a browser.
import { join } from 'node:path';

/** The comparison page in docs/, screenshot as it is (not rendered here). */
export const COMPARISON_PAGE = 'policy-comparison';

/** Each report rendered to HTML: its name and the kvroute-sim arguments that make it. */
export function screenshotReports(root: string): [string, string[]][] {
  return [
    [
      'run-seed-sequential',
      [
        'run',
        '--scenario',
        'seed-sequential',
        '--policies',
        'round_robin,total_tokens,prefix_match',
      ],
    ],
    [
      'run-rank-failure',
      [
        'run',
        '--scenario',
        'rank-failure',
        '--set',
        'sessions=150',
        '--policies',
        'round_robin,prefix_match,cache_aware',
      ],
    ],
    [
      'run-policy-switch',
      [
        'run',
        '--scenario',
        'rank-failure',
        '--set',
        'sessions=150',
        '--policies',
        'round_robin,cache_aware',
        '--switch-policy',
        '150s=prefix_match:window=64',
      ],
    ],
    [
      'replay-mooncake',
      [
        'replay',
        join(root, 'packages/sim/data/traces/mooncake-conversation.jsonl'),
        '--set',
        'limit=3000',
        '--speedup',
        '4',
        '--policies',
        'round_robin,prefix_match,cache_aware',
      ],
    ],
    ['sweep-agentic', ['sweep', '--scenario', 'agentic', '--set', 'sessions=60']],
    [
      'run-agentic-pd',
      [
        'run',
        '--scenario',
        'agentic',
        '--set',
        'sessions=60',
        '--ranks',
        '8',
        '--layout',
        'pd',
        '--prefill-ranks',
        '4',
        '--decode-ranks',
        '4',
      ],
    ],
  ];
}

/** Every name --only takes. */
export function screenshotNames(root: string): string[] {
  return [...screenshotReports(root).map(([name]) => name), COMPARISON_PAGE];
}

/**
 * The names an `--only` value selects (undefined: every page). An unknown name would otherwise
 * make nothing and exit 0, which reads as "pictures up to date".
 */
export function selectScreenshots(raw: string | undefined, root: string): string[] | undefined {
  if (raw === undefined) return undefined;
  const valid = screenshotNames(root);
  const names = raw
    .split(',')
    .map((n) => n.trim())
    .filter((n) => n !== '');
  if (names.length === 0) throw new Error(`--only names no page; valid pages: ${valid.join(', ')}`);
  const unknown = names.filter((n) => !valid.includes(n));
  if (unknown.length > 0) {
    const list = unknown.map((n) => `'${n}'`).join(', ');
    throw new Error(
      `--only: unknown page${unknown.length > 1 ? 's' : ''} ${list}; valid pages: ${valid.join(', ')}`,
    );
  }
  return names;
}
