// Embeddings and rerank scores without a model. Both are pure functions of the input, so a
// client sees the same vector for the same text on every worker and run: an embedding is a
// unit vector drawn from a hash of the prompt's token ids, a rerank score is the share of
// the query's words that occur in the document (so a document that repeats the query ranks
// first, which is enough for demos and tests of the plumbing).
import { fillerTokenId, promptSeed } from './filler.ts';

/** Vector length when the request gives no `dimensions` (a common small embedding size). */
export const EMBEDDING_DIMENSIONS = 256;

/** A deterministic unit vector of `dims` floats for a prompt's token ids. */
export function embeddingOf(ids: ArrayLike<number>, dims: number): Float32Array {
  const seed = promptSeed(ids);
  const v = new Float32Array(dims);
  let norm = 0;
  for (let i = 0; i < dims; i++) {
    // Two filler draws make a value in [-1, 1) with enough resolution for cosine scores.
    const x = (fillerTokenId(seed, 2 * i) * 40 + fillerTokenId(seed, 2 * i + 1)) / 800 - 1;
    v[i] = x;
    norm += x * x;
  }
  const scale = norm > 0 ? 1 / Math.sqrt(norm) : 0;
  for (let i = 0; i < dims; i++) v[i] = (v[i] as number) * scale;
  return v;
}

/** OpenAI's `encoding_format: "base64"`: the float32 values' little-endian bytes. */
export function embeddingBase64(v: Float32Array): string {
  const out = Buffer.alloc(v.length * 4);
  for (let i = 0; i < v.length; i++) out.writeFloatLE(v[i] as number, i * 4);
  return out.toString('base64');
}

const words = (text: string) => text.toLowerCase().match(/[\p{L}\p{N}]+/gu) ?? [];

/** Share of the query's distinct words found in the document, in [0, 1]. */
export function rerankScore(query: string, document: string): number {
  const q = new Set(words(query));
  if (q.size === 0) return 0;
  const d = new Set(words(document));
  let hit = 0;
  for (const w of q) if (d.has(w)) hit++;
  return hit / q.size;
}
