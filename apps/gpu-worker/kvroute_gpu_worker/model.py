"""A Llama-style decoder with seeded random weights: RMSNorm, rotary embeddings,
grouped-query attention, SwiGLU.

Weights are random because timing does not depend on their values and no weights
can be downloaded; the shapes are the real ones, so the FLOPs and bytes moved per
token are those of the named model. Rotary scaling (Llama 3's long-context
"llama3" rope type) is left out: it changes values, not cost.

KV layout everywhere: one tensor ``[layers, 2 (k/v), kv_heads, tokens, head_dim]``
per sequence (prefill) or ``[layers, 2, rows, kv_heads, capacity, head_dim]`` for
the decode batch, so a prefix-cache hit is one slice copy, not a per-layer loop.
"""

from __future__ import annotations

import math
from typing import Dict, List, Optional, Tuple

import torch
import torch.nn.functional as F

from .shapes import SHAPES, ModelShape, get_shape

__all__ = ["SHAPES", "HAS_SDPA", "LlamaModel", "ModelShape", "get_shape"]


HAS_SDPA = hasattr(F, "scaled_dot_product_attention")

try:  # torch >= 2.3: bottom-right causal mask that still dispatches to the fused kernels
    from torch.nn.attention.bias import causal_lower_right as _causal_lower_right  # type: ignore
except Exception:  # pragma: no cover - depends on torch version
    _causal_lower_right = None


def _rms_norm(x: torch.Tensor, w: torch.Tensor, eps: float = 1e-5) -> torch.Tensor:
    xf = x.float()
    xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    return xf.to(x.dtype) * w


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


