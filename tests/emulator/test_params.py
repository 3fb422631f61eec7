"""Request parameters validated as vLLM validates them."""
from __future__ import annotations

import pytest

from adev.emulator.params import BadRequest, parse_prompts, parse_sampling


def test_sampling_fields():
    s = parse_sampling({"max_completion_tokens": 5, "max_tokens": 9, "min_tokens": 2, "ignore_eos": True,
                        "stream": True, "stream_options": {"include_usage": True,
                                                           "continuous_usage_stats": True}}, chat=True)
    assert (s.max_tokens, s.min_tokens, s.ignore_eos, s.stream, s.include_usage, s.continuous_usage) == \
        (5, 2, True, True, True, True)
    assert parse_sampling({"max_completion_tokens": 5, "max_tokens": 9}, chat=False).max_tokens == 9
    # continuous usage needs include_usage (vLLM's should_include_usage)
    assert not parse_sampling({"stream_options": {"continuous_usage_stats": True}}, True).continuous_usage
    for body, param in (({"max_tokens": 0}, "max_tokens"), ({"max_tokens": True}, "max_tokens"),
                        ({"min_tokens": -1}, "min_tokens"), ({"max_tokens": 3, "min_tokens": 4}, "min_tokens"),
                        ({"ignore_eos": "yes"}, "ignore_eos"), ({"stream_options": 3}, "stream_options")):
        with pytest.raises(BadRequest) as e:
            parse_sampling(body, chat=True)
        assert e.value.param == param and e.value.status == 400


def test_prompts():
    assert parse_prompts({"prompt": "hi"}, 100) == ["hi"]
    assert parse_prompts({"prompt": [1, 2]}, 100) == [[1, 2]]
    assert parse_prompts({"prompt": ["a", "b"]}, 100) == ["a", "b"]
    assert parse_prompts({"prompt": [[1], [2, 3]]}, 100) == [[1], [2, 3]]
    for p, msg in (([1, 100], "Token id 100 is out of vocabulary"), ([-1], "Token id -1"),
                   ([], "prompt"), ([[]], "must not be empty"), ([1, "a"], "integers"), (None, "prompt"),
                   ([1, True], "integers"), ([[1], [2.0]], "integers")):
        with pytest.raises(BadRequest, match=msg):
            parse_prompts({"prompt": p}, 100)
