// Text of `kvroute-sim replay --observed`: the validate-style comparison table, then rank
// agreement and what was left out of which row.
import type { ObservedReplayResult } from '../replay-observed.ts';
import { renderComparison } from './observed-comparison.ts';

export function renderObservedReplay(
  r: ObservedReplayResult,
  head: { trace: string; profile: string },
): string {
  const lines = [
    `predicted vs observed: ${head.trace}, ${r.compared.requests} requests${r.compared.failedLive > 0 ? ` that succeeded live (${r.compared.failedLive} failed or abandoned left out)` : ''}, ${r.ranks} ranks, profile ${head.profile}`,
    `setting replayed: ${r.policyLabel}`,
    '',
    renderComparison(r.comparison, 'replay').trimEnd(),
    '',
  ];
  const a = r.rankAgreement;
  lines.push(
    a.compared > 0
      ? `rank agreement: ${a.same} of ${a.compared} requests (${((a.same / a.compared) * 100).toFixed(1)}%) predicted on the rank the router chose`
      : 'rank agreement: the trace records no ranks',
  );
  lines.push(
    `compared: hit rate on ${r.compared.hitRate} requests, TTFT on ${r.compared.ttft} of ${r.compared.requests}`,
  );
  for (const n of r.notes) lines.push(`note: ${n}`);
  return `${lines.join('\n')}\n`;
}
