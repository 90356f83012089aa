#!/usr/bin/env python3
"""Golden vectors for prefix_match, computed independently of the TypeScript code.

Implements the upstream rule with Python's hashlib: key tokens = the first
floor(min(len, prefix_length) / window) * window tokens, or the whole input when it is
shorter than one window; each token as a little-endian uint32; digest = BLAKE2b-512;
rank = int.from_bytes(digest, "big") % num_ranks (empty input: no hash rank, round robin).
Also kvroute's failover rank (primary unhealthy): the first healthy rank among jump consistent
hash draws seeded by the digest's first two big-endian uint32 words.

Usage: python3 packages/policy/scripts/gen-golden.py  (rewrites test/fixtures/prefix-match-golden.json)
Deterministic: the same seed always writes the same file.
"""

import hashlib
import math
import json
import random
import struct
from pathlib import Path

SEED = 20260529
OUT = Path(__file__).resolve().parent.parent / "test" / "fixtures" / "prefix-match-golden.json"


def key_length(length: int, window: int, prefix_length: int) -> int:
    if length < window:
        return length
    return (min(length, prefix_length) // window) * window


def digest(ids: list[int]) -> bytes:
    return hashlib.blake2b(struct.pack(f"<{len(ids)}I", *ids), digest_size=64).digest()


def fmix32(h: int) -> int:
    h ^= h >> 16
    h = (h * 0x85EBCA6B) & 0xFFFFFFFF
    h ^= h >> 13
    h = (h * 0xC2B2AE35) & 0xFFFFFFFF
    return h ^ (h >> 16)


def jump_rank_of(lo: int, hi: int, attempt: int, n: int) -> int:
    """Jump consistent hash (Lamping and Veach) draw `attempt` of the key (lo, hi) over n ranks.

    The random stream is a 32-bit splitmix: a Weyl sequence through fmix32. The division is a
    float64 one, as the TypeScript code computes it.
    """
    state = fmix32(lo ^ fmix32(hi ^ (((attempt + 1) * 0x9E3779B1) & 0xFFFFFFFF)))
    b, j = 0, 0
    while j < n:
        b = j
        state = (state + 0x9E3779B9) & 0xFFFFFFFF
        j = math.floor(((b + 1) * 4294967296.0) / (fmix32(state) + 1))
    return b


def failover_rank(d: bytes, n: int, healthy: list[int]) -> int:
    """kvroute's failover when the primary is down: the first healthy draw of 64, else the first
    healthy rank at or after the first draw."""
    a, b = int.from_bytes(d[0:4], "big"), int.from_bytes(d[4:8], "big")
    alive = set(healthy)
    for attempt in range(64):
        r = jump_rank_of(a, b, attempt, n)
        if r in alive:
            return r
    first = jump_rank_of(a, b, 0, n)
    return next((first + i) % n for i in range(n) if (first + i) % n in alive)


def token_list(rng: random.Random, length: int, style: str) -> list[int]:
    if style == "vocab":  # realistic vocabulary ids
        return [rng.randrange(0, 152_064) for _ in range(length)]
    if style == "full":  # the whole uint32 range, edges included
        edges = [0, 1, 255, 256, 65535, 65536, 2**31 - 1, 2**31, 2**32 - 2, 2**32 - 1]
        return [rng.choice(edges) if rng.random() < 0.2 else rng.randrange(0, 2**32) for _ in range(length)]
    return [rng.randrange(1, 30_000) for _ in range(length)]  # the sim's synthetic ids


def main() -> None:
    rng = random.Random(SEED)
    lengths = [0, 1, 2, 3, 4, 7, 15, 16, 17, 63, 64, 65, 100, 127, 128, 129, 255, 256, 257,
               300, 511, 512, 513, 767, 768, 1000, 1023, 1024, 1025, 2047, 2048, 2500, 4095,
               4096, 4097, 5000, 8192, 9000]
    styles = ["vocab", "full", "synthetic"]
    settings = [(1, 1), (1, 7), (4, 16), (16, 64), (16, 100), (64, 256), (64, 1000),
                (100, 1000), (128, 512), (256, 1024), (256, 4096), (256, 8192), (512, 4096),
                (1000, 3000)]
    rank_counts = [1, 2, 3, 7, 8, 16, 32, 64, 100, 1000, 65536, 2**31 + 11, 2**32]

    lists = []
    for i, length in enumerate(lengths):
        lists.append(token_list(rng, length, styles[i % len(styles)]))

    cases = []
    for list_index, ids in enumerate(lists):
        # Every list with several settings, always including the defaults (256, 4096).
        chosen = rng.sample(settings, 5)
        if (256, 4096) not in chosen:
            chosen.append((256, 4096))
        for window, prefix_length in chosen:
            num_ranks = rng.choice(rank_counts)
            k = key_length(len(ids), window, prefix_length)
            d = digest(ids[:k])
            cases.append({
                "list": list_index,
                "window": window,
                "prefixLength": prefix_length,
                "ranks": num_ranks,
                "keyLength": k,
                "digest": d.hex(),
                # Empty input has no hash rank: prefix_match falls back to round robin.
                "rank": int.from_bytes(d, "big") % num_ranks if k > 0 else None,
                "ranks16": int.from_bytes(d, "big") % 16 if k > 0 else None,
            })
            if k > 0 and 1 < num_ranks <= 1000:
                # Not part of the upstream rule: kvroute's failover, so other implementations
                # (e.g. a Python router) can agree on where a dead rank's keys go.
                primary = cases[-1]["rank"]
                cases[-1]["failover"] = failover_rank(
                    d, num_ranks, [r for r in range(num_ranks) if r != primary])
                # Few ranks left (those with (7r + 3) % 50 == 0): at 1,000 ranks 64 draws often
                # find none of the 20, and the fallback (next healthy after the first draw) runs.
                sparse = [r for r in range(num_ranks) if r != primary and (7 * r + 3) % 50 == 0]
                if sparse:
                    cases[-1]["failoverSparse"] = failover_rank(d, num_ranks, sparse)

    OUT.parent.mkdir(parents=True, exist_ok=True)
    body = {
        "format": "kvroute-prefix-match-golden/v1",
        "generator": "packages/policy/scripts/gen-golden.py (hashlib.blake2b, digest_size=64)",
        "seed": SEED,
        "lists": lists,
        "cases": cases,
    }
    OUT.write_text(json.dumps(body, separators=(",", ":")) + "\n")
    print(f"wrote {len(cases)} cases over {len(lists)} token lists to {OUT}")


if __name__ == "__main__":
    main()
