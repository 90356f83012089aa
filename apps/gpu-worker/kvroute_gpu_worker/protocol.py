"""Request parsing for /generate, /v1/completions and /v1/chat/completions.

A port of packages/protocol/src/parse.ts: the same checks, error codes and
``param`` names, so a client sees the same 400 from the router, the mock worker
and this worker. Errors are OpenAI-shaped (see ApiError.body).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, List, Optional

from .tokenizer import chat_text, parse_json, tokenize

# Engine defaults when the client gives no limit (same table as protocol's DEFAULT_MAX_TOKENS).
DEFAULT_MAX_TOKENS = {"chat": 128, "completion": 16, "generate": 128}


class ApiError(Exception):
    def __init__(self, status: int, message: str, param: Optional[str] = None, code: Optional[str] = None,
                 type_: Optional[str] = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        self.code = code
        self.type = type_ or _error_type(status)

    def body(self) -> Dict[str, Any]:
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}


def _error_type(status: int) -> str:
    if status == 404:
        return "not_found_error"
    if status >= 500:
        return "server_error"
    return "invalid_request_error"


def bad(message: str, param: Optional[str], code: str) -> ApiError:
    return ApiError(400, message, param, code)


@dataclass
class Parsed:
    kind: str
    ids: List[int]
    max_new_tokens: int
    stream: bool = False
    model: Optional[str] = None
    routed_rank: Optional[int] = None
    rid: Optional[str] = None
    prompt_param: str = "prompt"


def _describe(v: Any) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "a boolean"
    if isinstance(v, list):
        return "an array"
    if isinstance(v, dict):
        return "an object"
    if isinstance(v, str):
        s = v if len(v) <= 40 else v[:40] + "..."
        return f'a string ("{s}")'
    if isinstance(v, (int, float)):
        return f"a number ({v})"
    return type(v).__name__


def _wrong_type(param: str, expected: str, got: Any) -> ApiError:
    return bad(f"'{param}' must be {expected}, got {_describe(got)}", param, "invalid_type")


def _missing(param: str) -> ApiError:
    return bad(f"Missing required parameter: '{param}'", param, "missing_required_parameter")


def _is_int(v: Any) -> bool:
    return not isinstance(v, bool) and (isinstance(v, int) or (isinstance(v, float) and v.is_integer()))


def _opt_int(obj: Dict[str, Any], key: str, minimum: int, param: Optional[str] = None) -> Optional[int]:
    param = param or key
    v = obj.get(key)
    if v is None:
        return None
    if not _is_int(v):
        raise _wrong_type(param, "an integer", v)
    if v < minimum:
        raise bad(f"'{param}' must be at least {minimum}, got {int(v)}", param, "invalid_value")
    return int(v)


def _opt_number(obj: Dict[str, Any], key: str, param: Optional[str] = None) -> Optional[float]:
    param = param or key
    v = obj.get(key)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise _wrong_type(param, "a number", v)
    return float(v)


def parse_body(raw: bytes) -> Dict[str, Any]:
    try:
        text = raw.decode("utf-8")
        value = parse_json(text)
    except (UnicodeDecodeError, ValueError) as exc:
        raise bad(f"Request body is not valid JSON: {exc}", None, "invalid_json") from None
    if not isinstance(value, dict):
        raise bad(f"Request body must be a JSON object, got {_describe(value)}", None, "invalid_body")
    return value


def _token_ids(param: str, value: Any) -> List[int]:
    if not isinstance(value, list):
        raise _wrong_type(param, "an array of token ids", value)
    out = []
    for i, v in enumerate(value):
        if not _is_int(v) or v < 0 or v > 0xFFFFFFFF:
            raise bad(f"'{param}[{i}]' must be an integer token id in [0, 4294967295], got {_describe(v)}",
                      f"{param}[{i}]", "invalid_type")
        out.append(int(v))
    return out


def _common(body: Dict[str, Any]) -> Dict[str, Any]:
    out: Dict[str, Any] = {}
    stream = body.get("stream")
    if stream is not None:
        if not isinstance(stream, bool):
            raise _wrong_type("stream", "a boolean", stream)
        out["stream"] = stream
    so = body.get("stream_options")
    if so is not None:
        if not isinstance(so, dict):
            raise _wrong_type("stream_options", "an object", so)
        inc = so.get("include_usage")
        if inc is not None and not isinstance(inc, bool):
            raise _wrong_type("stream_options.include_usage", "a boolean", inc)
    model = body.get("model")
    if model is not None:
        if not isinstance(model, str):
            raise _wrong_type("model", "a string", model)
        out["model"] = model
    # Sampling is greedy whatever the temperature; it is still checked so bad input fails alike.
    _opt_number(body, "temperature")
    rk = body.get("routing_key")
    if rk is not None and not isinstance(rk, str):
        raise _wrong_type("routing_key", "a string", rk)
    rr = _opt_int(body, "routed_dp_rank", 0)
    if rr is not None:
        out["routed_rank"] = rr
    _opt_int(body, "bootstrap_room", 0)
    return out


def _check_message(msg: Any, i: int) -> None:
    at = f"messages[{i}]"
    if not isinstance(msg, dict):
        raise _wrong_type(at, "an object", msg)
    if "role" not in msg:
        raise _missing(f"{at}.role")
    role = msg["role"]
    if not isinstance(role, str) or role == "":
        raise _wrong_type(f"{at}.role", "a non-empty string", role)
    content = msg.get("content")
    if isinstance(content, list):
        for j, part in enumerate(content):
            pat = f"{at}.content[{j}]"
            if not isinstance(part, dict):
                raise _wrong_type(pat, "an object", part)
            if not isinstance(part.get("type"), str):
                raise _wrong_type(f"{pat}.type", "a string", part.get("type"))
            if part["type"] == "text" and not isinstance(part.get("text"), str):
                raise _wrong_type(f"{pat}.text", "a string", part.get("text"))
    elif content is not None and not isinstance(content, str):
        raise _wrong_type(f"{at}.content", "a string, an array of content parts or null", content)
    calls = msg.get("tool_calls")
    if calls is not None and not isinstance(calls, list):
        raise _wrong_type(f"{at}.tool_calls", "an array", calls)


def parse_chat(body: Dict[str, Any]) -> Parsed:
    messages = body.get("messages")
    if "messages" not in body:
        raise _missing("messages")
    if not isinstance(messages, list):
        raise _wrong_type("messages", "an array", messages)
    if not messages:
        raise bad("'messages' must contain at least one message", "messages", "invalid_value")
    for i, m in enumerate(messages):
        _check_message(m, i)
    tools = body.get("tools")
    if tools is not None:
        if not isinstance(tools, list):
            raise _wrong_type("tools", "an array", tools)
        for i, t in enumerate(tools):
            if not isinstance(t, dict):
                raise _wrong_type(f"tools[{i}]", "an object", t)
    common = _common(body)
    mc = _opt_int(body, "max_completion_tokens", 1)
    mt = _opt_int(body, "max_tokens", 1)
    limit = mc if mc is not None else mt
    ids = tokenize(chat_text(messages, tools))
    return Parsed("chat", ids, DEFAULT_MAX_TOKENS["chat"] if limit is None else limit,
                  prompt_param="messages", **common)


def parse_completion(body: Dict[str, Any]) -> Parsed:
    prompt = body.get("prompt")
    if prompt is None:
        raise _missing("prompt")
    common = _common(body)
    limit = _opt_int(body, "max_tokens", 0)
    if isinstance(prompt, str):
        ids = tokenize(prompt)
    elif not isinstance(prompt, list):
        raise _wrong_type("prompt", "a string or an array of token ids", prompt)
    elif prompt and all(_is_int(p) or isinstance(p, (int, float)) and not isinstance(p, bool) for p in prompt):
        ids = _token_ids("prompt", prompt)
    elif len(prompt) == 1 and isinstance(prompt[0], str):
        ids = tokenize(prompt[0])
    elif len(prompt) == 1 and isinstance(prompt[0], list):
        ids = _token_ids("prompt[0]", prompt[0])
    elif not prompt:
        raise bad("'prompt' must not be an empty array", "prompt", "invalid_value")
    else:
        raise bad("'prompt' must be a string or an array of token ids (batches of several prompts are not supported)",
                  "prompt", "invalid_value")
    return Parsed("completion", ids, DEFAULT_MAX_TOKENS["completion"] if limit is None else limit,
                  prompt_param="prompt", **common)


def parse_generate(body: Dict[str, Any]) -> Parsed:
    text, input_ids = body.get("text"), body.get("input_ids")
    if input_ids is not None:
        if text is not None:
            raise bad("Give either 'text' or 'input_ids', not both", "input_ids", "invalid_value")
        ids = _token_ids("input_ids", input_ids)
        param = "input_ids"
    elif text is not None:
        if not isinstance(text, str):
            raise _wrong_type("text", "a string (batched /generate requests are not supported)", text)
        ids = tokenize(text)
        param = "text"
    else:
        raise bad("Missing required parameter: one of 'text' or 'input_ids'", "text", "missing_required_parameter")
    common = _common(body)
    limit = None
    sp = body.get("sampling_params")
    if sp is not None:
        if not isinstance(sp, dict):
            raise _wrong_type("sampling_params", "an object", sp)
        limit = _opt_int(sp, "max_new_tokens", 0, "sampling_params.max_new_tokens")
        _opt_number(sp, "temperature", "sampling_params.temperature")
    rid = body.get("rid")
    if rid is not None and not isinstance(rid, str):
        raise _wrong_type("rid", "a string", rid)
    return Parsed("generate", ids, DEFAULT_MAX_TOKENS["generate"] if limit is None else limit,
                  rid=rid, prompt_param=param, **common)


PARSERS = {"/generate": parse_generate, "/v1/completions": parse_completion, "/v1/chat/completions": parse_chat}
