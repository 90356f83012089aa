"""The HTTP surface on the standard library's ThreadingHTTPServer.

One thread per connection parses and waits on its request's event queue; the
engine thread does the compute. Response shapes follow apps/mock-worker's
responses.ts, so the router and the validate harness see one dialect.
"""

from __future__ import annotations

import json
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Dict, Optional, Tuple

import torch

from .engine import ContextLengthError, Engine, Request
from .protocol import PARSERS, ApiError, Parsed, bad, parse_body
from .tokenizer import detokenize_one

MAX_BODY_BYTES = 64 * 1024 * 1024
ENGINE_NAME = "kvroute-gpu-worker"


class WorkerServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, addr: Tuple[str, int], engine: Engine, model_name: str, info: Dict[str, Any]) -> None:
        super().__init__(addr, Handler)
        self.engine = engine
        self.model_name = model_name
        self.info = info
        self.started = time.time()

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://{host}:{port}"


def _sse(data: Any) -> bytes:
    return b"data: " + json.dumps(data, ensure_ascii=False, separators=(",", ":")).encode("utf-8") + b"\n\n"


_SSE_DONE = b"data: [DONE]\n\n"


def _too_large() -> ApiError:
    return ApiError(413, f"Request body is larger than the limit of {MAX_BODY_BYTES} bytes", None, "payload_too_large")


class Handler(BaseHTTPRequestHandler):
    server: WorkerServer
    protocol_version = "HTTP/1.1"  # keep-alive: the router's connection pool reuses sockets

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
        pass  # one line per request would dominate the worker log under load

    # ---- plumbing -------------------------------------------------------------------

    def _send_json(self, status: int, body: Any, extra: Optional[Dict[str, str]] = None) -> None:
        data = json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for k, v in (extra or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(data)

    def _send_text(self, status: int, text: str, ctype: str) -> None:
        data = text.encode("utf-8")
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _send_error(self, err: ApiError) -> None:
        self._send_json(err.status, err.body())

    def _read_body(self) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            chunks = []
            total = 0
            while True:
                size = int(self.rfile.readline().strip().split(b";")[0] or b"0", 16)
                if size == 0:
                    self.rfile.readline()
                    break
                total += size
                if total > MAX_BODY_BYTES:
                    raise _too_large()
                chunks.append(self.rfile.read(size))
                self.rfile.readline()
            return b"".join(chunks)
        length = int(self.headers.get("Content-Length") or 0)
        if length > MAX_BODY_BYTES:
            raise _too_large()
        return self.rfile.read(length) if length > 0 else b""

    def _chunk(self, data: bytes) -> None:
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()

    # ---- routes -----------------------------------------------------------------------

    def do_GET(self) -> None:  # noqa: N802 - stdlib naming
        path = self.path.split("?", 1)[0]
        srv = self.server
        if path in ("/health", "/health_generate"):
            self._send_json(200, {})
        elif path == "/get_server_info":
            self._send_json(200, srv.info)
        elif path == "/v1/models":
            self._send_json(200, {"object": "list", "data": [
                {"id": srv.model_name, "object": "model", "created": int(srv.started), "owned_by": "kvroute",
                 "max_model_len": srv.engine.context_length}]})
        elif path == "/v1/loads":
            self._send_json(200, {"dp_size": 1, "loads": [{"dp_rank": 0, **srv.engine.load()}]})
        elif path == "/metrics":
            self._send_text(200, render_metrics(srv.engine), "text/plain; version=0.0.4; charset=utf-8")
        elif path in PARSERS:
            self._send_json(405, ApiError(405, f"Method GET not allowed on {path}; use POST", None,
                                          "method_not_allowed").body())
        else:
            self._not_found("GET", path)

    def do_POST(self) -> None:  # noqa: N802
        path = self.path.split("?", 1)[0]
        parser = PARSERS.get(path)
        try:
            raw = self._read_body()
        except ApiError as err:
            self.close_connection = True
            self._send_error(err)
            return
        if path == "/flush_cache":
            if self.server.engine.flush():
                self._send_json(200, {"message": "Cache flushed."})
            else:
                self._send_json(400, ApiError(400, "Cache not flushed: requests are running or waiting", None,
                                              "engine_busy").body())
            return
        if parser is None:
            self._not_found("POST", path)
            return
        try:
            parsed = parser(parse_body(raw))
            self._check_rank(parsed)
            if not parsed.ids:
                raise bad("The prompt is empty: it has no tokens", parsed.prompt_param, "invalid_value")
            try:
                self.server.engine.check_fits(len(parsed.ids), parsed.max_new_tokens)
            except ContextLengthError as exc:
                raise bad(str(exc), parsed.prompt_param, "context_length_exceeded") from None
        except ApiError as err:
            self._send_error(err)
            return
        self._serve(parsed)

    def _not_found(self, method: str, path: str) -> None:
        self._send_error(ApiError(404, f"Invalid URL ({method} {path})", None, "unknown_url",
                                  type_="invalid_request_error"))

    def _check_rank(self, parsed: Parsed) -> None:
        header = self.headers.get("X-Data-Parallel-Rank")
        if header is not None:
            try:
                rank = int(header.strip())
            except ValueError:
                raise bad(f"Header 'X-Data-Parallel-Rank' must be an integer, got {header!r}",
                          "X-Data-Parallel-Rank", "invalid_rank") from None
            if rank != 0:
                raise bad(f"DP rank {rank} is out of range: this worker has dp_size 1",
                          "X-Data-Parallel-Rank", "invalid_rank")
        if parsed.routed_rank is not None and parsed.routed_rank != 0:
            raise bad(f"routed_dp_rank {parsed.routed_rank} is out of range: this worker has dp_size 1",
                      "routed_dp_rank", "invalid_rank")

    # ---- generation -------------------------------------------------------------------

    def _serve(self, p: Parsed) -> None:
        srv = self.server
        prefix = {"generate": "", "completion": "cmpl-", "chat": "chatcmpl-"}[p.kind]
        rid = p.rid or prefix + uuid.uuid4().hex[:24]
        # do_POST checked that the prompt is non-empty and fits, so submit() cannot refuse it.
        req = srv.engine.submit(Request(ids=p.ids, max_new_tokens=p.max_new_tokens, rid=rid))
        out = _Outcome(p.kind, rid, srv.model_name, len(p.ids))
        if not p.stream:
            self._serve_blocking(req, out)
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        try:
            if p.kind == "chat":
                self._chunk(_sse(out.chunk({"index": 0, "delta": {"role": "assistant", "content": ""},
                                            "logprobs": None, "finish_reason": None})))
            while True:
                ev = req.events.get()
                if ev[0] == "error":
                    self._chunk(_sse(ApiError(500, ev[1], None, "internal_error").body()) + _SSE_DONE)
                    break
                if ev[0] == "finish":
                    out.finish(ev[1])
                    self._chunk(out.stream_end())
                    break
                delta = out.add(ev)
                self._chunk(out.stream_delta(delta))
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError, OSError):
            # The client went away: free the request's slot and KV now, not at max_new_tokens.
            srv.engine.abort(req)
            self.close_connection = True

    def _serve_blocking(self, req: Request, out: "_Outcome") -> None:
        while True:
            ev = req.events.get()
            if ev[0] == "error":
                self._send_error(ApiError(500, ev[1], None, "internal_error"))
                return
            if ev[0] == "finish":
                out.finish(ev[1])
                self._send_json(200, out.final_body())
                return
            out.add(ev)


