"""The scheduler: FCFS queue, one prefill at a time (chunked), batched decode.

One engine thread does every tensor operation; HTTP threads only submit requests
and read their event queues. Each loop iteration is one step: the prefill chunk of
the request at the head (if any) plus one decode token for every request that was
already decoding, the "mixed chunk" step that the sim's RankModel models. Only one
request prefills at a time (the sim packs several short ones into one chunk).

Decode is batched: every running request owns one row of a shared padded buffer
``[layers, 2, rows, kv_heads, capacity, head_dim]``; one step feeds one token per
row and masks each row's keys past its own length. Padding costs nothing extra
to build (rows are written in place) and one step's kernels serve the whole batch.
The keys a step attends over are padded up to a multiple of ``DECODE_KV_BUCKET``
(the mask hides the pad), so the attention shape changes once per 256 tokens of
context, not every step: on an H200 each never-seen shape cost ~60 ms (a per-shape
plan build, docs/validation/README.md) against ~12 ms for a step on a seen one.

Memory is counted in tokens, as SGLang's KV pool is: the radix tree's tokens plus
each running request's private tokens (its input tail not in the tree, and its
output). A request is admitted when its uncached input plus max_new_tokens fits
after evicting unlocked LRU leaves; otherwise it waits at the head of the queue.
"""

from __future__ import annotations

import collections
import itertools
import queue
import threading
import time
from dataclasses import dataclass, field
from typing import Deque, Dict, List, Optional, Tuple

import torch

from .model import LlamaModel
from .radix_cache import MatchResult, RadixCache


class ContextLengthError(ValueError):
    def __init__(self, prompt_tokens: int, max_new_tokens: int, limit: int) -> None:
        super().__init__(
            f"This model's maximum context length is {limit} tokens, but the request has "
            f"{prompt_tokens} prompt tokens and asks for {max_new_tokens} new tokens"
        )
        self.prompt_tokens = prompt_tokens
        self.limit = limit


_rid_counter = itertools.count(1)

# Decode attends over keys [0, kv_len) with kv_len rounded up to this (the batch buffer's
# own length granularity, so the padded length always fits in it).
DECODE_KV_BUCKET = 256


@dataclass(eq=False)
class Request:
    ids: List[int]
    max_new_tokens: int
    rid: str = ""
    events: "queue.Queue[tuple]" = field(default_factory=queue.Queue)
    cancelled: bool = False
    # engine-side state
    cached_tokens: int = 0
    prefilled: int = 0
    output_ids: List[int] = field(default_factory=list)
    match: Optional[MatchResult] = None
    kv: Optional[torch.Tensor] = None
    reserved: int = 0
    in_tree: int = 0
    submitted_at: float = 0.0
    first_token_at: float = 0.0
    finished_at: float = 0.0

    def __post_init__(self) -> None:
        if not self.rid:
            self.rid = f"req-{next(_rid_counter)}"


@dataclass
class EngineConfig:
    capacity_tokens: int
    page_size: int = 1
    chunked_prefill_size: int = 8192
    max_running_requests: int = 64
    context_length: int = 4096


