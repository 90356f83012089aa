"""The worker HTTP surface over a real loopback socket, with the tiny model."""

import http.client
import json
import threading
import time

import pytest

from conftest import make_engine
from kvroute_gpu_worker.server import WorkerServer, server_info


@pytest.fixture(scope="module")
def server(tiny_model):
    eng = make_engine(tiny_model, context_length=512, capacity_tokens=4096)
    info = server_info(eng, "test-model", {"shape": "tiny"})
    srv = WorkerServer(("127.0.0.1", 0), eng, "test-model", info)
    eng.start()
    t = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    t.start()
    yield srv
    srv.shutdown()
    srv.server_close()
    eng.stop()


def call(srv, method, path, body=None, headers=None, raw=None):
    conn = http.client.HTTPConnection(*srv.server_address[:2], timeout=30)
    data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
    conn.request(method, path, body=data, headers={"Content-Type": "application/json", **(headers or {})})
    resp = conn.getresponse()
    payload = resp.read().decode()
    conn.close()
    ctype = resp.getheader("Content-Type", "")
    return resp.status, (json.loads(payload) if ctype.startswith("application/json") else payload)


def sse_events(payload):
    out = []
    for block in payload.split("\n\n"):
        if block.startswith("data: "):
            d = block[len("data: "):]
            out.append(d if d == "[DONE]" else json.loads(d))
    return out


def test_info_endpoints(server):
    assert call(server, "GET", "/health") == (200, {})
    st, info = call(server, "GET", "/get_server_info")
    assert st == 200 and info["engine"] == "kvroute-gpu-worker" and info["dp_size"] == 1
    assert info["max_total_num_tokens"] == 4096 and info["chunked_prefill_size"] == 64 and info["page_size"] == 1
    st, models = call(server, "GET", "/v1/models")
    assert models["object"] == "list" and models["data"][0]["id"] == "test-model"
    st, loads = call(server, "GET", "/v1/loads")
    assert loads["dp_size"] == 1 and loads["loads"][0]["dp_rank"] == 0
    assert set(loads["loads"][0]) == {"dp_rank", "num_running_reqs", "num_waiting_reqs", "num_used_tokens",
                                      "max_total_num_tokens"}


def test_generate_reports_cached_tokens_the_sglang_way(server):
    body = {"text": "The quick brown fox jumps over the lazy dog, again and again.", "sampling_params": {"max_new_tokens": 5}}
    st, first = call(server, "POST", "/generate", body)
    assert st == 200
    mi = first["meta_info"]
    assert mi["prompt_tokens"] == 16 and mi["completion_tokens"] == 5 and mi["finish_reason"] == {"type": "length", "length": 5}
    assert len(first["text"].split()) == 5
    st, again = call(server, "POST", "/generate", body)
    # Whole prompt cached except the last token, which is always recomputed.
    assert again["meta_info"]["cached_tokens"] == 15
    assert again["text"] == first["text"]  # greedy from the same KV
    st, ids = call(server, "POST", "/generate", {"input_ids": [4000000000, 7, 7, 7], "sampling_params": {"max_new_tokens": 0}})
    assert st == 200 and ids["meta_info"]["completion_tokens"] == 0 and ids["text"] == ""


def test_metrics_count_prompt_and_cached_tokens(server):
    call(server, "POST", "/generate", {"input_ids": list(range(50, 90)), "sampling_params": {"max_new_tokens": 1}})
    _, before = call(server, "GET", "/metrics")
    call(server, "POST", "/generate", {"input_ids": list(range(50, 90)), "sampling_params": {"max_new_tokens": 1}})
    _, after = call(server, "GET", "/metrics")

    def val(text, name):
        line = next(ln for ln in text.splitlines() if ln.startswith(name + '{dp_rank="0"}'))
        return float(line.split()[-1])

    assert val(after, "kvroute_worker_prompt_tokens_total") - val(before, "kvroute_worker_prompt_tokens_total") == 40
    assert val(after, "kvroute_worker_cached_tokens_total") - val(before, "kvroute_worker_cached_tokens_total") == 39
    assert "# TYPE kvroute_worker_num_used_tokens gauge" in after


