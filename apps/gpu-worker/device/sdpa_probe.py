"""Times decode-shaped SDPA calls on the GPU: the first call at a new shape against repeat
calls at a seen one, with cuDNN's SDPA backend allowed and then disabled.

Why: the validation worker's decode meets a new attention shape whenever the batch size or
its padded key length changes. If a backend builds a plan per shape, every first visit
costs tens of milliseconds that a serving engine (shape-stable kernels) never pays, and
the calibrated decode cost stops describing live decode. The worker disables cuDNN's SDPA
on CUDA by default (`--cudnn-sdpa` turns it back on); this probe prints the evidence.

    python3 apps/gpu-worker/device/sdpa_probe.py       # ~10-30 s on one H200
"""

from __future__ import annotations

import json
import statistics
import sys
import time

import torch
import torch.nn.functional as F


def timed(fn) -> float:
    torch.cuda.synchronize()
    t = time.perf_counter()
    fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - t) * 1000.0


def probe(cudnn: bool, lengths, rows, reps: int = 5) -> dict:
    torch.backends.cuda.enable_cudnn_sdp(cudnn)
    dev = torch.device("cuda")
    first, repeat = [], []
    for b in rows:
        for n in lengths:
            # The 1B shape's decode: 8 KV heads, 4 query heads per KV head, head dim 64.
            q = torch.randn(b, 8, 4, 64, device=dev, dtype=torch.bfloat16)
            k = torch.randn(b, 8, n, 64, device=dev, dtype=torch.bfloat16)
            v = torch.randn(b, 8, n, 64, device=dev, dtype=torch.bfloat16)
            pos = torch.randint(n // 2, n, (b,), device=dev)
            mask = (torch.arange(n, device=dev)[None, :] <= pos[:, None])[:, None, None, :]

            def call() -> None:
                F.scaled_dot_product_attention(q, k, v, attn_mask=mask)

            first.append(timed(call))
            repeat.extend(timed(call) for _ in range(reps))
    return {"cudnn_sdpa": cudnn, "shapes": len(first), "first_visit_ms_median": statistics.median(first),
            "first_visit_ms_max": max(first), "repeat_ms_median": statistics.median(repeat)}


def main() -> int:
    if not torch.cuda.is_available():
        print("sdpa_probe: no CUDA device", file=sys.stderr)
        return 2
    print(f"torch {torch.__version__} on {torch.cuda.get_device_name(0)}", flush=True)
    # Warm the CUDA context and the allocator so the first measured call pays neither.
    timed(lambda: torch.randn(1024, 1024, device="cuda") @ torch.randn(1024, 1024, device="cuda"))
    rows = [1, 3, 8]
    # Distinct lengths per setting, so the second setting meets shapes the first never ran.
    results = [probe(True, [1280, 2816, 6400, 12544], rows), probe(False, [1536, 3072, 6656, 12800], rows)]
    torch.backends.cuda.enable_cudnn_sdp(True)
    for r in results:
        print(json.dumps(r), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