class Engine:
    def __init__(self, model: LlamaModel, config: EngineConfig) -> None:
        if config.chunked_prefill_size <= 0:
            raise ValueError("chunked_prefill_size must be > 0")
        self.model = model
        self.config = config
        self.cache = RadixCache(config.capacity_tokens, config.page_size)
        self.context_length = min(config.context_length, config.capacity_tokens)
        self.waiting: Deque[Request] = collections.deque()
        self.prefilling: Optional[Request] = None
        self.running: List[Request] = []
        self._cv = threading.Condition()
        self._stop = False
        self._thread: Optional[threading.Thread] = None
        self._batch_kv: Optional[torch.Tensor] = None
        self._flush_waiters: List[Tuple[threading.Event, Dict[str, bool]]] = []
        self.metrics: Dict[str, float] = collections.defaultdict(float)

    # ---- public, any thread -------------------------------------------------------

    def check_fits(self, prompt_tokens: int, max_new_tokens: int) -> None:
        if prompt_tokens + max_new_tokens > self.context_length:
            raise ContextLengthError(prompt_tokens, max_new_tokens, self.context_length)

    def submit(self, req: Request) -> Request:
        if not req.ids:
            raise ValueError("the prompt has no tokens")
        self.check_fits(len(req.ids), req.max_new_tokens)
        req.submitted_at = time.perf_counter()
        with self._cv:
            self.waiting.append(req)
            self._cv.notify()
        return req

    def abort(self, req: Request) -> None:
        with self._cv:
            req.cancelled = True
            self._cv.notify()

    def load(self) -> Dict[str, int]:
        with self._cv:
            running = len(self.running) + (1 if self.prefilling else 0)
            private = 0
            for r in list(self.running):
                private += len(r.ids) - r.in_tree + len(r.output_ids)
            return {
                "num_running_reqs": running,
                "num_waiting_reqs": len(self.waiting),
                "num_used_tokens": self.cache.total_tokens + private,
                "max_total_num_tokens": self.config.capacity_tokens,
            }

    def flush(self, timeout_s: float = 30.0) -> bool:
        """Empties the radix cache if the engine is idle (SGLang's /flush_cache); False if busy.
        Runs on the engine thread, so no step sees a tree swapped under it."""
        done = threading.Event()
        result: Dict[str, bool] = {}
        with self._cv:
            self._flush_waiters.append((done, result))
            self._cv.notify()
        done.wait(timeout_s)
        return result.get("ok", False)

    def _serve_flushes(self) -> None:
        with self._cv:
            waiters, self._flush_waiters = self._flush_waiters, []
            idle = not self.waiting and not self.running and self.prefilling is None
        if not waiters:
            return
        if idle:
            self.cache.reset()
        for ev, result in waiters:
            result["ok"] = idle
            ev.set()

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="kvroute-engine", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        with self._cv:
            self._stop = True
            self._cv.notify()
        if self._thread:
            self._thread.join(timeout=10)

    # ---- engine thread ------------------------------------------------------------

    def _loop(self) -> None:
        with torch.inference_mode():
            while True:
                with self._cv:
                    while (not self._stop and not self.waiting and not self.running and self.prefilling is None
                           and not self._flush_waiters):
                        self._cv.wait()
                    if self._stop:
                        return
                self._serve_flushes()
                try:
                    self.step()
                except Exception as exc:  # keep serving; fail the requests in hand
                    self._fail_all(exc)

    def step(self) -> bool:
        """One scheduler iteration; returns whether any model work ran. Also used by tests
        and calibration to drive the engine synchronously without the thread."""
        self._drop_cancelled()
        if self.prefilling is None:
            self._admit()
        decoders = len(self.running)
        if self.prefilling is not None:
            self._prefill_chunk(self.prefilling)
            # Mixed step, as SGLang's mixed chunk and the sim's RankModel run it: the requests
            # that were decoding before this chunk also take a step, so a long prefill does
            # not stall them; a request whose prefill just ended starts decoding next step.
            if decoders:
                self._decode_step(decoders)
            return True
        if self.running:
            self._decode_step(decoders)
            return True
        return False

    def run_until_idle(self) -> None:
        with torch.inference_mode():
            while self.waiting or self.running or self.prefilling is not None:
                if not self.step() and self.waiting:
                    raise RuntimeError("engine stalled: the head request cannot be admitted")

    def _fail_all(self, exc: Exception) -> None:
        with self._cv:
            reqs = list(self.waiting) + self.running + ([self.prefilling] if self.prefilling else [])
            self.waiting.clear()
        for r in reqs:
            self._release(r)
            r.events.put(("error", f"engine error: {exc!r}"))
        self.running = []
        self.prefilling = None

    def _private_reserved(self) -> int:
        total = sum(r.reserved for r in self.running)
        if self.prefilling is not None:
            total += self.prefilling.reserved
        return total

    def _over_capacity(self, extra: int) -> int:
        """Tokens past the pool if ``extra`` more were held beside the tree and every
        running request's reservation (> 0: that many must be evicted first)."""
        return self.cache.total_tokens + self._private_reserved() + extra - self.config.capacity_tokens

    def _admit(self) -> None:
        with self._cv:
            if not self.waiting or len(self.running) >= self.config.max_running_requests:
                return
            req = self.waiting[0]
        # At least one token is always computed, to produce the first output token's logits
        # (SGLang matches at most len-1 tokens for the same reason).
        match = self.cache.match(req.ids[: len(req.ids) - 1])
        self.cache.lock(match.last)
        need = len(req.ids) - match.matched_tokens + req.max_new_tokens
        over = self._over_capacity(need)
        if over > 0:
            self.cache.evict(over)
            if self._over_capacity(need) > 0:
                self.cache.unlock(match.last)
                return  # wait for running requests to finish and unlock their prefixes
        with self._cv:
            self.waiting.popleft()
        req.match = match
        req.cached_tokens = match.matched_tokens
        req.prefilled = match.matched_tokens
        req.reserved = need
        req.kv = self.model.new_kv(len(req.ids))
        self.cache.gather(match, req.kv)
        self.metrics["cached_tokens_total"] += match.matched_tokens
        self.metrics["prompt_tokens_total"] += len(req.ids)
        self.prefilling = req

    def _prefill_chunk(self, req: Request) -> None:
        start = req.prefilled
        end = min(len(req.ids), start + self.config.chunked_prefill_size)
        ids = torch.tensor(req.ids[start:end], dtype=torch.int64).to(self.model.device)
        t0 = time.perf_counter()
        logits = self.model.prefill(ids, req.kv, start)
        if end < len(req.ids):
            if self.model.device.type == "cuda":
                torch.cuda.synchronize()
        else:
            token = int(logits.argmax().item())
        self.metrics["prefill_ms_total"] += (time.perf_counter() - t0) * 1000.0
        self.metrics["prefill_tokens_total"] += end - start
        self.metrics["prefill_chunks_total"] += 1
        req.prefilled = end
        if end < len(req.ids):
            return
        self.prefilling = None
        # The prompt's KV goes into the tree now, not at finish, so a request sharing the
        # prefix that arrives while this one decodes already hits.
        self._insert_prompt(req)
        req.first_token_at = time.perf_counter()
        if req.max_new_tokens == 0:
            self._finish(req)
            return
        self._emit(req, token, first=True)
        if len(req.output_ids) >= req.max_new_tokens:
            self._finish(req)
            return
        self._join_batch(req)

    def _insert_prompt(self, req: Request) -> None:
        assert req.kv is not None
        self._move_into_tree(req, req.ids, req.kv)
        req.reserved = len(req.ids) - req.in_tree + req.max_new_tokens

    def _move_into_tree(self, req: Request, ids: List[int], kv: torch.Tensor) -> None:
        """Inserts ``ids`` with their KV and moves ``req``'s lock onto the inserted path. The
        tokens new to the tree were already counted in ``req.reserved``, so only the excess
        over that is evicted for."""
        assert req.match is not None
        over = self._over_capacity(self.cache.new_tokens(ids) - req.reserved)
        if over > 0:
            self.cache.evict(over)
        path = self.cache.insert(ids, kv)
        self.cache.lock(path.last)
        self.cache.unlock(req.match.last)
        req.match = path
        req.in_tree = path.matched_tokens

    def _emit(self, req: Request, token: int, first: bool = False) -> None:
        req.output_ids.append(token)
        self.metrics["generation_tokens_total"] += 1
        if first:
            req.events.put(("first", token, req.cached_tokens))
        else:
            req.events.put(("token", token))

    def _finish(self, req: Request) -> None:
        req.finished_at = time.perf_counter()
        self._release(req)
        self.metrics["requests_total"] += 1
        req.events.put(("finish", {
            "prompt_tokens": len(req.ids),
            "completion_tokens": len(req.output_ids),
            "cached_tokens": req.cached_tokens,
            "e2e_latency": req.finished_at - req.submitted_at,
        }))

    def _release(self, req: Request) -> None:
        if req.match is not None:
            self.cache.unlock(req.match.last)
            req.match = None
        req.kv = None
        req.reserved = 0

    # ---- decode batch -------------------------------------------------------------

    def _ensure_batch(self, rows: int, length: int) -> torch.Tensor:
        s = self.model.shape
        buf = self._batch_kv
        if buf is not None and buf.shape[2] >= rows and buf.shape[4] >= length:
            return buf
        old_rows = buf.shape[2] if buf is not None else 0
        old_len = buf.shape[4] if buf is not None else 0
        # Grow geometrically so joins rarely reallocate; never shrink (the next burst reuses it).
        new_rows = old_rows
        if rows > old_rows:
            new_rows = max(rows, min(max(4, 2 * old_rows), self.config.max_running_requests))
        new_len = old_len
        if length > old_len:
            new_len = max(length, min(int(old_len * 1.5), self.context_length))
            new_len = -(-new_len // DECODE_KV_BUCKET) * DECODE_KV_BUCKET
        nb = torch.zeros(s.num_layers, 2, new_rows, s.num_kv_heads, new_len, s.head_dim,
                         device=self.model.device, dtype=self.model.dtype)
        if buf is not None and self.running:
            n = len(self.running)
            nb[:, :, :n, :, :old_len] = buf[:, :, :n]
        self._batch_kv = nb
        return nb

    def _join_batch(self, req: Request) -> None:
        assert req.kv is not None
        row = len(self.running)
        buf = self._ensure_batch(row + 1, len(req.ids) + req.max_new_tokens)
        buf[:, :, row, :, : len(req.ids)] = req.kv
        req.kv = None  # the prompt's KV now lives in the batch row (and the tree)
        self.running.append(req)

    def _cache_output(self, req: Request, row: int) -> None:
        """SGLang caches a finished request's prompt + output (less the last token, whose KV
        was never computed); the sim does the same, so the pools fill alike."""
        n_out = len(req.output_ids) - 1
        if n_out <= 0 or self._batch_kv is None or req.match is None:
            return
        ids = req.ids + req.output_ids[:n_out]
        # The outputs were reserved as this request's private tokens; they move into the tree.
        self._move_into_tree(req, ids, self._batch_kv[:, :, row, :, : len(ids)])

    def _drop_row(self, i: int) -> None:
        last = len(self.running) - 1
        if i != last and self._batch_kv is not None:
            # Keep rows 0..B-1 dense: the last row moves into the hole.
            self._batch_kv[:, :, i] = self._batch_kv[:, :, last]
            self.running[i] = self.running[last]
        self.running.pop()

    def decode_shape(self, n: int) -> Tuple[int, int]:
        """(rows, kv_len) of the attention a decode step over the first n running requests
        runs: kv_len is the longest row's length rounded up to DECODE_KV_BUCKET (at most the
        batch buffer's length). Calibration uses it to tell first-visit shapes from seen ones."""
        longest = max(len(r.ids) + len(r.output_ids) for r in self.running[:n])
        padded = -(-longest // DECODE_KV_BUCKET) * DECODE_KV_BUCKET
        cap = self._batch_kv.shape[4] if self._batch_kv is not None else padded
        return n, max(longest, min(padded, cap))

    def _decode_step(self, n: int) -> None:
        """One token for rows 0..n-1 (the first n running requests)."""
        assert self._batch_kv is not None
        reqs = self.running[:n]
        dev = self.model.device
        ids = torch.tensor([r.output_ids[-1] for r in reqs], dtype=torch.int64).to(dev)
        pos_list = [len(r.ids) + len(r.output_ids) - 1 for r in reqs]
        positions = torch.tensor(pos_list, dtype=torch.int64).to(dev)
        _, kv_len = self.decode_shape(n)
        t0 = time.perf_counter()
        logits = self.model.decode(ids, positions, self._batch_kv, kv_len)
        tokens = logits.argmax(-1).tolist()
        self.metrics["decode_ms_total"] += (time.perf_counter() - t0) * 1000.0
        self.metrics["decode_steps_total"] += 1
        self.metrics["decode_tokens_total"] += len(reqs)
        done = []
        for i, (r, tok) in enumerate(zip(reqs, tokens)):
            self._emit(r, int(tok))
            if len(r.output_ids) >= r.max_new_tokens:
                done.append(i)
        for i in reversed(done):
            r = self.running[i]
            self._cache_output(r, i)
            self._drop_row(i)
            self._finish(r)

    def _drop_cancelled(self) -> None:
        with self._cv:
            if any(r.cancelled for r in self.waiting):
                self.waiting = collections.deque(r for r in self.waiting if not r.cancelled)
        if self.prefilling is not None and self.prefilling.cancelled:
            self._release(self.prefilling)
            self.prefilling = None
        for i in reversed(range(len(self.running))):
            r = self.running[i]
            if r.cancelled:
                self._drop_row(i)
                self._release(r)
