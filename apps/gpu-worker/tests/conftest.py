import os
import sys

import pytest
import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# Two cores shared by the whole team: one torch thread keeps the suite predictable.
torch.set_num_threads(1)

from kvroute_gpu_worker.engine import Engine, EngineConfig  # noqa: E402
from kvroute_gpu_worker.model import LlamaModel, get_shape  # noqa: E402

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


@pytest.fixture(scope="session")
def tiny_model():
    return LlamaModel(get_shape("tiny"), device="cpu", seed=0)


def make_engine(model, **kw):
    cfg = dict(capacity_tokens=8192, page_size=1, chunked_prefill_size=64, max_running_requests=16, context_length=2048)
    cfg.update(kw)
    return Engine(model, EngineConfig(**cfg))


@pytest.fixture
def engine_factory(tiny_model):
    return lambda **kw: make_engine(tiny_model, **kw)
