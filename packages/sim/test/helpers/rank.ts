// Shared fixtures of the rank-model tests: a cost profile with round numbers (so expected
// times can be computed by hand) and token ids that never share a prefix by accident.
import { costModelFromSpec } from '../../src/cost/cost-model.ts';

export const unitProfile = costModelFromSpec({
  format: 'kvroute-cost-profile/v1',
  name: 'unit',
  description: '',
  prefill: { floorMs: 10, perTokenMs: 0.01, attnMsPerMTokenPairs: 0 },
  decode: { floorMs: 5, perSeqMs: 1, perKContextTokenMs: 0 },
  kvCapacityTokens: 10_000,
  chunkedPrefillSize: 1000,
});

/** Token ids from, from + 1, ..., n of them. */
export const ids = (from: number, n: number) => Uint32Array.from({ length: n }, (_, i) => from + i);
