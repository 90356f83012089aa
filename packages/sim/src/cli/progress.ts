// A progress bar on stderr, drawn only when stderr is a terminal and only once the work has
// run for a second, so quick runs and piped output stay clean. Never writes to stdout.
import type { CliIo } from './command.ts';

export interface Progress {
  /** Overall fraction done (0..1) and what is running now. */
  update(fraction: number, detail: string): void;
  done(): void;
}

const SHOW_AFTER_MS = 1000;
const REDRAW_MS = 100;
const BAR = 28;

export function createProgress(io: CliIo): Progress {
  const now = io.now ?? Date.now;
  const enabled = io.stderr.isTTY === true;
  const start = now();
  let lastDraw = -Infinity;
  let drawn = false;
  return {
    update(fraction, detail) {
      if (!enabled) return;
      const t = now();
      if (t - start < SHOW_AFTER_MS || t - lastDraw < REDRAW_MS) return;
      lastDraw = t;
      const f = Math.min(1, Math.max(0, fraction));
      const filled = Math.round(f * BAR);
      const line = `[${'#'.repeat(filled)}${'.'.repeat(BAR - filled)}] ${(f * 100).toFixed(0).padStart(3)}% ${detail}`;
      // Some terminals (script, CI ptys) report 0 columns; assume a normal width then.
      const cols = (io.stderr.columns ?? 0) >= 40 ? io.stderr.columns! : 100;
      io.stderr.write(`\r\x1b[K${line.slice(0, Math.max(10, cols - 1))}`);
      drawn = true;
    },
    done() {
      if (drawn) io.stderr.write('\r\x1b[K');
      drawn = false;
    },
  };
}
