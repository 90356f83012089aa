"""KV cache events from the radix cache, on the wire vLLM and SGLang use.

A ZMQ PUB socket sends [topic, 8-byte big-endian sequence, msgpack EventBatch] with the
batch encoded as msgspec's array_like tagged Structs do: ``[ts, [events], dp_rank?]``,
events ``["BlockStored", block_hashes, parent_block_hash, token_ids, block_size, lora_id,
medium]``, ``["BlockRemoved", block_hashes, medium]``, ``["AllBlocksCleared"]``. An optional
ROUTER socket answers replays: a request ``[identity, b"", start_seq]`` gets one
``[identity, b"", seq, payload]`` per buffered batch with seq >= start, then
``[identity, b"", -1 as signed 8 bytes, b""]``. The radix cache holds token segments; a block
is ``block_size`` tokens of a cached path, stored when an insert completes it, removed when an
eviction takes any of its tokens. Block hashes are the first 8 bytes of a sha256 chained
over the parent's hash and the block's tokens, as vLLM's default hashes are 64-bit ints.

Needs Debian's python3-zmq and python3-msgpack; imported only when events are configured.
"""

from __future__ import annotations

import hashlib
import struct
import threading
import time
from collections import deque
from typing import Deque, Dict, List, Optional, Sequence, Tuple

import msgpack
import zmq

END_SEQ = struct.pack(">q", -1)


def _bind(sock: "zmq.Socket", endpoint: str) -> str:
    # Port 0 asks ZMQ for a free one (its wildcard is "*").
    if endpoint.startswith("tcp://") and endpoint.rsplit(":", 1)[1] == "0":
        endpoint = endpoint.rsplit(":", 1)[0] + ":*"
    sock.bind(endpoint)
    return sock.getsockopt_string(zmq.LAST_ENDPOINT)


class KvEventPublisher:
    """Publishes one rank's cache events; wire it with ``cache.hooks = publisher``."""

    def __init__(self, endpoint: str, replay_endpoint: Optional[str] = None, block_size: int = 16,
                 buffer_steps: int = 10_000, topic: str = "") -> None:
        if block_size < 1:
            raise ValueError(f"kv events: block_size must be >= 1, got {block_size}")
        self.block_size = block_size
        self.topic = topic.encode("utf-8")
        self._ctx = zmq.Context.instance()
        self._pub = self._ctx.socket(zmq.PUB)
        self._pub.setsockopt(zmq.LINGER, 0)
        self._pub.setsockopt(zmq.SNDHWM, 100_000)
        self.endpoint = _bind(self._pub, endpoint)
        self._buffer: Deque[Tuple[int, bytes]] = deque(maxlen=buffer_steps)
        self._refs: Dict[int, int] = {}
        self._seq = 0
        self._lock = threading.Lock()
        self._closed = False
        self.replay_endpoint: Optional[str] = None
        self._replay = None
        self._thread: Optional[threading.Thread] = None
        if replay_endpoint:
            self._replay = self._ctx.socket(zmq.ROUTER)
            self._replay.setsockopt(zmq.LINGER, 0)
            self.replay_endpoint = _bind(self._replay, replay_endpoint)
            self._thread = threading.Thread(target=self._serve_replays, name="kv-events-replay", daemon=True)
            self._thread.start()

    # ---- radix cache hooks ------------------------------------------------------

    def _hashes(self, path: Sequence[int], count: int) -> List[int]:
        out: List[int] = []
        prev = b""
        bs = self.block_size
        for j in range(count):
            h = hashlib.sha256(prev)
            h.update(struct.pack(f"<{bs}I", *path[j * bs:(j + 1) * bs]))
            prev = h.digest()[:8]
            out.append(int.from_bytes(prev, "big"))
        return out

    def stored(self, path: Sequence[int], start: int) -> None:
        bs = self.block_size
        first, count = start // bs, len(path) // bs
        if count <= first:
            return
        hashes = self._hashes(path, count)
        events = []
        run: List[int] = []
        run_from = first
        for j in range(first, count + 1):
            fresh = False
            if j < count:
                n = self._refs.get(hashes[j], 0)
                self._refs[hashes[j]] = n + 1
                fresh = n == 0
            if fresh:
                if not run:
                    run_from = j
                run.append(hashes[j])
                continue
            if run:
                parent = hashes[run_from - 1] if run_from > 0 else None
                tokens = list(path[run_from * bs:(run_from + len(run)) * bs])
                events.append(["BlockStored", run, parent, tokens, bs, None, "GPU"])
                run = []
        if events:
            self._publish(events)

    def evicted(self, path: Sequence[int], start: int) -> None:
        bs = self.block_size
        first, count = start // bs, len(path) // bs
        if count <= first:
            return
        hashes = self._hashes(path, count)
        gone = []
        for h in hashes[first:count]:
            n = self._refs.get(h, 0)
            if n <= 1:
                if n == 1:
                    gone.append(h)
                self._refs.pop(h, None)
            else:
                self._refs[h] = n - 1
        if gone:
            self._publish([["BlockRemoved", gone, "GPU"]])

    def cleared(self) -> None:
        self._refs.clear()
        self._publish([["AllBlocksCleared"]])

    # ---- wire -------------------------------------------------------------------

    def _publish(self, events: list) -> None:
        payload = msgpack.packb([time.time(), events], use_bin_type=True)
        with self._lock:
            if self._closed:
                return
            seq = self._seq
            self._seq += 1
            self._buffer.append((seq, payload))
            self._pub.send_multipart([self.topic, seq.to_bytes(8, "big"), payload])

    def _serve_replays(self) -> None:
        sock = self._replay
        assert sock is not None
        while not self._closed:
            try:
                if not sock.poll(100):
                    continue
                frames = sock.recv_multipart()
            except zmq.ZMQError:
                return
            if len(frames) != 3 or len(frames[2]) != 8:
                continue
            ident, _, start = frames
            start_seq = int.from_bytes(start, "big")
            with self._lock:
                batches = [b for b in self._buffer if b[0] >= start_seq]
            for seq, payload in batches:
                sock.send_multipart([ident, b"", seq.to_bytes(8, "big"), payload])
            sock.send_multipart([ident, b"", END_SEQ, b""])

    def close(self) -> None:
        with self._lock:
            self._closed = True
        if self._thread is not None:
            self._thread.join(timeout=1.0)
        self._pub.close(0)
        if self._replay is not None:
            self._replay.close(0)
