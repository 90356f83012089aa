"""Radix cache: page-granular matching, LRU eviction of unlocked leaves, locks hold."""

import random

import pytest
import torch

from kvroute_gpu_worker.engine import Request
from kvroute_gpu_worker.radix_cache import RadixCache


def kv_for(ids):
    # [layers=1, 2, kv_heads=1, tokens, head_dim=1] whose values are the token ids, so a gather
    # shows exactly which tokens' KV came back.
    t = torch.tensor(ids, dtype=torch.float32)
    return torch.stack([t, -t])[None, :, None, :, None]


def test_match_insert_split_and_gather_return_the_right_kv():
    c = RadixCache(capacity_tokens=1000)
    c.insert([1, 2, 3, 4, 5], kv_for([1, 2, 3, 4, 5]))
    c.insert([1, 2, 3, 9, 9, 9], kv_for([1, 2, 3, 9, 9, 9]))  # splits the first node at 3
    assert c.total_tokens == 8
    m = c.match([1, 2, 3, 9, 9, 7])
    assert m.matched_tokens == 5
    out = torch.zeros(1, 2, 1, 6, 1)
    c.gather(m, out)
    assert out[0, 0, 0, :5, 0].tolist() == [1, 2, 3, 9, 9]
    assert out[0, 1, 0, :5, 0].tolist() == [-1, -2, -3, -9, -9]
    assert c.match([1, 2, 3, 4, 5, 6]).matched_tokens == 5
    assert c.match([2, 1]).matched_tokens == 0
    assert c.new_tokens([1, 2, 3, 4, 7, 7]) == 2


def test_page_size_floors_matches_and_inserts_to_whole_pages():
    c = RadixCache(capacity_tokens=1000, page_size=4)
    c.insert(list(range(10)), kv_for(list(range(10))))
    assert c.total_tokens == 8  # the last 2 tokens are not a whole page
    assert c.match(list(range(10))).matched_tokens == 8
    assert c.match(list(range(7)) + [99]).matched_tokens == 4
    # Diverging mid-page splits at the page boundary before it.
    c.insert([0, 1, 2, 3, 4, 5, 99, 99], kv_for([0, 1, 2, 3, 4, 5, 99, 99]))
    assert c.total_tokens == 12
    assert c.match([0, 1, 2, 3, 4, 5, 99, 99, 1]).matched_tokens == 8


def test_evicts_least_recently_used_leaves_first():
    c = RadixCache(capacity_tokens=1000)
    c.insert([1, 1, 1], kv_for([1, 1, 1]))
    c.insert([2, 2, 2], kv_for([2, 2, 2]))
    c.insert([3, 3, 3], kv_for([3, 3, 3]))
    c.match([1, 1, 1])  # touch: [2,2,2] is now the oldest
    assert c.evict(1) == 3
    assert c.match([2, 2, 2]).matched_tokens == 0
    assert c.match([1, 1, 1]).matched_tokens == 3
    assert c.match([3, 3, 3]).matched_tokens == 3
    assert c.evicted_tokens == 3


def test_never_evicts_a_locked_path():
    c = RadixCache(capacity_tokens=1000)
    c.insert([1, 2, 3, 4], kv_for([1, 2, 3, 4]))
    c.insert([1, 2, 7, 7], kv_for([1, 2, 7, 7]))
    m = c.match([1, 2, 3, 4])
    c.lock(m.last)
    assert c.locked_tokens == 4 and c.evictable_tokens == 2
    assert c.evict(100) == 2  # only the unlocked [7, 7] leaf can go
    assert c.match([1, 2, 3, 4]).matched_tokens == 4
    c.unlock(m.last)
    assert c.evict(100) == 4
    assert c.total_tokens == 0
    with pytest.raises(RuntimeError, match="not locked"):
        c.unlock(m.last)


def test_engine_keeps_usage_within_capacity_and_evicts(engine_factory):
    eng = engine_factory(capacity_tokens=600, chunked_prefill_size=32)
    rng = random.Random(0)
    reqs = [eng.submit(Request(ids=[rng.randrange(1, 30000) for _ in range(rng.randrange(40, 150))], max_new_tokens=4))
            for _ in range(30)]
    peak = 0
    with torch.inference_mode():
        while eng.waiting or eng.running or eng.prefilling:
            assert eng.step() or not eng.waiting
            used = eng.cache.total_tokens + eng._private_reserved()
            assert used <= 600
            assert eng.load()["num_used_tokens"] <= 600
            peak = max(peak, used)
    assert all(len(r.output_ids) == 4 for r in reqs)
    assert eng.cache.evicted_tokens > 0
    assert eng.cache.total_tokens <= 600
    assert peak > 300  # the pool was actually under pressure


