"""The model's attention paths and KV reuse give the same numbers as recomputing."""

import random

import pytest
import torch

from kvroute_gpu_worker.model import HAS_SDPA, LlamaModel, get_shape
from kvroute_gpu_worker.radix_cache import RadixCache

TOL = dict(atol=2e-4, rtol=1e-4)


def ids_of(n, seed=0):
    rng = random.Random(seed)
    # Routing ids are uint32 (4 UTF-8 bytes); the model wraps them into its vocabulary.
    return [rng.randrange(0, 2**32) for _ in range(n)]


def full_prefill(model, ids):
    kv = model.new_kv(len(ids))
    with torch.inference_mode():
        return model.prefill(torch.tensor(ids), kv, 0), kv


def test_cached_prefix_gives_same_next_token_logits_as_full_prefill(tiny_model):
    ids = ids_of(300)
    full, _ = full_prefill(tiny_model, ids)
    cache = RadixCache(capacity_tokens=4096, page_size=1)
    _, prefix_kv = full_prefill(tiny_model, ids[:200])
    cache.insert(ids[:200], prefix_kv)
    m = cache.match(ids[:-1])
    assert m.matched_tokens == 200
    kv = tiny_model.new_kv(300)
    cache.gather(m, kv)
    with torch.inference_mode():
        # Only the 100 uncached tokens are computed, on top of the cached K/V as past.
        cached = tiny_model.prefill(torch.tensor(ids[200:]), kv, 200)
    assert torch.allclose(full, cached, **TOL)
    assert int(full.argmax()) == int(cached.argmax())


def test_chunked_prefill_matches_one_shot(tiny_model):
    ids = ids_of(257, seed=3)
    full, full_kv = full_prefill(tiny_model, ids)
    kv = tiny_model.new_kv(257)
    with torch.inference_mode():
        for start in range(0, 257, 50):
            out = tiny_model.prefill(torch.tensor(ids[start : start + 50]), kv, start)
    assert torch.allclose(full, out, **TOL)
    assert torch.allclose(full_kv, kv, **TOL)


def test_explicit_attention_matches_token_by_token_recompute(tiny_model):
    # Causal masking with a past: prefill of n tokens == n one-token prefills.
    ids = ids_of(40, seed=5)
    full, _ = full_prefill(tiny_model, ids)
    kv = tiny_model.new_kv(40)
    with torch.inference_mode():
        for i, t in enumerate(ids):
            out = tiny_model.prefill(torch.tensor([t]), kv, i)
    assert torch.allclose(full, out, **TOL)


def test_batched_decode_matches_each_sequence_alone(tiny_model):
    s = tiny_model.shape
    lens = [5, 33, 17]
    seqs = [ids_of(n, seed=10 + n) for n in lens]
    cap = 64
    batch = torch.zeros(s.num_layers, 2, 4, s.num_kv_heads, cap, s.head_dim)
    alone = []
    with torch.inference_mode():
        for row, ids in enumerate(seqs):
            _, kv = full_prefill(tiny_model, ids)
            batch[:, :, row, :, : len(ids)] = kv
            single = torch.zeros(s.num_layers, 2, 1, s.num_kv_heads, cap, s.head_dim)
            single[:, :, 0, :, : len(ids)] = kv
            alone.append(tiny_model.decode(torch.tensor([7]), torch.tensor([len(ids)]), single, len(ids) + 1)[0])
        together = tiny_model.decode(torch.tensor([7, 7, 7]), torch.tensor(lens), batch, max(lens) + 1)
        # Decoding one token equals prefilling that token after the sequence.
        ref = []
        for ids in seqs:
            ref.append(full_prefill(tiny_model, ids + [7])[0])
    for i in range(3):
        assert torch.allclose(together[i], alone[i], **TOL)
        assert torch.allclose(together[i], ref[i], **TOL)


