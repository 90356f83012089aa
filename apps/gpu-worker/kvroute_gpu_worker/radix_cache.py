"""A radix tree over token ids whose nodes own real KV tensors.

Same contract as SGLang's RadixCache and the sim's RadixCache: match a prefix,
lock the matched path while a request uses it, insert a finished prefill, evict
least-recently-used unlocked leaves when the pool is full. Keys are compared a
page at a time, so every node boundary falls on a page boundary and a match is a
whole number of pages.

Each node's ``kv`` is ``[layers, 2, kv_heads, len(key), head_dim]``; a hit is
rebuilt into a request's buffer by copying the matched nodes' slices in order.
"""

from __future__ import annotations

import heapq
import itertools
from typing import Dict, List, Optional, Sequence, Tuple

import torch

_clock = itertools.count()


class Node:
    __slots__ = ("key", "kv", "children", "parent", "lock_ref", "last_access")

    def __init__(self, key: Tuple[int, ...], kv: Optional[torch.Tensor], parent: Optional["Node"]) -> None:
        self.key = key
        self.kv = kv
        self.children: Dict[Tuple[int, ...], Node] = {}
        self.parent = parent
        self.lock_ref = 0
        self.last_access = next(_clock)


class MatchResult:
    __slots__ = ("matched_tokens", "nodes")

    def __init__(self, matched_tokens: int, nodes: List[Node]) -> None:
        self.matched_tokens = matched_tokens
        # Root-to-leaf path of nodes fully matched; the handle to lock/unlock.
        self.nodes = nodes

    @property
    def last(self) -> Optional[Node]:
        return self.nodes[-1] if self.nodes else None


