"""kvroute's GPU worker: a minimal real inference engine (Llama-style decoder with random
weights, radix prefix cache of real KV tensors, FCFS + chunked prefill + batched decode)
behind the same HTTP surface as the mock worker. A validation engine, not a production server.

Names are imported lazily: `python3 -m kvroute_gpu_worker --help` and flag errors should not
wait seconds for torch."""

from importlib import import_module
from typing import Any

_EXPORTS = {
    "Engine": "engine", "EngineConfig": "engine", "Request": "engine",
    "LlamaModel": "model", "SHAPES": "shapes", "get_shape": "shapes",
    "RadixCache": "radix_cache", "chat_text": "tokenizer", "tokenize": "tokenizer",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'kvroute_gpu_worker' has no attribute {name!r}")
    return getattr(import_module(f".{_EXPORTS[name]}", __name__), name)
