"""The routing tokenizer of packages/protocol, byte for byte.

The router hashes these ids to pick a rank and the worker keys its radix cache on
the same ids, so a prefix the router thinks is cached on a rank really is. The
ids are not a real vocabulary: each is 4 UTF-8 bytes read as a little-endian
uint32. The model embeds them as ``id % vocab_size`` (see model.py).
"""

from __future__ import annotations

import json
import re
from decimal import Decimal
from typing import Any, List, Sequence

_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def utf8_bytes(text: str) -> bytes:
    # JS TextEncoder turns lone surrogates (possible after JSON.parse of "\ud800")
    # into U+FFFD; Python would refuse to encode them.
    return _LONE_SURROGATE.sub("\ufffd", text).encode("utf-8")


def tokenize(text: str) -> List[int]:
    """UTF-8 bytes in groups of 4, each read as a little-endian uint32, the last zero-padded."""
    data = utf8_bytes(text)
    return [int.from_bytes(data[i : i + 4].ljust(4, b"\0"), "little") for i in range(0, len(data), 4)]


def js_number(x: Any) -> str:
    """ECMAScript Number::toString, so floats print as JSON.stringify prints them (1.0 -> "1")."""
    if isinstance(x, bool):
        return "true" if x else "false"
    if isinstance(x, int) and abs(x) <= 2**53:
        return str(x)
    f = float(x)
    if f != f or f in (float("inf"), float("-inf")):
        return "null"
    if f == 0:
        return "0"
    if f < 0:
        return "-" + js_number(-f)
    # repr gives the shortest round-tripping digits, which is what JS prints too.
    sign, digits, exp = Decimal(repr(f)).as_tuple()
    ds = list(digits)
    while len(ds) > 1 and ds[-1] == 0:
        ds.pop()
        exp += 1
    s = "".join(str(d) for d in ds)
    k = len(s)
    n = exp + k
    if k <= n <= 21:
        return s + "0" * (n - k)
    if 0 < n <= 21:
        return s[:n] + "." + s[n:]
    if -6 < n <= 0:
        return "0." + "0" * (-n) + s
    e = n - 1
    es = ("+" if e >= 0 else "-") + str(abs(e))
    return (s if k == 1 else s[0] + "." + s[1:]) + "e" + es


def _js_string(s: str) -> str:
    out = json.dumps(s, ensure_ascii=False)
    # Well-formed JSON.stringify escapes lone surrogates instead of emitting them.
    return _LONE_SURROGATE.sub(lambda m: "\\u%04x" % ord(m.group(0)), out)


def _is_array_index(key: str) -> bool:
    return key.isdigit() and (key == "0" or key[0] != "0") and int(key) < 2**32 - 1 and key.isascii()


def js_stringify(value: Any) -> str:
    """JSON.stringify of a value that came from JSON.parse (what the router saw)."""
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, (int, float)):
        return js_number(value)
    if isinstance(value, str):
        return _js_string(value)
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(js_stringify(v) for v in value) + "]"
    if isinstance(value, dict):
        # JS objects list integer-like keys first, ascending, then the rest in insertion order.
        keys = list(value.keys())
        idx = sorted((k for k in keys if _is_array_index(k)), key=int)
        rest = [k for k in keys if not _is_array_index(k)]
        return "{" + ",".join(_js_string(k) + ":" + js_stringify(value[k]) for k in idx + rest) + "}"
    raise TypeError(f"cannot stringify {type(value).__name__}")


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def _parse_int(s: str) -> Any:
    v = int(s)
    # JSON.parse reads every number as a double; keep exact ints only where a double is exact.
    return v if abs(v) <= 2**53 else float(s)


def parse_json(raw: str) -> Any:
    """JSON.parse semantics: no NaN/Infinity, big integers become doubles."""
    return json.loads(raw, parse_constant=_reject_constant, parse_int=_parse_int)


def message_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(
            p["text"] for p in content if isinstance(p, dict) and p.get("type") == "text" and isinstance(p.get("text"), str)
        )
    return ""


def chat_text(messages: Sequence[Any], tools: Any = None) -> str:
    """Chat body -> the one canonical text the routing tokenizer reads."""
    parts: List[str] = []
    if isinstance(tools, list) and len(tools) > 0:
        parts.append("<|tools|>\n" + js_stringify(tools) + "\n")
    for m in messages:
        parts.append("<|" + str(m.get("role", "")) + "|>\n" + message_text(m.get("content")) + "\n")
        calls = m.get("tool_calls")
        if calls is not None:
            parts.append("<|tool_calls|>" + js_stringify(calls) + "\n")
    parts.append("<|assistant|>\n")
    return "".join(parts)


# Output ids come from the random model's vocabulary; any deterministic word per id will
# do, since the content is meaningless and only token counts and timing matter.
_WORDS = (
    "alpha bravo cedar delta ember fjord glade harbor iris juniper kelp lumen maple nectar "
    "onyx prism quartz raven sierra tundra umber vale willow xenon yarrow zephyr amber basalt "
    "cobalt dune echo flint garnet hollow indigo jade kestrel lotus mica nova opal pine quill "
    "reed sage thistle ultra vapor wren yew zinc arc bloom coral drift elm fern gale heath"
).split()


def detokenize_one(token_id: int) -> str:
    return " " + _WORDS[token_id % len(_WORDS)]


def detokenize(ids: Sequence[int]) -> str:
    return "".join(detokenize_one(i) for i in ids)