def test_decode_over_padded_keys_equals_unpadded(tiny_model):
    """The engine pads decode's key length to a bucket so the attention shape repeats; the
    padding (here filled with junk, as a reused buffer row may be) must be masked out."""
    s = tiny_model.shape
    lens = [9, 40]
    cap = 128
    batch = torch.randn(s.num_layers, 2, 2, s.num_kv_heads, cap, s.head_dim, generator=torch.Generator().manual_seed(3))
    with torch.inference_mode():
        for row, n in enumerate(lens):
            _, kv = full_prefill(tiny_model, ids_of(n, seed=30 + n))
            batch[:, :, row, :, :n] = kv
        exact = tiny_model.decode(torch.tensor([5, 6]), torch.tensor(lens), batch.clone(), max(lens) + 1)
        padded = tiny_model.decode(torch.tensor([5, 6]), torch.tensor(lens), batch.clone(), cap)
    assert torch.allclose(exact, padded, **TOL)


@pytest.mark.skipif(not HAS_SDPA, reason=f"torch {torch.__version__} has no scaled_dot_product_attention (needs >= 2.0)")
def test_sdpa_and_explicit_attention_agree():
    shape = get_shape("tiny")
    sdpa = LlamaModel(shape, seed=1, attention="sdpa")
    explicit = LlamaModel(shape, seed=1, attention="explicit")
    ids = ids_of(120, seed=8)
    with torch.inference_mode():
        outs = []
        for m in (sdpa, explicit):
            kv = m.new_kv(121)
            cold = m.prefill(torch.tensor(ids[:80]), kv, 0)
            warm = m.prefill(torch.tensor(ids[80:]), kv, 80)  # with a past: lower-right causal mask
            batch = torch.zeros(shape.num_layers, 2, 2, shape.num_kv_heads, 128, shape.head_dim)
            batch[:, :, 0, :, :120] = kv[:, :, :, :120]
            batch[:, :, 1, :, :80] = kv[:, :, :, :80]
            dec = m.decode(torch.tensor([11, 12]), torch.tensor([120, 80]), batch, 121)
            outs.append((cold, warm, dec))
    for a, b in zip(*outs):
        assert torch.allclose(a, b, **TOL)


def test_sdpa_requires_torch_2():
    if HAS_SDPA:
        assert LlamaModel(get_shape("tiny"), attention="sdpa").attention == "sdpa"
    else:
        with pytest.raises(ValueError, match="needs torch >= 2.0"):
            LlamaModel(get_shape("tiny"), attention="sdpa")


def test_named_shapes_have_the_real_dimensions():
    one = get_shape("llama-3.2-1b")
    assert (one.hidden_size, one.intermediate_size, one.num_layers, one.num_heads, one.num_kv_heads, one.head_dim,
            one.vocab_size) == (2048, 8192, 16, 32, 8, 64, 128256)
    eight = get_shape("llama-3.1-8b")
    assert (eight.hidden_size, eight.intermediate_size, eight.num_layers, eight.num_kv_heads, eight.head_dim) == (
        4096, 14336, 32, 8, 128)
    with pytest.raises(ValueError, match="valid shapes: tiny"):
        get_shape("gpt-5")


def test_weights_are_seeded(tiny_model):
    again = LlamaModel(get_shape("tiny"), seed=0)
    other = LlamaModel(get_shape("tiny"), seed=1)
    assert torch.equal(again.embed, tiny_model.embed)
    assert not torch.equal(other.embed, tiny_model.embed)
    # Param count of tiny: embed + 2 layers + final norm (tied lm_head).
    s = tiny_model.shape
    per_layer = 2 * s.hidden_size + s.hidden_size * (s.num_heads + 2 * s.num_kv_heads) * s.head_dim
    per_layer += s.num_heads * s.head_dim * s.hidden_size + 3 * s.hidden_size * s.intermediate_size
    assert tiny_model.param_count() == s.vocab_size * s.hidden_size + s.hidden_size + s.num_layers * per_layer
