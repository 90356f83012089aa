// Adds up vitest JSON reports and pytest JUnit XML files in one folder into the single
// plain line CI reads: "N passed, N failed". Exits 1 when anything failed or nothing ran.
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';

const dir = process.argv[2];
if (!dir) {
  console.error('usage: node .ci/sum-results.mjs REPORT_DIR');
  process.exit(2);
}
let passed = 0;
let failed = 0;
let skipped = 0;
for (const file of readdirSync(dir).sort()) {
  const text = readFileSync(join(dir, file), 'utf8');
  if (file.endsWith('.json')) {
    const r = JSON.parse(text);
    passed += r.numPassedTests ?? 0;
    failed += (r.numFailedTests ?? 0) + (r.success === false && !r.numFailedTests ? 1 : 0);
    skipped += (r.numPendingTests ?? 0) + (r.numTodoTests ?? 0);
  } else if (file.endsWith('.xml')) {
    for (const m of text.matchAll(/<testsuite\b([^>]*)>/g)) {
      const attr = (name) => Number(new RegExp(`\\b${name}="(\\d+)"`).exec(m[1] ?? '')?.[1] ?? 0);
      const total = attr('tests');
      const f = attr('failures') + attr('errors');
      const s = attr('skipped');
      passed += total - f - s;
      failed += f;
      skipped += s;
    }
  }
}
console.log(`${passed} passed, ${failed} failed${skipped ? `, ${skipped} skipped` : ''}`);
process.exit(failed > 0 || passed === 0 ? 1 : 0);
