// A token array the simulator synthesised block by block can be described by a source: the
// id each block's tokens were computed from, and how to compute one token. A radix node whose
// key such a source spells keeps the source and a range instead of a copy of the tokens, and
// two keys from one family and block size compare a block at a time (equal ids, equal tokens) instead of a
// token at a time. On a long replay across many ranks the copies were nearly all of the
// memory (the caches held ~4 GB of 4-byte tokens for the Mooncake trace ten times over on
// 1,024 ranks); the sources are a few ids per request. Results are unchanged: a block whose
// ids differ is compared token by token, so a chance-equal token still matches.

export interface BlockTokenSource {
  /**
   * Sources of one family (compared with ===) and one block size compute equal tokens at
   * equal positions from equal block ids.
   */
  readonly family: unknown;
  /** Tokens per block; block b spans positions [b * blockTokens, (b + 1) * blockTokens). */
  readonly blockTokens: number;
  /** Tokens it describes, from position 0. */
  readonly length: number;
  /** The id block `b`'s tokens are computed from. */
  blockId(b: number): number;
  /** The token at position `p` (0 <= p < length). */
  tokenAt(p: number): number;
}

const sources = new WeakMap<ArrayBufferLike, BlockTokenSource>();

/**
 * Arrays this short are neither described nor looked up: V8 keeps a typed array of up to 64
 * bytes on its heap, and asking for its buffer would move it out. Their keys are copied,
 * which is cheap at that size and gives the same results.
 */
const MIN_TOKENS = 17;

/**
 * Records that `ids` holds exactly what `source` describes. `ids` must own its whole buffer
 * (views of it, e.g. a prompt without its last token, are then described too) and must not be
 * written afterwards.
 */
export function describeTokens(ids: Uint32Array, source: BlockTokenSource): void {
  if (ids.byteOffset !== 0 || ids.byteLength !== ids.buffer.byteLength) {
    throw new RangeError('describeTokens: the array must own its whole buffer');
  }
  if (ids.length !== source.length) {
    throw new RangeError(
      `describeTokens: the array has ${ids.length} tokens, the source ${source.length}`,
    );
  }
  if (ids.length >= MIN_TOKENS) sources.set(ids.buffer, source);
}

/** The source `ids` (or the array it is a view of) was described by; null if none. */
export function tokenSourceOf(ids: Uint32Array): BlockTokenSource | null {
  return ids.length < MIN_TOKENS ? null : (sources.get(ids.buffer) ?? null);
}