class _Outcome:
    """What a request produced so far, rendered in the three API dialects."""

    def __init__(self, kind: str, rid: str, model: str, prompt_tokens: int) -> None:
        self.kind, self.id, self.model = kind, rid, model
        self.created = int(time.time())
        self.prompt_tokens = prompt_tokens
        self.cached_tokens = 0
        self.completion_tokens = 0
        self.text = ""
        self.finished = False
        self.e2e_latency = 0.0

    def add(self, ev: tuple) -> str:
        if ev[0] == "first":
            self.cached_tokens = ev[2]
        delta = detokenize_one(ev[1])
        self.text += delta
        self.completion_tokens += 1
        return delta

    def finish(self, info: Dict[str, Any]) -> None:
        self.finished = True
        self.cached_tokens = info["cached_tokens"]
        self.completion_tokens = info["completion_tokens"]
        self.e2e_latency = info["e2e_latency"]

    def usage(self) -> Dict[str, Any]:
        return {"prompt_tokens": self.prompt_tokens, "completion_tokens": self.completion_tokens,
                "total_tokens": self.prompt_tokens + self.completion_tokens,
                "prompt_tokens_details": {"cached_tokens": self.cached_tokens}}

    def meta_info(self) -> Dict[str, Any]:
        return {"id": self.id, "prompt_tokens": self.prompt_tokens, "completion_tokens": self.completion_tokens,
                "cached_tokens": self.cached_tokens,
                "finish_reason": {"type": "length", "length": self.completion_tokens} if self.finished else None,
                "e2e_latency": self.e2e_latency, "dp_rank": 0}

    def final_body(self) -> Dict[str, Any]:
        if self.kind == "generate":
            return {"text": self.text, "meta_info": self.meta_info()}
        if self.kind == "completion":
            return {"id": self.id, "object": "text_completion", "created": self.created, "model": self.model,
                    "choices": [{"index": 0, "text": self.text, "logprobs": None, "finish_reason": "length"}],
                    "usage": self.usage()}
        return {"id": self.id, "object": "chat.completion", "created": self.created, "model": self.model,
                "choices": [{"index": 0, "message": {"role": "assistant", "content": self.text},
                             "logprobs": None, "finish_reason": "length"}],
                "usage": self.usage()}

    def chunk(self, choice: Optional[Dict[str, Any]], with_usage: bool = False) -> Dict[str, Any]:
        c: Dict[str, Any] = {"id": self.id, "object": "chat.completion.chunk" if self.kind == "chat" else "text_completion",
                             "created": self.created, "model": self.model, "choices": [choice] if choice else []}
        if with_usage:
            c["usage"] = self.usage()
        return c

    def stream_delta(self, delta: str) -> bytes:
        if self.kind == "generate":
            return _sse({"text": self.text, "meta_info": self.meta_info()})  # SGLang streams cumulative text
        if self.kind == "completion":
            return _sse(self.chunk({"index": 0, "text": delta, "logprobs": None, "finish_reason": None}))
        return _sse(self.chunk({"index": 0, "delta": {"content": delta}, "logprobs": None, "finish_reason": None}))

    def stream_end(self) -> bytes:
        if self.kind == "generate":
            return _sse({"text": self.text, "meta_info": self.meta_info()}) + _SSE_DONE
        fin = ({"index": 0, "delta": {}, "logprobs": None, "finish_reason": "length"} if self.kind == "chat"
               else {"index": 0, "text": "", "logprobs": None, "finish_reason": "length"})
        # Usage rides on a last chunk with no choices, as OpenAI sends it with include_usage.
        return _sse(self.chunk(fin)) + _sse(self.chunk(None, with_usage=True)) + _SSE_DONE


