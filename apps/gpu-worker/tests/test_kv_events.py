"""The radix cache's KV events on the vLLM/SGLang wire, read back by a ZMQ subscriber."""

import struct
import time

import msgpack
import pytest
import zmq

from kvroute_gpu_worker.__main__ import kv_events_publisher
from kvroute_gpu_worker.kv_events import KvEventPublisher
from kvroute_gpu_worker.radix_cache import RadixCache
from test_radix_cache import kv_for


@pytest.fixture
def wire():
    pub = KvEventPublisher("tcp://127.0.0.1:0", "tcp://127.0.0.1:0", block_size=4)
    ctx = zmq.Context.instance()
    sub = ctx.socket(zmq.SUB)
    sub.setsockopt(zmq.LINGER, 0)
    sub.connect(pub.endpoint)
    sub.setsockopt(zmq.SUBSCRIBE, b"")
    time.sleep(0.3)  # a SUB socket misses what is sent before its subscription arrives
    yield pub, sub
    sub.close(0)
    pub.close()


def recv(sub, timeout_ms=2000):
    assert sub.poll(timeout_ms), "no event batch arrived"
    topic, seq, payload = sub.recv_multipart()
    batch = msgpack.unpackb(payload, raw=False)
    return topic, int.from_bytes(seq, "big"), batch


def test_store_evict_and_reset_publish_the_engines_wire_format(wire):
    pub, sub = wire
    cache = RadixCache(capacity_tokens=64)
    cache.hooks = pub
    cache.insert(list(range(1, 11)), kv_for(list(range(1, 11))))
    topic, seq, batch = recv(sub)
    assert (topic, seq) == (b"", 0)
    ts, events = batch
    assert isinstance(ts, float) and abs(ts - time.time()) < 60
    (stored,) = events
    assert stored[0] == "BlockStored"
    hashes, parent, tokens, block_size, lora_id, medium = stored[1:]
    assert len(hashes) == 2 and parent is None and tokens == list(range(1, 9))
    assert (block_size, lora_id, medium) == (4, None, "GPU")
    assert all(0 <= h < 2**64 for h in hashes)
    # A prompt diverging in block 1 chains its new block from block 0's hash.
    cache.insert([1, 2, 3, 4, 50, 51, 52, 53], kv_for([1, 2, 3, 4, 50, 51, 52, 53]))
    _, seq, (_, (child,)) = recv(sub)
    assert seq == 1 and child[0] == "BlockStored"
    assert child[2] == hashes[0] and child[3] == [50, 51, 52, 53]
    # Eviction of the LRU leaf (tokens 5..10, blocks 1) removes the block it held.
    cache.evict(6)
    _, seq, (_, (removed,)) = recv(sub)
    assert seq == 2 and removed == ["BlockRemoved", [hashes[1]], "GPU"]
    cache.reset()
    _, seq, (_, events) = recv(sub)
    assert seq == 3 and events == [["AllBlocksCleared"]]


def test_replay_serves_buffered_batches_then_the_end_marker(wire):
    pub, _ = wire
    cache = RadixCache(capacity_tokens=256)
    cache.hooks = pub
    for k in range(3):
        ids = [100 * (k + 1) + i for i in range(8)]
        cache.insert(ids, kv_for(ids))
    dealer = zmq.Context.instance().socket(zmq.DEALER)
    dealer.setsockopt(zmq.LINGER, 0)
    dealer.connect(pub.replay_endpoint)
    dealer.send_multipart([b"", (1).to_bytes(8, "big")])
    seqs = []
    for _ in range(10):
        assert dealer.poll(2000)
        empty, seq, payload = dealer.recv_multipart()
        assert empty == b""
        if seq == struct.pack(">q", -1):
            assert payload == b""
            break
        seqs.append(int.from_bytes(seq, "big"))
        assert msgpack.unpackb(payload, raw=False)[1][0][0] == "BlockStored"
    dealer.close(0)
    assert seqs == [1, 2]


def test_cli_config_builds_a_publisher_and_rejects_bad_json(capsys):
    pub = kv_events_publisher('{"publisher": "zmq", "endpoint": "tcp://127.0.0.1:0", "topic": "kv"}', 16)
    try:
        assert pub.endpoint.startswith("tcp://127.0.0.1:") and pub.topic == b"kv"
        assert pub.replay_endpoint is None
    finally:
        pub.close()
    with pytest.raises(SystemExit):
        kv_events_publisher("{bad", 16)
    assert "--kv-events-config must be JSON" in capsys.readouterr().err