def test_engine_never_evicts_what_a_running_request_holds(engine_factory):
    eng = engine_factory(capacity_tokens=400, chunked_prefill_size=256)
    holder = eng.submit(Request(ids=list(range(1000, 1200)), max_new_tokens=40))
    with torch.inference_mode():
        while not eng.running:
            eng.step()
        # The holder's 200 prompt tokens are in the tree and locked while it decodes.
        assert eng.cache.locked_tokens == 200
        for i in range(6):
            eng.submit(Request(ids=[5000 + 100 * i + j for j in range(60)], max_new_tokens=2))
        while holder in eng.running:
            eng.step()
            assert eng.cache.match(holder.ids).matched_tokens == 200
            assert eng.cache.total_tokens + eng._private_reserved() <= 400
        eng.run_until_idle()
    assert eng.cache.evicted_tokens > 0
    assert eng.cache.locked_tokens == 0


def test_engine_hit_skips_prefill_work_and_reports_cached_tokens(engine_factory):
    eng = engine_factory(page_size=4)
    ids = list(range(100, 400))
    a = eng.submit(Request(ids=ids, max_new_tokens=6))
    eng.run_until_idle()
    computed = eng.metrics["prefill_tokens_total"]
    assert a.cached_tokens == 0 and computed == 300
    b = eng.submit(Request(ids=ids[:200] + [1] * 50, max_new_tokens=6))
    c = eng.submit(Request(ids=ids, max_new_tokens=6))
    eng.run_until_idle()
    assert b.cached_tokens == 200
    # The whole prompt is cached, but one token is always computed (and 299 floors to 296 in pages of 4).
    assert c.cached_tokens == 296
    assert eng.metrics["prefill_tokens_total"] - computed == 50 + 4
    assert c.output_ids == a.output_ids  # same greedy continuation from cached K/V
    assert eng.metrics["cached_tokens_total"] == 200 + 296


def test_fcfs_order_and_cancellation(engine_factory):
    eng = engine_factory(max_running_requests=2)
    # Later requests are shorter, so any shortest-first policy would reorder them.
    reqs = [eng.submit(Request(ids=[10 + i] * (60 - 10 * i), max_new_tokens=3)) for i in range(4)]
    eng.abort(reqs[2])
    eng.run_until_idle()
    served = sorted((r for r in reqs if r.output_ids), key=lambda r: r.first_token_at)
    assert served == [reqs[0], reqs[1], reqs[3]]
    assert reqs[2].output_ids == [] and reqs[2].events.empty()
    assert eng.cache.locked_tokens == 0


def test_context_limit_rejects_before_queueing(engine_factory):
    from kvroute_gpu_worker.engine import ContextLengthError

    eng = engine_factory(context_length=100)
    with pytest.raises(ContextLengthError, match="maximum context length is 100"):
        eng.submit(Request(ids=[1] * 90, max_new_tokens=20))
    assert not eng.waiting


def test_finished_request_caches_prompt_and_output_like_sglang(engine_factory):
    eng = engine_factory(capacity_tokens=2000)
    a = eng.submit(Request(ids=list(range(500, 600)), max_new_tokens=8))
    eng.run_until_idle()
    # The last output token's KV was never computed, so 100 + 7 tokens are cached.
    assert eng.cache.total_tokens == 107
    follow = a.ids + a.output_ids[:7] + [42, 43]
    b = eng.submit(Request(ids=follow, max_new_tokens=2))
    eng.run_until_idle()
    assert b.cached_tokens == 107
    # The decode-written K/V served from the tree give what a cold prefill gives.
    cold = engine_factory(capacity_tokens=2000)
    c = cold.submit(Request(ids=follow, max_new_tokens=2))
    cold.run_until_idle()
    assert c.cached_tokens == 0 and c.output_ids == b.output_ids
    assert eng.cache.locked_tokens == 0 and eng.load()["num_used_tokens"] == eng.cache.total_tokens


def test_decode_attends_over_bucketed_key_lengths(engine_factory, tiny_model, monkeypatch):
    """Decode shapes repeat (kv length padded to DECODE_KV_BUCKET) and the tokens are those of
    an engine that attends over exactly the live length."""
    from kvroute_gpu_worker import engine as engine_mod

    seen = []
    real = tiny_model.decode

    def spy(ids, positions, kv, max_len):
        seen.append((int(ids.shape[0]), max_len))
        return real(ids, positions, kv, max_len)

    monkeypatch.setattr(tiny_model, "decode", spy)
    prompts = [list(range(100, 350)), list(range(500, 530))]  # 250 and 30 tokens, 12 new each
    eng = engine_factory(chunked_prefill_size=512)
    padded = [eng.submit(Request(ids=p, max_new_tokens=12)) for p in prompts]
    eng.run_until_idle()
    assert seen and all(n % engine_mod.DECODE_KV_BUCKET == 0 for _, n in seen)
    # 250 + 12 tokens cross one bucket boundary: at most two lengths per batch size.
    assert len({n for _, n in seen}) <= 2 < len(seen)
    monkeypatch.setattr(engine_mod, "DECODE_KV_BUCKET", 1)
    seen.clear()
    eng1 = engine_factory(chunked_prefill_size=512)
    exact = [eng1.submit(Request(ids=p, max_new_tokens=12)) for p in prompts]
    eng1.run_until_idle()
    assert len({n for _, n in seen}) > 2  # a new length every step without the bucket
    assert [r.output_ids for r in padded] == [r.output_ids for r in exact]