def test_completions_and_streaming(server):
    st, c = call(server, "POST", "/v1/completions", {"prompt": "hello there", "max_tokens": 3})
    assert st == 200 and c["object"] == "text_completion" and c["choices"][0]["finish_reason"] == "length"
    assert c["usage"]["prompt_tokens"] == 3 and c["usage"]["completion_tokens"] == 3
    assert c["usage"]["total_tokens"] == 6 and "cached_tokens" in c["usage"]["prompt_tokens_details"]
    st, payload = call(server, "POST", "/v1/completions", {"prompt": "hello there", "max_tokens": 3, "stream": True})
    ev = sse_events(payload)
    assert ev[-1] == "[DONE]"
    assert "".join(e["choices"][0]["text"] for e in ev[:-2]) == c["choices"][0]["text"]
    assert ev[-2]["choices"] == [] and ev[-2]["usage"]["prompt_tokens_details"]["cached_tokens"] == 2


def test_chat_streaming_sse(server):
    body = {"messages": [{"role": "user", "content": "Hi!"}], "max_tokens": 4, "stream": True}
    st, payload = call(server, "POST", "/v1/chat/completions", body)
    assert st == 200
    ev = sse_events(payload)
    assert ev[0]["object"] == "chat.completion.chunk" and ev[0]["choices"][0]["delta"]["role"] == "assistant"
    content = [e["choices"][0]["delta"].get("content") for e in ev[1:5]]
    assert all(content)
    assert ev[5]["choices"][0]["finish_reason"] == "length"
    # "<|user|>\nHi!\n<|assistant|>\n" is 26 bytes -> 7 tokens.
    assert ev[6]["usage"]["prompt_tokens"] == 7 and ev[6]["usage"]["completion_tokens"] == 4
    assert ev[7] == "[DONE]"
    st, full = call(server, "POST", "/v1/chat/completions", {**body, "stream": False})
    assert full["choices"][0]["message"]["content"] == "".join(content)
    assert full["usage"]["prompt_tokens_details"]["cached_tokens"] == 6


def test_generate_stream_sends_cumulative_text(server):
    st, payload = call(server, "POST", "/generate", {"text": "abcdefgh", "sampling_params": {"max_new_tokens": 3},
                                                     "stream": True})
    ev = sse_events(payload)
    texts = [e["text"] for e in ev[:-1]]
    assert texts[1].startswith(texts[0]) and texts[2].startswith(texts[1])
    assert ev[-2]["meta_info"]["finish_reason"]["type"] == "length" and ev[-1] == "[DONE]"


@pytest.mark.parametrize("path,body,param,code", [
    ("/v1/completions", {"max_tokens": 3}, "prompt", "missing_required_parameter"),
    ("/v1/completions", {"prompt": "x", "max_tokens": "3"}, "max_tokens", "invalid_type"),
    ("/v1/completions", {"prompt": "x", "stream": "yes"}, "stream", "invalid_type"),
    ("/v1/completions", {"prompt": [1, -2]}, "prompt[1]", "invalid_type"),
    ("/v1/completions", {"prompt": ""}, "prompt", "invalid_value"),
    ("/v1/chat/completions", {"messages": []}, "messages", "invalid_value"),
    ("/v1/chat/completions", {"messages": [{"content": "x"}]}, "messages[0].role", "missing_required_parameter"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}], "max_tokens": 0}, "max_tokens",
     "invalid_value"),
    ("/generate", {"text": "a", "input_ids": [1]}, "input_ids", "invalid_value"),
    ("/generate", {"text": "a", "sampling_params": {"max_new_tokens": 1.5}}, "sampling_params.max_new_tokens",
     "invalid_type"),
    ("/generate", {"text": "a", "routed_dp_rank": 1}, "routed_dp_rank", "invalid_rank"),
    ("/v1/completions", {"prompt": [1] * 500, "max_tokens": 20}, "prompt", "context_length_exceeded"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "x" * 2100}]}, "messages",
     "context_length_exceeded"),
])
def test_bad_fields_are_400_naming_the_param(server, path, body, param, code):
    st, err = call(server, "POST", path, body)
    assert st == 400
    assert err["error"]["param"] == param and err["error"]["code"] == code
    assert err["error"]["type"] == "invalid_request_error" and err["error"]["message"]


