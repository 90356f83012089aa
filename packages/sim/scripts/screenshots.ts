// Writes every kind of HTML report the simulator produces and screenshots each with headless
// Chromium, so a person can look at the pictures before calling a report done:
//   run (small and > 1,000 requests, with a rank failure, with a policy switch), replay, sweep,
//   and the policy comparison in docs/. PNGs and HTML go to --out DIR (default:
//   <repo>/screenshots). --only NAME[,NAME] makes just those.
//   pnpm screenshots [-- --out DIR] [--chromium PATH] [--only run-policy-switch]
import { spawnSync } from 'node:child_process';
import { existsSync, mkdirSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { runCli } from '../src/cli/main.ts';
import { repoRoot } from '../src/cost/calibration.ts';
import { COMPARISON_PAGE, screenshotReports, selectScreenshots } from './screenshot-pages.ts';

const args = process.argv.slice(2).filter((a) => a !== '--');
const flag = (name: string) => {
  const i = args.indexOf(`--${name}`);
  return i >= 0 ? args[i + 1] : undefined;
};
const root = repoRoot();
// Checked before anything else runs: a misspelt page would otherwise make nothing and exit 0.
let only: string[] | undefined;
try {
  only = selectScreenshots(args.includes('--only') ? (flag('only') ?? '') : undefined, root);
} catch (err) {
  console.error(`screenshots: ${(err as Error).message}`);
  process.exit(2);
}
const out = resolve(
  process.env.INIT_CWD ?? process.cwd(),
  flag('out') ?? join(root, 'screenshots'),
);
const browser =
  flag('chromium') ??
  ['/usr/bin/chromium', '/usr/bin/chromium-browser', '/usr/bin/google-chrome'].find(existsSync);
if (!browser) {
  console.error(
    "screenshots: no Chromium found; install Debian's chromium or pass --chromium PATH",
  );
  process.exit(2);
}
mkdirSync(out, { recursive: true });

const io = {
  stdout: { write: () => true },
  stderr: { write: (s: string) => process.stderr.write(s) },
  cwd: out,
};
const reports = screenshotReports(root);
const pages: [string, string][] = [];
for (const [name, argv] of reports) {
  if (only && !only.includes(name)) continue;
  const html = join(out, `${name}.html`);
  const code = await runCli([...argv, '--html', html], io);
  if (code !== 0) process.exit(code);
  pages.push([name, html]);
}
const comparison = join(root, 'docs/policy-comparison.html');
if (existsSync(comparison) && (!only || only.includes(COMPARISON_PAGE)))
  pages.push(['policy-comparison', comparison]);

for (const [name, html] of pages) {
  const png = join(out, `${name}.png`);
  const r = spawnSync(
    browser,
    [
      '--headless',
      '--no-sandbox',
      '--disable-gpu',
      '--hide-scrollbars',
      '--window-size=1600,4000',
      `--screenshot=${png}`,
      `file://${html}`,
    ],
    { encoding: 'utf8', timeout: 120_000 },
  );
  if (r.status !== 0 || !existsSync(png)) {
    console.error(`screenshots: chromium failed on ${html}:\n${r.stderr}`);
    process.exit(1);
  }
  console.log(`${png}`);
}