class RadixCache:
    def __init__(self, capacity_tokens: int, page_size: int = 1) -> None:
        if capacity_tokens <= 0:
            raise ValueError(f"capacity_tokens must be > 0, got {capacity_tokens}")
        if page_size <= 0:
            raise ValueError(f"page_size must be > 0, got {page_size}")
        self.capacity = capacity_tokens
        self.page_size = page_size
        self.root = Node((), None, None)
        self.root.lock_ref = 1  # the root is never evicted
        self.total_tokens = 0
        self.locked_tokens = 0  # tokens in nodes with lock_ref > 0 (not evictable)
        self.evicted_tokens = 0
        # Observer of stores, evictions and resets (kv_events.KvEventPublisher): stored(path,
        # start), evicted(path, start), cleared(); ``path`` is the token ids from the root.
        self.hooks = None

    # ---- queries ----------------------------------------------------------------

    @property
    def evictable_tokens(self) -> int:
        return self.total_tokens - self.locked_tokens

    def _whole_pages(self, ids: Sequence[int]) -> List[int]:
        """``ids`` cut to whole pages: a partial last page is never cached or matched."""
        return list(ids[: len(ids) - len(ids) % self.page_size])

    def _page_key(self, ids: Sequence[int], at: int) -> Tuple[int, ...]:
        return tuple(ids[at : at + self.page_size])

    def _common(self, key: Tuple[int, ...], ids: Sequence[int], at: int) -> int:
        """Common prefix length of ``key`` and ``ids[at:]``, floored to whole pages."""
        n = min(len(key), len(ids) - at)
        i = 0
        while i < n and key[i] == ids[at + i]:
            i += 1
        return i - i % self.page_size

    def _descend(self, ids: List[int], stamp: int) -> Tuple[Node, int, List[Node]]:
        """Walks the longest cached prefix of whole-page ``ids``, splitting a node matched
        part-way and stamping each node on the path; returns the last node, the tokens
        matched and the path. A child is found by its first page, so each step matches at
        least one page."""
        node = self.root
        at = 0
        path: List[Node] = []
        while at < len(ids):
            child = node.children.get(self._page_key(ids, at))
            if child is None:
                break
            common = self._common(child.key, ids, at)
            if common < len(child.key):
                child = self._split(child, common)
            child.last_access = stamp
            path.append(child)
            at += common
            node = child
        return node, at, path

    def match(self, ids: Sequence[int]) -> MatchResult:
        """Longest cached prefix of ``ids`` in whole pages. Splits a node matched part-way,
        so the result's nodes cover exactly ``matched_tokens`` tokens."""
        _, at, path = self._descend(self._whole_pages(ids), next(_clock))
        return MatchResult(at, path)

    def gather(self, match: MatchResult, out: torch.Tensor) -> None:
        """Copies the matched prefix's KV into ``out[..., :matched, :]`` (a request's buffer)."""
        at = 0
        for node in match.nodes:
            n = len(node.key)
            out[:, :, :, at : at + n] = node.kv
            at += n

    # ---- locking ----------------------------------------------------------------

    def lock(self, node: Optional[Node]) -> None:
        while node is not None and node is not self.root:
            if node.lock_ref == 0:
                self.locked_tokens += len(node.key)
            node.lock_ref += 1
            node = node.parent

    def unlock(self, node: Optional[Node]) -> None:
        while node is not None and node is not self.root:
            if node.lock_ref <= 0:
                raise RuntimeError("radix cache: unlock of a node that is not locked")
            node.lock_ref -= 1
            if node.lock_ref == 0:
                self.locked_tokens -= len(node.key)
            node = node.parent

    # ---- insert / evict ---------------------------------------------------------

    def insert(self, ids: Sequence[int], kv: torch.Tensor) -> MatchResult:
        """Inserts the whole pages of ``ids`` with their KV (``kv[..., i, :]`` is token i).

        Only tokens not already in the tree are added (their KV cloned out of ``kv``, so the
        request's buffer can be freed). Returns the path covering the inserted prefix; the
        caller locks it if it must stay resident. Does not evict: the engine makes room first.
        """
        ids = self._whole_pages(ids)
        stamp = next(_clock)
        node, at, path = self._descend(ids, stamp)
        if at < len(ids):
            key = tuple(ids[at:])
            new = Node(key, kv[:, :, :, at : at + len(key)].clone(), node)
            node.children[key[: self.page_size]] = new
            new.last_access = stamp
            self.total_tokens += len(key)
            path.append(new)
            if self.hooks is not None:
                self.hooks.stored(ids, at)
            at += len(key)
        return MatchResult(at, path)

    def new_tokens(self, ids: Sequence[int]) -> int:
        """How many tokens ``insert(ids)`` would add (whole pages not already cached)."""
        ids = self._whole_pages(ids)
        node, at = self.root, 0
        while at < len(ids):
            child = node.children.get(self._page_key(ids, at))
            if child is None:
                break
            common = self._common(child.key, ids, at)
            at += common
            if common < len(child.key):
                break
            node = child
        return len(ids) - at

    def _split(self, child: Node, at: int) -> Node:
        """Splits ``child`` so its first ``at`` tokens become a new parent node; returns it."""
        parent = child.parent
        assert parent is not None and 0 < at < len(child.key)
        head = Node(child.key[:at], child.kv[:, :, :, :at].clone(), parent)
        head.lock_ref = child.lock_ref
        head.last_access = child.last_access
        parent.children[child.key[: self.page_size]] = head
        child.key = child.key[at:]
        child.kv = child.kv[:, :, :, at:].clone()
        child.parent = head
        head.children[child.key[: self.page_size]] = child
        return head

    def evict(self, tokens: int) -> int:
        """Frees at least ``tokens`` tokens if it can, least recently used unlocked leaves first.
        Returns how many were freed."""
        if tokens <= 0:
            return 0
        heap = [(n.last_access, id(n), n) for n in self._leaves() if n.lock_ref == 0]
        heapq.heapify(heap)
        freed = 0
        while heap and freed < tokens:
            _, _, leaf = heapq.heappop(heap)
            parent = leaf.parent
            assert parent is not None
            if self.hooks is not None:
                path = self._path(leaf)
                self.hooks.evicted(path, len(path) - len(leaf.key))
            del parent.children[leaf.key[: self.page_size]]
            freed += len(leaf.key)
            self.total_tokens -= len(leaf.key)
            leaf.kv = None
            if parent is not self.root and not parent.children and parent.lock_ref == 0:
                heapq.heappush(heap, (parent.last_access, id(parent), parent))
        self.evicted_tokens += freed
        return freed

    def _leaves(self) -> List[Node]:
        out, stack = [], [self.root]
        while stack:
            n = stack.pop()
            if not n.children and n is not self.root:
                out.append(n)
            stack.extend(n.children.values())
        return out

    def reset(self) -> None:
        self.root = Node((), None, None)
        self.root.lock_ref = 1
        self.total_tokens = 0
        self.locked_tokens = 0
        if self.hooks is not None:
            self.hooks.cleared()

    def _path(self, node: Node) -> List[int]:
        parts: List[Tuple[int, ...]] = []
        while node is not None and node is not self.root:
            parts.append(node.key)
            node = node.parent
        out: List[int] = []
        for part in reversed(parts):
            out.extend(part)
        return out