def test_bad_json_unknown_route_and_rank_header(server):
    st, err = call(server, "POST", "/generate", raw=b'{"text": ')
    assert st == 400 and err["error"]["code"] == "invalid_json"
    st, err = call(server, "POST", "/generate", raw=b"[1, 2]")
    assert st == 400 and err["error"]["code"] == "invalid_body"
    st, err = call(server, "GET", "/v2/nothing")
    assert st == 404 and err["error"]["code"] == "unknown_url"
    st, err = call(server, "POST", "/generate", {"text": "a"}, headers={"X-Data-Parallel-Rank": "3"})
    assert st == 400 and err["error"]["param"] == "X-Data-Parallel-Rank"
    st, ok = call(server, "POST", "/generate", {"text": "a", "sampling_params": {"max_new_tokens": 1}},
                  headers={"X-Data-Parallel-Rank": "0"})
    assert st == 200


def test_concurrent_requests_decode_in_one_batch(server):
    results = []
    steps_before = server.engine.metrics["decode_steps_total"]

    def one(i):
        results.append(call(server, "POST", "/generate", {"input_ids": [900 + i] * 30,
                                                          "sampling_params": {"max_new_tokens": 30}}))

    threads = [threading.Thread(target=one, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(st == 200 and r["meta_info"]["completion_tokens"] == 30 for st, r in results)
    # 4 x 29 decode tokens; batching means far fewer steps than that.
    assert server.engine.metrics["decode_steps_total"] - steps_before < 4 * 29


def test_client_disconnect_mid_stream_frees_the_request(server):
    import socket

    finished_before = server.engine.metrics["requests_total"]
    s = socket.create_connection(server.server_address[:2])
    body = json.dumps({"input_ids": [77] * 20, "sampling_params": {"max_new_tokens": 480}, "stream": True}).encode()
    s.sendall(b"POST /generate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: "
              + str(len(body)).encode() + b"\r\n\r\n" + body)
    assert s.recv(4096).startswith(b"HTTP/1.1 200")
    s.close()
    deadline = time.time() + 20
    while time.time() < deadline:
        if server.engine.load()["num_running_reqs"] == 0:
            break
        time.sleep(0.05)
    assert server.engine.load()["num_running_reqs"] == 0
    assert server.engine.metrics["requests_total"] == finished_before  # aborted, never finished


def test_flush_cache_empties_the_radix_tree(server):
    body = {"input_ids": list(range(3000, 3040)), "sampling_params": {"max_new_tokens": 1}}
    call(server, "POST", "/generate", body)
    st, hit = call(server, "POST", "/generate", body)
    assert hit["meta_info"]["cached_tokens"] == 39
    # /flush_cache refuses (400) while anything runs or waits, as SGLang's does; the module's
    # server may still be winding down an earlier test's aborted stream, so wait for idle.
    deadline = time.time() + 20
    while time.time() < deadline:
        load = server.engine.load()
        if load["num_running_reqs"] == 0 and load["num_waiting_reqs"] == 0:
            break
        time.sleep(0.05)
    st, msg = call(server, "POST", "/flush_cache")
    assert st == 200 and server.engine.cache.total_tokens == 0
    st, cold = call(server, "POST", "/generate", body)
    assert cold["meta_info"]["cached_tokens"] == 0
