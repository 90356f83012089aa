"""--calibrate: measure this worker's own prefill and decode times on this machine and
fit the cost-profile form the simulator uses (kvroute-cost-profile/v1):

    prefillMs(new, cached) = floorMs + perTokenMs*new + attnMsPerMTokenPairs*new*(cached+new)/1e6
                             + perKCachedTokenMs*cached/1000
    decodeStepMs(batch, ctx) = floorMs + perSeqMs*batch + perKContextTokenMs*ctx/1000

Every point goes through the Engine (prefix match, KV gather, chunk forward, tree
insert, argmax), the same path a served request takes, so the fitted constants
include this worker's overheads and not only the model's FLOPs. Cold points are
like packages/sim/data/calibration/measure_prefill.py's; cached points prefill ``new``
tokens on top of ``cached`` tokens that the radix cache really serves.
"""

from __future__ import annotations

import itertools
import json
import random
import statistics
import time
from typing import Any, Dict, List, Optional, Sequence, Tuple

import torch

from .engine import Engine, Request

# (cold new tokens, cached tokens, new tokens on top of cached, decode batch sizes, decode context per seq)
PLANS = {
    "cpu": ([16, 64, 128, 256, 512], [128, 512], [16, 128], [1, 2, 4, 8], [32, 256], 4, 2),
    "gpu": ([128, 512, 1024, 2048, 4096, 8192, 16384], [2048, 8192, 16384], [32, 256, 1024, 4096],
            [1, 4, 16, 32, 64], [512, 2048], 8, 3),
}


# Share of the budget prefill (warm-up included) may use; the rest is kept for decode, counted
# from when prefill stops (a point that overruns the prefill share cannot eat into it), so a slow
# device or a large shape still gets decode points instead of a prefill-only run.
PREFILL_BUDGET_SHARE = 0.6


class TooFewPoints(ValueError):
    """The fit needs more points than were measured; ``points`` holds what was measured."""

    def __init__(self, msg: str, points: Dict[str, List[Dict[str, Any]]]) -> None:
        super().__init__(msg)
        self.points = points


def _sync(engine: Engine) -> None:
    if engine.model.device.type == "cuda":
        torch.cuda.synchronize()


def _ids(rng: random.Random, n: int) -> List[int]:
    # Synthetic ids in the workload plans' range; random so no two points share a prefix by accident.
    return [rng.randrange(1, 30000) for _ in range(n)]


def _prefill_once(engine: Engine, ids: List[int]) -> Tuple[float, int]:
    req = engine.submit(Request(ids=ids, max_new_tokens=1))
    engine.run_until_idle()
    _sync(engine)
    return (req.first_token_at - req.submitted_at) * 1000.0, req.cached_tokens


def measure(engine: Engine, plan: str, budget_s: float, seed: int = 1, log=print) -> Dict[str, List[Dict[str, Any]]]:
    # The live engine loop runs every step under inference_mode; so does calibration.
    with torch.inference_mode():
        return _measure(engine, plan, budget_s, seed, log)


