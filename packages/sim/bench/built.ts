// The compiled package (dist/), built first when missing or older than src/: the benches that
// measure what users run (the kvroute-sim bin runs dist/ with plain node) start from it.
import { spawnSync } from 'node:child_process';
import { existsSync, readdirSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

/** The package's root directory. */
export const packageRoot = fileURLToPath(new URL('..', import.meta.url));

/** Newest modification time under a directory (recursively). */
function newest(dir: string): number {
  let t = 0;
  for (const e of readdirSync(dir, { withFileTypes: true })) {
    const p = join(dir, e.name);
    t = Math.max(t, e.isDirectory() ? newest(p) : statSync(p).mtimeMs);
  }
  return t;
}

/** Builds dist/ unless it is newer than every source file; exits on a failed build. */
export function ensureBuilt(): void {
  const cli = join(packageRoot, 'dist', 'cli.js');
  if (existsSync(cli) && statSync(cli).mtimeMs >= newest(join(packageRoot, 'src'))) return;
  console.log('building dist/ (older than src/) ...');
  const b = spawnSync('pnpm', ['run', 'build'], { cwd: packageRoot, stdio: 'inherit' });
  if (b.status !== 0) process.exit(b.status ?? 1);
}
