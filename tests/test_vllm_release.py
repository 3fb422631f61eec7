"""Which vLLM releases count a waiting request's prefix cache lookups at every step
(adev.vllm_release), and the stack setting that names the release the emulator counts as."""
from __future__ import annotations

import pytest

from adev.config import ConfigError, StackConfig
from adev.vllm_release import counts_waiting_lookups, parse


@pytest.mark.parametrize("version,counts", [
    ("0.24.0", True), ("0.25.1", True), ("0.11.0", True), ("0.25.2.dev12+g0123abc", True),
    ("0.26.0", False), ("0.26.0rc1", False), ("0.27.1", False), ("1.0.0", False),
    ("0.24.0+adev.emulator", True), ("0.26.0+adev.emulator", False),
    (None, None), ("", None), ("not a release", None)])
def test_releases_before_0_26_count_every_lookup(version, counts):
    assert counts_waiting_lookups(version) is counts


def test_a_version_that_is_not_a_release_is_named_in_the_error():
    with pytest.raises(ValueError, match="'latest' is not a vLLM release"):
        parse("latest")
    with pytest.raises(ConfigError, match=r"stack\.vllm_version: 'latest' is not a vLLM release"):
        StackConfig(vllm_version="latest").validate("stack")
    StackConfig(vllm_version="0.24.0").validate("stack")