def _measure(engine: Engine, plan: str, budget_s: float, seed: int, log) -> Dict[str, List[Dict[str, Any]]]:
    cold_ns, cached_cs, cached_ns, batches, ctxs, steps, reps = PLANS[plan]
    chunk = engine.config.chunked_prefill_size
    page = engine.config.page_size
    limit = engine.context_length - steps - 2
    rng = random.Random(seed)
    t0 = time.time()
    out: Dict[str, List[Dict[str, Any]]] = {"prefill": [], "decode": []}

    prefill_end = budget_s * PREFILL_BUDGET_SHARE
    decode_end = budget_s

    def over() -> bool:
        return time.time() - t0 > decode_end

    def prefill_over() -> bool:
        return time.time() - t0 > prefill_end

    # Warm-up: first kernels, allocator, cuBLAS handles. Its time counts against prefill's share.
    for n in (min(512, chunk), min(64, chunk)):
        if prefill_over():
            break
        _prefill_once(engine, _ids(rng, n))
    engine.cache.reset()

    for n in cold_ns:
        if n > min(chunk, limit) or prefill_over():
            continue
        ms = []
        for _ in range(reps):
            if ms and prefill_over():
                break
            engine.cache.reset()
            dt, cached = _prefill_once(engine, _ids(rng, n))
            assert cached == 0
            ms.append(dt)
        row = {"new": n, "cached": 0, "ms": ms, "median_ms": statistics.median(ms)}
        out["prefill"].append(row)
        log(json.dumps({"kind": "cold", **row}))

    for c in cached_cs:
        c -= c % page
        for n in cached_ns:
            if n > chunk or c + n > limit or prefill_over():
                continue
            ms = []
            for _ in range(reps):
                if ms and prefill_over():
                    break
                engine.cache.reset()
                prefix = _ids(rng, c)
                # Prime the cache with the prefix (+1 token so all c tokens are matchable). Id 0 is
                # never drawn by _ids, so the measured request cannot match one token further.
                _prefill_once(engine, prefix + [0])
                dt, cached = _prefill_once(engine, prefix + _ids(rng, n))
                if cached != c:
                    raise RuntimeError(f"calibration expected {c} cached tokens, the cache served {cached}")
                ms.append(dt)
            row = {"new": n, "cached": c, "ms": ms, "median_ms": statistics.median(ms)}
            out["prefill"].append(row)
            log(json.dumps({"kind": "cached", **row}))

    # Decode: steady-state steps only. A step whose attention shape (rows, padded kv length)
    # this process has not run before pays a one-time cost (allocation, a per-shape kernel
    # plan: ~60 ms on an H200 against ~12 ms for a repeat), which a long-running worker pays
    # once per shape, not per step. Those first visits run untimed (`warmup_steps`); only
    # steps on already-seen shapes are timed.
    decode_end = max(budget_s, time.time() - t0 + budget_s * (1 - PREFILL_BUDGET_SHARE))
    seen: set = set()
    for ctx, b in itertools.product(ctxs, batches):
        # Room for the untimed first visits: the prefill phase's mixed steps, a first step on
        # each shape, and a bucket boundary crossed while timing.
        new_tokens = b + 2 * steps + 4
        if over() or b > engine.config.max_running_requests or ctx + new_tokens > engine.context_length:
            continue
        if (ctx + new_tokens) * b > engine.config.capacity_tokens:
            continue
        engine.cache.reset()
        # Steps are mixed (earlier requests decode while later ones prefill), so give every
        # request enough new tokens to still be running when the last prefill ends.
        reqs = [Request(ids=_ids(rng, ctx), max_new_tokens=new_tokens) for _ in range(b)]
        for r in reqs:
            engine.submit(r)
        while engine.waiting or engine.prefilling is not None:
            engine.step()
        _sync(engine)
        ms, ctx_tokens, warm = [], [], 0
        while len(ms) < steps and len(engine.running) == b and all(
                len(r.output_ids) < r.max_new_tokens - 1 for r in reqs):
            shape = engine.decode_shape(b)
            ctx_now = sum(len(r.ids) + len(r.output_ids) for r in engine.running)
            ta = time.perf_counter()
            engine.step()
            _sync(engine)
            dt = (time.perf_counter() - ta) * 1000.0
            if shape in seen:
                ms.append(dt)
                ctx_tokens.append(ctx_now)
            else:
                seen.add(shape)
                warm += 1
        for r in reqs:
            engine.abort(r)
        engine.step()
        if not ms:
            continue
        row = {"batch": b, "context_tokens": int(statistics.mean(ctx_tokens)), "ms": [round(x, 4) for x in ms],
               "median_ms": statistics.median(ms), "warmup_steps": warm}
        out["decode"].append(row)
        log(json.dumps({"kind": "decode", **row}))
    engine.cache.reset()
    return out


def nnls_fit(rows: Sequence[Sequence[float]], ys: Sequence[float]) -> List[float]:
    """Least squares with every coefficient >= 0, by trying each non-empty subset of columns
    (4 columns: 15 subsets). Negative constants would make the simulator predict negative times."""
    k = len(rows[0])
    best: Optional[Tuple[float, List[float]]] = None
    for mask in range(1, 1 << k):
        cols = [j for j in range(k) if mask >> j & 1]
        if len(ys) < len(cols):
            continue
        a = torch.tensor([[r[j] for j in cols] for r in rows], dtype=torch.float64)
        y = torch.tensor(list(ys), dtype=torch.float64)[:, None]
        # Normal equations with a tiny ridge: torch 1.13's lstsq on CPU is fine too, but this is
        # the same on every version.
        ata = a.t() @ a + 1e-12 * torch.eye(len(cols), dtype=torch.float64)
        sol = torch.linalg.solve(ata, a.t() @ y)[:, 0].tolist()
        if any(s < 0 for s in sol):
            continue
        coef = [0.0] * k
        for j, s in zip(cols, sol):
            coef[j] = s
        pred = torch.tensor([sum(c * x for c, x in zip(coef, r)) for r in rows], dtype=torch.float64)
        err = float(((pred - y[:, 0]) ** 2).sum())
        if best is None or err < best[0]:
            best = (err, coef)
    if best is None:
        raise ValueError("calibration: no non-negative fit")
    return best[1]


