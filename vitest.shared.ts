// Shared vitest settings. When KVROUTE_TEST_REPORT_DIR is set (CI does), each package
// also writes a JSON report there, which .ci/sum-results.mjs adds up into one
// "N passed, N failed" line across packages.
import { basename, join } from 'node:path';
import { defaultServerConditions } from 'vite';
import { defineConfig } from 'vitest/config';

// Workspace packages export their TypeScript source under this condition (and compiled
// dist/ otherwise), so tests run the code being edited without a build step.
export const SOURCE_CONDITION = '@kvroute/source';
const conditions = [SOURCE_CONDITION, ...defaultServerConditions];

export function packageConfig(dir: string, overrides: { testTimeout?: number } = {}) {
  const reportDir = process.env.KVROUTE_TEST_REPORT_DIR;
  const name = basename(dir);
  return defineConfig({
    resolve: { conditions },
    ssr: { resolve: { conditions } },
    test: {
      include: ['test/**/*.test.ts'],
      // Generous: some tests start servers or CLI processes, and a shared CI machine can be
      // slow; a hung test still fails, only later.
      testTimeout: overrides.testTimeout ?? 60_000,
      // Setup hooks load tokenizers and start worker fleets: the same slack as the tests
      // (vitest's 10 s default failed a tokenizer load on a busy machine).
      hookTimeout: overrides.testTimeout ?? 60_000,
      reporters: reportDir ? ['default', 'json'] : ['default'],
      outputFile: reportDir ? { json: join(reportDir, `vitest-${name}.json`) } : undefined,
    },
  });
}