_COUNTERS = [
    ("kvroute_worker_prompt_tokens_total", "prompt_tokens_total", "Prompt tokens of admitted requests."),
    ("kvroute_worker_cached_tokens_total", "cached_tokens_total", "Prompt tokens served from the radix cache."),
    ("kvroute_worker_generation_tokens_total", "generation_tokens_total", "Output tokens generated."),
    ("kvroute_worker_requests_total", "requests_total", "Requests finished."),
    ("kvroute_worker_prefill_tokens_total", "prefill_tokens_total", "Prompt tokens actually computed by prefill."),
    ("kvroute_worker_prefill_seconds_total", "prefill_ms_total", "Time spent in prefill forwards."),
    ("kvroute_worker_decode_steps_total", "decode_steps_total", "Batched decode steps run."),
    ("kvroute_worker_decode_seconds_total", "decode_ms_total", "Time spent in decode forwards."),
]


def render_metrics(engine: Engine) -> str:
    lines = []
    m = dict(engine.metrics)
    for name, key, help_ in _COUNTERS:
        v = m.get(key, 0.0)
        if key.endswith("_ms_total"):
            v = v / 1000.0
        lines += [f"# HELP {name} {help_}", f"# TYPE {name} counter", f'{name}{{dp_rank="0"}} {_num(v)}']
    ld = engine.load()
    gauges = [
        ("kvroute_worker_num_running_reqs", ld["num_running_reqs"], "Requests prefilling or decoding."),
        ("kvroute_worker_num_waiting_reqs", ld["num_waiting_reqs"], "Requests in the FCFS queue."),
        ("kvroute_worker_num_used_tokens", ld["num_used_tokens"], "KV tokens in use (radix tree + private)."),
        ("kvroute_worker_max_total_num_tokens", ld["max_total_num_tokens"], "KV capacity in tokens."),
        ("kvroute_worker_cache_tokens", engine.cache.total_tokens, "Tokens held by the radix cache."),
        ("kvroute_worker_cache_evicted_tokens_total", engine.cache.evicted_tokens, "Tokens evicted from the radix cache."),
    ]
    for name, v, help_ in gauges:
        kind = "counter" if name.endswith("_total") else "gauge"
        lines += [f"# HELP {name} {help_}", f"# TYPE {name} {kind}", f'{name}{{dp_rank="0"}} {_num(v)}']
    return "\n".join(lines) + "\n"


def _num(v: float) -> str:
    return str(int(v)) if float(v).is_integer() else repr(float(v))


def server_info(engine: Engine, model_name: str, extra: Dict[str, Any]) -> Dict[str, Any]:
    cfg = engine.config
    return {
        "dp_size": 1,
        "model_path": model_name,
        "max_total_num_tokens": cfg.capacity_tokens,
        "page_size": cfg.page_size,
        "chunked_prefill_size": cfg.chunked_prefill_size,
        "max_running_requests": cfg.max_running_requests,
        "context_length": engine.context_length,
        "engine": ENGINE_NAME,
        "torch": torch.__version__,
        **extra,
    }
