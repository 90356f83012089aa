"""python3 -m kvroute_gpu_worker [--shape tiny] [--port 0] ... | --calibrate --out profile.json"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import sys
import time
from typing import TYPE_CHECKING, List, Optional

from .shapes import SHAPES, get_shape

if TYPE_CHECKING:
    from .engine import Engine

# Per-shape defaults: tiny is for CPU tests; the real shapes assume a GPU shared by a few workers.
DEFAULTS = {
    "tiny": {"max_total_tokens": 32768, "chunked_prefill_size": 512, "context_length": 4096},
    "llama-3.2-1b": {"max_total_tokens": 200000, "chunked_prefill_size": 8192, "context_length": 32768},
    "llama-3.1-8b": {"max_total_tokens": 200000, "chunked_prefill_size": 8192, "context_length": 32768},
}

# The simulator refuses a cost profile whose chunkedPrefillSize is below this
# (MIN_CHUNKED_PREFILL_SIZE in packages/sim/src/cost/cost-model.ts), so the worker refuses it too:
# a worker the simulator cannot model would make every validation run against it meaningless.
MIN_CHUNKED_PREFILL_SIZE = 64


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python3 -m kvroute_gpu_worker",
                                description="kvroute GPU worker: a minimal real engine for validating routing.")
    p.add_argument("--shape", default="tiny", choices=sorted(SHAPES), help="model shape (random weights)")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=30000, help="0 picks a free port (printed on the first stdout line)")
    p.add_argument("--device", default="auto", help="auto (cuda if available), cpu, cuda, cuda:N")
    p.add_argument("--dtype", default="auto", choices=["auto", "float32", "bfloat16", "float16"],
                   help="auto: bfloat16 on GPU, float32 on CPU")
    p.add_argument("--attention", default="auto", choices=["auto", "sdpa", "explicit"],
                   help="auto: SDPA where torch has it (>= 2.0), explicit softmax otherwise")
    p.add_argument("--cudnn-sdpa", action="store_true",
                   help="let SDPA use cuDNN's backend on CUDA (off by default: it builds a plan per new shape)")
    p.add_argument("--seed", type=int, default=0, help="weight seed")
    p.add_argument("--page-size", type=int, default=1)
    p.add_argument("--max-total-tokens", type=int, help="KV capacity in tokens (radix tree + running requests)")
    p.add_argument("--chunked-prefill-size", type=int)
    p.add_argument("--context-length", type=int, help="longest prompt + max new tokens accepted")
    p.add_argument("--max-running-requests", type=int, default=64)
    p.add_argument("--served-model-name", help="model id in /v1/models and responses")
    p.add_argument("--threads", type=int, help="torch CPU threads")
    p.add_argument("--no-warmup", action="store_true", help="skip the warm-up forward before listening")
    p.add_argument("--warmup-tokens", type=int,
                   help="warm-up prompt length before listening (default: 24576 on CUDA, capped by the context "
                        "length; none on CPU)")
    p.add_argument("--kv-events-config",
                   help='publish KV cache events as vLLM/SGLang, e.g. \'{"publisher": "zmq", "endpoint": "tcp://*:5557", "replay_endpoint": "tcp://*:5558"}\'')
    p.add_argument("--kv-events-block-size", type=int, default=16, help="tokens per published block (default 16)")
    p.add_argument("--calibrate", action="store_true", help="measure prefill/decode times, write a cost profile, exit")
    p.add_argument("--out", help="--calibrate: profile file to write (kvroute-cost-profile/v1)")
    p.add_argument("--calibrate-budget-s", type=float, default=60.0,
                   help="--calibrate: seconds to measure for; prefill gets 60%%, decode keeps the rest")
    return p


def _fail(msg: str) -> None:
    print(f"kvroute_gpu_worker: {msg}", file=sys.stderr)
    sys.exit(2)


def check_args(args: argparse.Namespace) -> None:
    """Every check that needs no torch, so bad flags fail in milliseconds, before anything is loaded."""
    if not re.fullmatch(r"auto|cpu|cuda(:[0-9]+)?", args.device):
        _fail(f"--device {args.device}: expected auto, cpu, cuda or cuda:N")
    if args.threads is not None and args.threads < 1:
        _fail(f"--threads must be >= 1, got {args.threads}")
    if not 0 <= args.port <= 65535:
        _fail(f"--port must be 0-65535 (0 picks a free port), got {args.port}")
    for name in ("page_size", "max_running_requests"):
        if getattr(args, name) <= 0:
            _fail(f"--{name.replace('_', '-')} must be > 0")
    for name in ("max_total_tokens", "context_length"):
        v = getattr(args, name)
        if v is not None and v <= 0:
            _fail(f"--{name.replace('_', '-')} must be > 0, got {v}")
    chunk = args.chunked_prefill_size
    if chunk is not None and chunk < MIN_CHUNKED_PREFILL_SIZE:
        _fail(f"--chunked-prefill-size must be >= {MIN_CHUNKED_PREFILL_SIZE} (the simulator's minimum), got {chunk}")
    if args.calibrate:
        if not args.out:
            _fail("--calibrate needs --out FILE")
        if not args.calibrate_budget_s > 0:
            _fail(f"--calibrate-budget-s must be > 0 seconds, got {args.calibrate_budget_s:g}")
        # Checked before measuring: a profile that cannot be written loses the whole run.
        folder = os.path.dirname(os.path.abspath(args.out))
        if os.path.isdir(args.out):
            _fail(f"--out {args.out}: is a folder; give a file name")
        if not os.path.isdir(folder):
            _fail(f"--out {args.out}: folder {folder} does not exist")
        if not os.access(folder, os.W_OK | os.X_OK):
            _fail(f"--out {args.out}: folder {folder} is not writable")
        if os.path.exists(args.out) and not os.access(args.out, os.W_OK):
            _fail(f"--out {args.out}: file is not writable")


def build_engine(args: argparse.Namespace) -> "Engine":
    # torch is imported only once the flags are known to be good: it takes seconds.
    try:
        import torch
    except ImportError as exc:
        _fail(f"this worker needs torch, which {sys.executable} cannot import ({exc}); run it with a python3 "
              f"that has torch (on Debian: apt-get install python3-torch, then /usr/bin/python3 -m kvroute_gpu_worker)")

    from .engine import Engine, EngineConfig
    from .model import LlamaModel

    shape = get_shape(args.shape)
    d = DEFAULTS[args.shape]
    device = args.device
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if device.startswith("cuda") and not torch.cuda.is_available():
        _fail(f"--device {device}: CUDA is not available in this torch ({torch.__version__})")
    dtype = None if args.dtype == "auto" else getattr(torch, args.dtype)
    if dtype is not None and device == "cpu":
        # float16 matmul is missing on CPU in older torch (1.13: "addmm_impl_cpu_" not implemented
        # for 'Half'); ask this torch rather than guess from its version.
        try:
            x = torch.ones(2, 2, dtype=dtype)
            x @ x
        except RuntimeError:
            _fail(f"--dtype {args.dtype}: this torch ({torch.__version__}) cannot run it on CPU; use float32 or bfloat16")
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    cap = args.max_total_tokens or d["max_total_tokens"]
    chunk = args.chunked_prefill_size or d["chunked_prefill_size"]
    ctx = args.context_length or d["context_length"]
    try:
        model = LlamaModel(shape, device=device, dtype=dtype, seed=args.seed, attention=args.attention,
                           cudnn_sdpa=args.cudnn_sdpa)
    except ValueError as exc:
        _fail(str(exc))
    cfg = EngineConfig(capacity_tokens=cap, page_size=args.page_size, chunked_prefill_size=chunk,
                       max_running_requests=args.max_running_requests, context_length=ctx)
    engine = Engine(model, cfg)
    if args.kv_events_config:
        engine.cache.hooks = kv_events_publisher(args.kv_events_config, args.kv_events_block_size)
    return engine


def kv_events_publisher(raw: str, block_size: int):
    """A KvEventPublisher from a vLLM/SGLang --kv-events-config JSON string."""
    import json

    try:
        cfg = json.loads(raw)
    except ValueError as exc:
        _fail(f"--kv-events-config must be JSON: {exc}")
    if not isinstance(cfg, dict):
        _fail("--kv-events-config must be a JSON object")
    if cfg.get("publisher", "zmq") != "zmq":
        _fail(f"--kv-events-config: publisher must be \"zmq\", got {cfg.get('publisher')!r}")
    if block_size < 1:
        _fail("--kv-events-block-size must be >= 1")
    for key in ("endpoint", "replay_endpoint", "topic"):
        if cfg.get(key) is not None and not isinstance(cfg[key], str):
            _fail(f"--kv-events-config: {key} must be a string, got {cfg[key]!r}")
    buffer_steps = cfg.get("buffer_steps", 10_000)
    if isinstance(buffer_steps, bool) or not isinstance(buffer_steps, int) or buffer_steps < 1:
        _fail(f"--kv-events-config: buffer_steps must be an integer >= 1, got {buffer_steps!r}")
    import zmq

    from .kv_events import KvEventPublisher

    try:
        return KvEventPublisher(cfg.get("endpoint", "tcp://*:5557"), cfg.get("replay_endpoint"),
                                block_size=block_size, buffer_steps=buffer_steps, topic=cfg.get("topic", ""))
    except zmq.ZMQError as exc:
        _fail(f"--kv-events-config: cannot bind {cfg.get('endpoint', 'tcp://*:5557')}"
              f"{' / ' + cfg['replay_endpoint'] if cfg.get('replay_endpoint') else ''}: {exc}")


def main(argv: Optional[List[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    check_args(args)
    t0 = time.time()
    engine = build_engine(args)
    model = engine.model
    load_s = time.time() - t0
    if args.calibrate:
        from .calibrate import TooFewPoints, calibrate

        print(f"calibrating {model.shape.name} on {model.device} ({model.dtype}, {model.attention})", file=sys.stderr,
              flush=True)
        base = args.out[:-5] if args.out.endswith(".json") else args.out
        try:
            profile, details = calibrate(engine, args.calibrate_budget_s,
                                         log=lambda s: print(s, file=sys.stderr, flush=True))
        except TooFewPoints as exc:
            # Keep what was measured: on a slow device that is minutes of work.
            with open(base + ".points.json", "w") as f:
                json.dump({"error": str(exc), "points": exc.points}, f, indent=2)
                f.write("\n")
            _fail(f"--calibrate-budget-s {args.calibrate_budget_s:g}: {exc}; give a larger budget "
                  f"(no profile written; the points measured are in {base}.points.json)")
        with open(args.out, "w") as f:
            json.dump(profile, f, indent=2)
            f.write("\n")
        with open(base + ".points.json", "w") as f:
            json.dump(details, f, indent=2)
            f.write("\n")
        print(json.dumps(profile), flush=True)
        print(f"wrote {args.out} and {base}.points.json in {time.time() - t0:.1f} s", file=sys.stderr, flush=True)
        return 0

    from .server import WorkerServer, server_info

    if not args.no_warmup:
        # First CUDA kernels are slow (hundreds of ms); pay that before the first request's TTFT.
        from .engine import Request

        engine.submit(Request(ids=list(range(1, 65)), max_new_tokens=3))
        engine.run_until_idle()
        long = args.warmup_tokens
        if long is None:
            long = min(24576, engine.context_length - 8) if model.device.type == "cuda" else 0
        if long > 64:
            # A serving engine allocates its KV pool and captures its kernels before it listens;
            # this worker grows buffers on demand, so without this the first long prompt on each
            # worker pays the allocator growth and first-time prefill shapes (70-100 ms on an
            # H200 for 22.7k tokens). One long prompt, then a hit on it, pays them here.
            ids = [(i * 7919) % (model.shape.vocab_size - 1) + 1 for i in range(long)]
            engine.submit(Request(ids=ids, max_new_tokens=3))
            engine.run_until_idle()
            engine.submit(Request(ids=ids + [1, 2, 3, 4], max_new_tokens=3))
            engine.run_until_idle()
        engine.cache.reset()
        engine.metrics.clear()
    name = args.served_model_name or f"kvroute-gpu-worker/{model.shape.name}"
    info = {"shape": model.shape.name, "device": str(model.device), "dtype": str(model.dtype).replace("torch.", ""),
            "attention": model.attention, "params": model.param_count(), "load_seconds": round(load_s, 2),
            "decode": "batched"}
    try:
        srv = WorkerServer((args.host, args.port), engine, name, server_info(engine, name, info))
    except (OSError, OverflowError) as exc:
        _fail(f"cannot listen on {args.host}:{args.port}: {exc}")
    engine.start()
    print(f"listening {srv.url}", flush=True)
    print(f"kvroute-gpu-worker {model.shape.name} on {model.device} ({info['dtype']}, {model.attention}); "
          f"{model.param_count() / 1e6:.1f}M params; capacity {engine.config.capacity_tokens} tokens; pid {os.getpid()}",
          file=sys.stderr, flush=True)

    def _stop(signum, frame):  # noqa: ARG001
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, _stop)
    try:
        srv.serve_forever(poll_interval=0.2)
    except KeyboardInterrupt:
        pass
    finally:
        srv.server_close()
        engine.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
