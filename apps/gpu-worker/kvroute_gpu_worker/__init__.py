"""kvroute's GPU worker: a minimal real inference engine (Llama-style decoder with random
weights, radix prefix cache of real KV tensors, FCFS + chunked prefill + batched decode)
behind the same HTTP surface as the mock worker. A validation engine, not a production server."""

from .engine import Engine, EngineConfig, Request
from .model import SHAPES, LlamaModel, get_shape
from .radix_cache import RadixCache
from .tokenizer import chat_text, tokenize

__all__ = ["Engine", "EngineConfig", "Request", "SHAPES", "LlamaModel", "get_shape", "RadixCache",
           "chat_text", "tokenize"]
