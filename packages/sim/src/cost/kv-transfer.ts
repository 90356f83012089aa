// KV transfer between a prefill and a decode server (prefill/decode disaggregation).
//
// What moves: the KV of every prompt token, cached prefix included. SGLang's prefill server
// sends the request's whole KV page list (its send index starts at 0, so pages that were a
// radix-cache hit on the prefill side travel too), and vLLM's NIXL connector pulls every
// block of the prompt; the decode server keeps no prefix cache of its own in either. A
// cache hit therefore saves prefill compute, never transfer bytes.
//
//   bytes = promptTokens x kvBytesPerToken
//   ms    = setupMs + bytes x 8 / (linkGbps x 1e9) x 1e3
//
// `linkGbps` is the link's usable bandwidth in gigabits per second (an RDMA NIC is quoted
// that way: 400 Gb/s ConnectX-7, 200 Gb/s EFA per card); `setupMs` is the fixed cost per
// transfer (handshake, registering the page list, the completion poll). The simulator and
// the mock PD workers both call this one function, so they charge a transfer identically.
// Not modelled: SGLang sends the KV chunk by chunk while later chunks are still being
// prefilled, so part of a long prompt's transfer overlaps its prefill; charging the whole
// transfer after the prefill is an upper bound on what the client waits for.

import type { CostModel } from './cost-model.ts';
import { kvBytesPerToken, type ModelShape } from './memory.ts';

export interface KvLink {
  /** Usable link bandwidth, gigabits per second (> 0). */
  gbps: number;
  /** Fixed cost per transfer in ms (>= 0). Default DEFAULT_KV_SETUP_MS. */
  setupMs?: number;
}

/**
 * Per-transfer fixed cost when none is given: one bootstrap round trip plus the sender's
 * completion poll, about a millisecond on one rack's RDMA fabric (an assumption, not a
 * measurement; pass the measured value where there is one).
 */
export const DEFAULT_KV_SETUP_MS = 1;

/** A 400 Gb/s RDMA NIC (ConnectX-7 class), the usual per-GPU link in PD deployments. */
export const DEFAULT_KV_LINK_GBPS = 400;

/** Bytes a transfer of `tokens` prompt tokens moves (all of them, cached or not). */
export function kvTransferBytes(tokens: number, bytesPerToken: number): number {
  if (!Number.isFinite(tokens) || tokens < 0) {
    throw new RangeError(`kv transfer: tokens must be a finite number >= 0, got ${tokens}`);
  }
  if (!Number.isFinite(bytesPerToken) || !(bytesPerToken > 0)) {
    throw new RangeError(
      `kv transfer: KV bytes per token must be a finite number > 0, got ${bytesPerToken}`,
    );
  }
  return tokens * bytesPerToken;
}

/** Checks a link's fields; the error names the bad one. */
export function checkKvLink(link: KvLink): Required<KvLink> {
  if (!Number.isFinite(link.gbps) || !(link.gbps > 0)) {
    throw new RangeError(`kv transfer: link gbps must be a finite number > 0, got ${link.gbps}`);
  }
  const setupMs = link.setupMs ?? DEFAULT_KV_SETUP_MS;
  if (!Number.isFinite(setupMs) || setupMs < 0) {
    throw new RangeError(`kv transfer: setupMs must be a finite number >= 0, got ${setupMs}`);
  }
  return { gbps: link.gbps, setupMs };
}

/**
 * Time to move the KV of `tokens` prompt tokens over `link`: the fixed setup plus bytes over
 * bandwidth. `kv` is KV bytes per token, or the model shape they follow from.
 */
export function kvTransferMs(tokens: number, kv: number | ModelShape, link: KvLink): number {
  const perToken = typeof kv === 'number' ? kv : kvBytesPerToken(kv);
  const { gbps, setupMs } = checkKvLink(link);
  const bytes = kvTransferBytes(tokens, perToken);
  return setupMs + ((bytes * 8) / (gbps * 1e9)) * 1e3;
}

/**
 * Tokens of KV per model ms that `gbps` (gigabits per second) moves: the rate a rank loads
 * from a KV store at. The simulator's PD layout and the mock worker's store share it, so
 * both charge a load identically.
 */
export function kvLoadTokensPerMs(gbps: number, bytesPerToken: number): number {
  return (gbps * 1e9) / 8 / bytesPerToken / 1000;
}

/**
 * KV bytes per token of a cost profile, from its memory model; a clear error when it has
 * none (a profile file without `memory` cannot price a transfer).
 */
export function profileKvBytesPerToken(profile: Pick<CostModel, 'name' | 'memory'>): number {
  const bytes = profile.memory?.kvBytesPerToken;
  if (bytes === undefined) {
    throw new RangeError(
      `profile '${profile.name}' has no memory model (KV bytes per token), so a KV transfer cannot be priced: add 'memory' to the profile`,
    );
  }
  return bytes;
}
