// The one place the mock worker prices a prefill-to-decode KV transfer. The formula is the
// simulator's (bytes of every prompt token, cached prefix included, over the link's usable
// bandwidth, plus a fixed setup per transfer), so the mock PD workers and the simulator's PD
// layout charge a transfer identically:
//   ms = setupMs + promptTokens x kvBytesPerToken x 8 / (gbps x 1e9) x 1e3
// KV bytes per token come from the cost profile's memory model.

import type { CostModel } from '@kvroute/sim/model';

/** A 400 Gb/s RDMA NIC (ConnectX-7 class), the usual per-GPU link in PD deployments. */
export const DEFAULT_KV_LINK_GBPS = 400;
/** Fixed cost per transfer (bootstrap handshake, completion poll): an assumption, ~1 ms. */
export const DEFAULT_KV_SETUP_MS = 1;

export interface KvLink {
  gbps: number;
  setupMs?: number;
}

export function kvTransferMs(tokens: number, bytesPerToken: number, link: KvLink): number {
  if (!Number.isFinite(tokens) || tokens < 0) {
    throw new RangeError(`kv transfer: tokens must be a finite number >= 0, got ${tokens}`);
  }
  if (!Number.isFinite(bytesPerToken) || !(bytesPerToken > 0)) {
    throw new RangeError(`kv transfer: KV bytes per token must be > 0, got ${bytesPerToken}`);
  }
  if (!Number.isFinite(link.gbps) || !(link.gbps > 0)) {
    throw new RangeError(`kv transfer: link gbps must be a finite number > 0, got ${link.gbps}`);
  }
  const setupMs = link.setupMs ?? DEFAULT_KV_SETUP_MS;
  return setupMs + ((tokens * bytesPerToken * 8) / (link.gbps * 1e9)) * 1e3;
}

export function profileKvBytesPerToken(profile: Pick<CostModel, 'name' | 'memory'>): number {
  const bytes = profile.memory?.kvBytesPerToken;
  if (bytes === undefined) {
    throw new RangeError(
      `profile '${profile.name}' has no memory model (KV bytes per token), so a KV transfer cannot be priced: add 'memory' to the profile`,
    );
  }
  return bytes;
}
