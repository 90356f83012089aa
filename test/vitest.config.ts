import { defineConfig } from 'vitest/config';
import { packageConfig } from '../vitest.shared.ts';

const base = packageConfig(import.meta.dirname, { testTimeout: 60_000 });
export default defineConfig({
  ...base,
  test: { ...base.test, include: ['**/*.test.ts'], exclude: ['node_modules/**'] },
});
