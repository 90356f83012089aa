// Which job a thread runs next. The claim order is split into one contiguous run of positions
// per thread; each thread takes its own run front to back and, when it is used up, takes
// from the others' (whichever still has positions), so no thread waits while work is left.
// Neighbouring cells of a sweep share work a thread keeps between its cells (a prefix
// length's digests of every request on a trace replay: about a second of hashing per prefix
// length), so a thread that stays in its own run computes each of those once, where threads
// taking turns from one queue each computed every one of them.
//
// The state is one Int32Array on a SharedArrayBuffer, two slots per run (next position, end),
// claimed with Atomics, so worker threads never wait for the main thread to hand them a job.

/** `threads` runs over positions 0..n-1, as equal as they can be (the first ones longer). */
export function claimRuns(n: number, threads: number): Int32Array {
  const runs = Math.max(1, Math.min(threads, n));
  const state = new Int32Array(new SharedArrayBuffer(8 * runs));
  for (let r = 0, from = 0; r < runs; r++) {
    const size = Math.floor(n / runs) + (r < n % runs ? 1 : 0);
    state[2 * r] = from;
    state[2 * r + 1] = from + size;
    from += size;
  }
  return state;
}

/** The next position thread `self` runs (its own run first, then the others'), or -1. */
export function claimNext(state: Int32Array, self: number): number {
  const runs = state.length >> 1;
  for (let i = 0; i < runs; i++) {
    const r = (self + i) % runs;
    const end = state[2 * r + 1]!;
    if (Atomics.load(state, 2 * r) >= end) continue;
    const k = Atomics.add(state, 2 * r, 1);
    if (k < end) return k;
  }
  return -1;
}

/** No thread claims another position (a job failed). */
export function closeClaims(state: Int32Array): void {
  for (let r = 0; r < state.length >> 1; r++) Atomics.store(state, 2 * r, state[2 * r + 1]!);
}
