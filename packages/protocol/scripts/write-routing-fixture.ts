// Usage: pnpm --filter @kvroute/protocol fixture
import { writeFileSync } from 'node:fs';
import { buildRoutingFixture, FIXTURE_PATH, serializeRoutingFixture } from './routing-fixture.ts';

writeFileSync(FIXTURE_PATH, serializeRoutingFixture());
console.log(`wrote ${buildRoutingFixture().cases.length} cases to ${FIXTURE_PATH}`);
