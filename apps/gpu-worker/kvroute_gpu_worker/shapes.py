"""Named model shapes: the real models' dimensions (weights are random). Kept free of torch
so the CLI can validate its flags before paying for the torch import."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict


@dataclass(frozen=True)
class ModelShape:
    name: str
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    rope_theta: float
    max_context: int
    tie_embeddings: bool


SHAPES: Dict[str, ModelShape] = {
    # Small enough that a CPU test suite prefills hundreds of tokens in milliseconds.
    "tiny": ModelShape("tiny", 1024, 64, 128, 2, 4, 2, 16, 10000.0, 4096, True),
    "llama-3.2-1b": ModelShape("llama-3.2-1b", 128256, 2048, 8192, 16, 32, 8, 64, 500000.0, 131072, True),
    "llama-3.1-8b": ModelShape("llama-3.1-8b", 128256, 4096, 14336, 32, 32, 8, 128, 500000.0, 131072, False),
}


def get_shape(name: str) -> ModelShape:
    if name not in SHAPES:
        raise ValueError(f"unknown shape {name!r}; valid shapes: {', '.join(SHAPES)}")
    return SHAPES[name]
