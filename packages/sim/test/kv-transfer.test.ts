import { describe, expect, it } from 'vitest';
import {
  DEFAULT_KV_SETUP_MS,
  getProfile,
  kvBytesPerToken,
  kvTransferBytes,
  kvTransferMs,
  profileKvBytesPerToken,
} from '../src/model.ts';

describe('KV transfer time', () => {
  const llama8b = { layers: 32, kvHeads: 8, headDim: 128 };

  it('is setup plus prompt KV bytes over the link bandwidth', () => {
    // Llama-3.1-8B bf16: 2 x 32 x 8 x 128 x 2 = 131,072 bytes per token.
    expect(kvBytesPerToken(llama8b)).toBe(131_072);
    // 10,000 tokens = 1.31 GB = 10.49 Gbit; over 100 Gb/s that is 104.86 ms, plus 2 ms setup.
    const ms = kvTransferMs(10_000, llama8b, { gbps: 100, setupMs: 2 });
    expect(ms).toBeCloseTo(2 + ((10_000 * 131_072 * 8) / 100e9) * 1e3, 9);
    expect(ms).toBeCloseTo(106.858, 3);
    // Bytes per token or the shape give the same answer; setup defaults.
    expect(kvTransferMs(10_000, 131_072, { gbps: 100 })).toBeCloseTo(
      DEFAULT_KV_SETUP_MS + 104.858,
      3,
    );
    expect(kvTransferMs(0, llama8b, { gbps: 100, setupMs: 0.5 })).toBe(0.5);
    expect(kvTransferBytes(3, 10)).toBe(30);
  });

  it('doubles the variable part with twice the tokens and halves it with twice the bandwidth', () => {
    const a = kvTransferMs(4000, llama8b, { gbps: 200, setupMs: 0 });
    expect(kvTransferMs(8000, llama8b, { gbps: 200, setupMs: 0 })).toBeCloseTo(2 * a, 9);
    expect(kvTransferMs(4000, llama8b, { gbps: 400, setupMs: 0 })).toBeCloseTo(a / 2, 9);
  });

  it('reads KV bytes per token from a profile and refuses a profile without a memory model', () => {
    expect(profileKvBytesPerToken(getProfile('h200-llama-3.1-8b'))).toBe(131_072);
    expect(() => profileKvBytesPerToken({ name: 'bare' })).toThrow(
      /profile 'bare' has no memory model/,
    );
  });

  it('names the bad argument', () => {
    expect(() => kvTransferMs(10, llama8b, { gbps: 0 })).toThrow(/gbps must be .* > 0, got 0/);
    expect(() => kvTransferMs(10, llama8b, { gbps: 100, setupMs: -1 })).toThrow(/setupMs/);
    expect(() => kvTransferMs(-1, llama8b, { gbps: 100 })).toThrow(/tokens must be/);
    expect(() => kvTransferMs(1, 0, { gbps: 100 })).toThrow(/KV bytes per token/);
  });
});
