"""The routing tokenizer reproduces packages/protocol's ids byte for byte."""

import os

import pytest

from conftest import REPO_ROOT
from kvroute_gpu_worker.protocol import parse_chat, parse_completion, parse_generate
from kvroute_gpu_worker.tokenizer import chat_text, detokenize, js_number, js_stringify, parse_json, tokenize

FIXTURE = os.path.join(REPO_ROOT, "test", "fixtures", "routing-tokenizer.json")
PARSE = {"chat": parse_chat, "completion": parse_completion, "generate": parse_generate}


def load_cases():
    if not os.path.exists(FIXTURE):
        return []
    with open(FIXTURE, encoding="utf-8") as f:
        # Read as JSON.parse would, so numbers in bodies stringify the way JS did.
        return parse_json(f.read())["cases"]


CASES = load_cases()


def test_fixture_is_present_and_nontrivial():
    assert os.path.exists(FIXTURE), f"{FIXTURE} is missing (written by packages/protocol/scripts/write-routing-fixture.ts)"
    kinds = {c["kind"] for c in CASES}
    assert {"text", "chat", "completion", "generate"} <= kinds
    assert len(CASES) >= 20


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_fixture_case(case):
    if case["kind"] == "text":
        assert tokenize(case["text"]) == case["ids"]
        return
    parsed = PARSE[case["kind"]](case["body"])
    assert parsed.ids == case["ids"]
    if case["kind"] == "chat":
        assert chat_text(case["body"]["messages"], case["body"].get("tools")) == case["routing_text"]


def test_groups_of_four_little_endian_zero_padded():
    assert tokenize("") == []
    assert tokenize("a") == [97]
    assert tokenize("abcd") == [0x64636261]
    assert tokenize("abcde") == [0x64636261, 0x65]
    assert tokenize("é") == [0xA9C3]  # UTF-8 C3 A9
    assert tokenize("\ud800") == [0xBDBFEF]  # a lone surrogate becomes U+FFFD, as TextEncoder does


def test_js_number_and_stringify_match_json_stringify():
    cases = {1.0: "1", 0.5: "0.5", 1e21: "1e+21", 1e-7: "1e-7", 0.000001: "0.000001", 123456789012345680000.0:
             "123456789012345680000", -0.0: "0", 2.5e-5: "0.000025", 1.5e300: "1.5e+300", 100: "100"}
    for value, expected in cases.items():
        assert js_number(value) == expected, value
    assert js_stringify({"b": 1, "2": True, "1": None, "a": [1.0, "x\u2028\"\n"]}) == \
        '{"1":null,"2":true,"b":1,"a":[1,"x\u2028\\"\\n"]}'
    assert js_stringify(parse_json("12345678901234567890")) == "12345678901234567000"
    with pytest.raises(ValueError):
        parse_json("NaN")


def test_chat_text_canonical_order():
    text = chat_text(
        [{"role": "system", "content": "s"}, {"role": "user", "content": [{"type": "text", "text": "a"},
                                                                          {"type": "image_url"}, {"type": "text", "text": "b"}]},
         {"role": "assistant", "content": None, "tool_calls": [{"id": "1"}]}],
        [{"type": "function"}],
    )
    assert text == ('<|tools|>\n[{"type":"function"}]\n<|system|>\ns\n<|user|>\na\nb\n<|assistant|>\n\n'
                    '<|tool_calls|>[{"id":"1"}]\n<|assistant|>\n')


def test_detokenize_is_deterministic():
    assert detokenize([1, 2, 1]) == detokenize([1, 2, 1])
    a, b, _ = detokenize([1, 2, 1]).split(" ")[1:]
    assert a != b