class LlamaModel:
    """Plain tensors, no nn.Module: the engine owns the KV memory, the model only computes."""

    def __init__(self, shape: ModelShape, device: str = "cpu", dtype: Optional[torch.dtype] = None,
                 seed: int = 0, attention: str = "auto", cudnn_sdpa: bool = False) -> None:
        self.shape = shape
        self.device = torch.device(device)
        if self.device.type == "cuda" and not cudnn_sdpa and hasattr(torch.backends.cuda, "enable_cudnn_sdp"):
            # cuDNN's SDPA builds an execution plan per new attention shape (tens of ms each),
            # and decode meets a new shape whenever the batch or its padded length changes.
            # Serving engines run shape-stable kernels; the flash / memory-efficient backends
            # behave like them. Process-wide, like the engine: one model per worker process.
            torch.backends.cuda.enable_cudnn_sdp(False)
        self.cudnn_sdpa = cudnn_sdpa and self.device.type == "cuda"
        self.dtype = dtype or (torch.bfloat16 if self.device.type == "cuda" else torch.float32)
        if attention == "auto":
            attention = "sdpa" if HAS_SDPA else "explicit"
        if attention not in ("sdpa", "explicit"):
            raise ValueError(f"attention must be 'sdpa', 'explicit' or 'auto', got {attention!r}")
        if attention == "sdpa" and not HAS_SDPA:
            raise ValueError(f"attention 'sdpa' needs torch >= 2.0 (this is torch {torch.__version__})")
        self.attention = attention
        s = shape
        self.groups = s.num_heads // s.num_kv_heads
        self.q_dim = s.num_heads * s.head_dim
        self.kv_dim = s.num_kv_heads * s.head_dim
        gen = torch.Generator(device=self.device)
        gen.manual_seed(seed)

        def rand(*dims: int, std: float = 0.02) -> torch.Tensor:
            # Drawn in fp32 then cast: bf16 normal_ is not implemented on every torch/device pair.
            t = torch.empty(*dims, device=self.device, dtype=torch.float32)
            t.normal_(0.0, std, generator=gen)
            return t.to(self.dtype)

        ones = lambda n: torch.ones(n, device=self.device, dtype=self.dtype)  # noqa: E731
        self.embed = rand(s.vocab_size, s.hidden_size)
        self.layers: List[Dict[str, torch.Tensor]] = []
        for _ in range(s.num_layers):
            self.layers.append({
                "attn_norm": ones(s.hidden_size),
                # q, k and v in one matmul, gate and up in another: fewer kernel launches per layer.
                "wqkv": rand(s.hidden_size, self.q_dim + 2 * self.kv_dim),
                "wo": rand(self.q_dim, s.hidden_size),
                "mlp_norm": ones(s.hidden_size),
                "w_gate_up": rand(s.hidden_size, 2 * s.intermediate_size),
                "w_down": rand(s.intermediate_size, s.hidden_size),
            })
        self.final_norm = ones(s.hidden_size)
        self.lm_head = self.embed if s.tie_embeddings else rand(s.vocab_size, s.hidden_size)
        inv = 1.0 / (s.rope_theta ** (torch.arange(0, s.head_dim, 2, device=self.device, dtype=torch.float32) / s.head_dim))
        self._inv_freq = inv

    # ---- pieces -------------------------------------------------------------------

    def param_count(self) -> int:
        n = self.embed.numel() + self.final_norm.numel()
        if not self.shape.tie_embeddings:
            n += self.lm_head.numel()
        for layer in self.layers:
            n += sum(t.numel() for t in layer.values())
        return n

    def new_kv(self, tokens: int) -> torch.Tensor:
        s = self.shape
        return torch.empty(s.num_layers, 2, s.num_kv_heads, tokens, s.head_dim, device=self.device, dtype=self.dtype)

    def _rope(self, positions: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        freqs = positions.to(torch.float32)[:, None] * self._inv_freq[None, :]
        emb = torch.cat((freqs, freqs), dim=-1)
        return emb.cos().to(self.dtype), emb.sin().to(self.dtype)

    def embed_ids(self, ids: torch.Tensor) -> torch.Tensor:
        # Routing ids are uint32 groups of UTF-8 bytes; the model only needs *an*
        # embedding per id, so they wrap into the vocabulary.
        return self.embed[ids.remainder(self.shape.vocab_size)]

    def _mlp(self, layer: Dict[str, torch.Tensor], x: torch.Tensor) -> torch.Tensor:
        h = _rms_norm(x, layer["mlp_norm"])
        gu = h @ layer["w_gate_up"]
        g, u = gu.split(self.shape.intermediate_size, dim=-1)
        return x + (F.silu(g) * u) @ layer["w_down"]

    def _logits(self, h_last: torch.Tensor) -> torch.Tensor:
        return (_rms_norm(h_last, self.final_norm) @ self.lm_head.t()).float()

    # ---- prefill: one sequence, one chunk -------------------------------------------

    def prefill(self, ids: torch.Tensor, kv: torch.Tensor, start: int) -> torch.Tensor:
        """Runs tokens ``ids`` at positions ``start..start+n`` of one sequence.

        ``kv`` is the sequence's buffer ``[L, 2, kvh, >= start+n, hd]`` whose first ``start``
        positions already hold the past (from the radix cache or earlier chunks); this chunk's
        K/V are written into it. Returns the last position's logits ``[vocab]`` (fp32).
        """
        s = self.shape
        n = int(ids.shape[0])
        end = start + n
        cos, sin = self._rope(torch.arange(start, end, device=self.device))
        x = self.embed_ids(ids)
        for li, layer in enumerate(self.layers):
            h = _rms_norm(x, layer["attn_norm"])
            qkv = h @ layer["wqkv"]
            q, k, v = qkv.split([self.q_dim, self.kv_dim, self.kv_dim], dim=-1)
            q = q.view(n, s.num_heads, s.head_dim).transpose(0, 1)
            k = k.view(n, s.num_kv_heads, s.head_dim).transpose(0, 1)
            v = v.view(n, s.num_kv_heads, s.head_dim).transpose(0, 1)
            q = q * cos + _rotate_half(q) * sin
            k = k * cos + _rotate_half(k) * sin
            kv[li, 0, :, start:end] = k
            kv[li, 1, :, start:end] = v
            keys = kv[li, 0, :, :end]
            vals = kv[li, 1, :, :end]
            o = self._prefill_attention(q, keys, vals, start)
            x = x + o.transpose(0, 1).reshape(n, self.q_dim) @ layer["wo"]
            x = self._mlp(layer, x)
        return self._logits(x[-1])

    def _prefill_attention(self, q: torch.Tensor, keys: torch.Tensor, vals: torch.Tensor, past: int) -> torch.Tensor:
        n, total = q.shape[1], keys.shape[1]
        if self.groups > 1:
            keys = keys.repeat_interleave(self.groups, dim=0)
            vals = vals.repeat_interleave(self.groups, dim=0)
        if self.attention == "sdpa":
            if past == 0:
                return F.scaled_dot_product_attention(q[None], keys[None], vals[None], is_causal=True)[0]
            if _causal_lower_right is not None:
                mask = _causal_lower_right(n, total)
            else:
                mask = self._causal_mask(n, total, past)
            return F.scaled_dot_product_attention(q[None], keys[None], vals[None], attn_mask=mask)[0]
        scores = (q.float() @ keys.float().transpose(-1, -2)) / math.sqrt(q.shape[-1])
        scores = scores.masked_fill(~self._causal_mask(n, total, past), float("-inf"))
        return (scores.softmax(-1) @ vals.float()).to(q.dtype)

    def _causal_mask(self, n: int, total: int, past: int) -> torch.Tensor:
        qpos = torch.arange(past, past + n, device=self.device)[:, None]
        kpos = torch.arange(total, device=self.device)[None, :]
        return kpos <= qpos

    # ---- decode: one token for each of B sequences ---------------------------------

    def decode(self, ids: torch.Tensor, positions: torch.Tensor, kv: torch.Tensor, max_len: int) -> torch.Tensor:
        """One decode step for rows ``0..B-1`` of the batch buffer ``kv`` ``[L, 2, rows, kvh, cap, hd]``.

        Row b's new token sits at ``positions[b]`` (its current length); keys past a row's own
        length are masked, so rows of different lengths share one padded attention call.
        ``max_len`` is at least max(positions)+1 (the engine pads it to a bucket so the
        attention shape repeats across steps; padded keys are masked like any row's tail).
        Returns logits ``[B, vocab]`` (fp32).
        """
        s = self.shape
        b = int(ids.shape[0])
        rows = torch.arange(b, device=self.device)
        cos, sin = self._rope(positions)
        cos, sin = cos[:, None, :], sin[:, None, :]
        kpos = torch.arange(max_len, device=self.device)
        valid = (kpos[None, :] <= positions[:, None])[:, None, None, :]  # [B, 1, 1, max_len]
        x = self.embed_ids(ids)
        for li, layer in enumerate(self.layers):
            h = _rms_norm(x, layer["attn_norm"])
            qkv = h @ layer["wqkv"]
            q, k, v = qkv.split([self.q_dim, self.kv_dim, self.kv_dim], dim=-1)
            q = q.view(b, s.num_heads, s.head_dim)
            k = k.view(b, s.num_kv_heads, s.head_dim)
            v = v.view(b, s.num_kv_heads, s.head_dim)
            q = q * cos + _rotate_half(q) * sin
            k = k * cos + _rotate_half(k) * sin
            kv[li, 0, rows, :, positions] = k
            kv[li, 1, rows, :, positions] = v
            keys = kv[li, 0, :b, :, :max_len]
            vals = kv[li, 1, :b, :, :max_len]
            # GQA without copying K/V: the G query heads that share a KV head become G "query
            # positions" of that head.
            qg = q.view(b, s.num_kv_heads, self.groups, s.head_dim)
            if self.attention == "sdpa":
                o = F.scaled_dot_product_attention(qg, keys, vals, attn_mask=valid)
            else:
                sc = (qg.float() @ keys.float().transpose(-1, -2)) / math.sqrt(s.head_dim)
                sc = sc.masked_fill(~valid, float("-inf"))
                o = (sc.softmax(-1) @ vals.float()).to(q.dtype)
            x = x + o.reshape(b, self.q_dim) @ layer["wo"]
            x = self._mlp(layer, x)
        return self._logits(x)