def fit_profile(points: Dict[str, List[Dict[str, Any]]]) -> Dict[str, Dict[str, float]]:
    pre = points["prefill"]
    dec = points["decode"]
    if len(pre) < 3 or len(dec) < 3:
        raise TooFewPoints(f"too few points to fit ({len(pre)} prefill, {len(dec)} decode; need 3 each)", points)
    # The cached-token column is what serving a hit costs beyond the attention over it: the
    # engine gathers the cached KV into the request's buffer (32 KiB per token for the 1B
    # shape), which a form without it charges to the floor and under-predicts on long hits.
    prow = [[1.0, p["new"], p["new"] * (p["cached"] + p["new"]) / 1e6, p["cached"] / 1000.0] for p in pre]
    pc = nnls_fit(prow, [p["median_ms"] for p in pre])
    drow = [[1.0, d["batch"], d["context_tokens"] / 1000.0] for d in dec]
    dc = nnls_fit(drow, [d["median_ms"] for d in dec])
    return {
        "prefill": {"floorMs": pc[0], "perTokenMs": pc[1], "attnMsPerMTokenPairs": pc[2], "perKCachedTokenMs": pc[3]},
        "decode": {"floorMs": dc[0], "perSeqMs": dc[1], "perKContextTokenMs": dc[2]},
    }


def prefill_ms(prof: Dict[str, Dict[str, float]], new: int, cached: int) -> float:
    p = prof["prefill"]
    return (p["floorMs"] + p["perTokenMs"] * new + p["attnMsPerMTokenPairs"] * new * (cached + new) / 1e6
            + p.get("perKCachedTokenMs", 0.0) * cached / 1000.0)


def decode_ms(prof: Dict[str, Dict[str, float]], batch: int, ctx: int) -> float:
    d = prof["decode"]
    return d["floorMs"] + d["perSeqMs"] * batch + d["perKContextTokenMs"] * ctx / 1000.0


def device_label(engine: Engine) -> str:
    dev = engine.model.device
    if dev.type == "cuda":
        name = torch.cuda.get_device_name(dev)
        return name.lower().replace("nvidia", "").strip().replace(" ", "-")
    return "cpu"


def calibrate(engine: Engine, budget_s: float, log=print) -> Tuple[Dict[str, Any], Dict[str, Any]]:
    plan = "gpu" if engine.model.device.type == "cuda" else "cpu"
    t0 = time.time()
    points = measure(engine, plan, budget_s, log=log)
    fit = fit_profile(points)
    shape = engine.model.shape.name
    dev = device_label(engine)
    # Relative error of the fit at each measured point, so a reader sees how well the form fits.
    errs = [abs(prefill_ms(fit, p["new"], p["cached"]) - p["median_ms"]) / p["median_ms"] for p in points["prefill"]]
    derrs = [abs(decode_ms(fit, d["batch"], d["context_tokens"]) - d["median_ms"]) / d["median_ms"]
             for d in points["decode"]]
    profile = {
        "format": "kvroute-cost-profile/v1",
        "name": f"gpu-worker-{shape}-{dev}",
        "description": (f"kvroute gpu-worker, {shape} ({str(engine.model.dtype).replace('torch.', '')}, {engine.model.attention} attention) on "
                        f"{dev}: prefill fitted to {len(points['prefill'])} points (median relative error "
                        f"{statistics.median(errs) * 100:.1f}%), decode to {len(points['decode'])} points "
                        f"(median relative error {statistics.median(derrs) * 100:.1f}%)"),
        "source": (f"python3 -m kvroute_gpu_worker --calibrate --shape {shape}; torch {torch.__version__}; "
                   f"measured {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())} in {time.time() - t0:.1f} s"),
        **fit,
        "kvCapacityTokens": engine.config.capacity_tokens,
        "chunkedPrefillSize": engine.config.chunked_prefill_size,
    }
    details = {"profile": profile, "points": points,
               "fit_relative_error": {"prefill_median": statistics.median(errs), "prefill_max": max(errs),
                                      "decode_median": statistics.median(derrs), "decode_max": max(derrs)}}
    return profile, details
