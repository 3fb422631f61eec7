"""What a vLLM release changes in the figures adev reads from it.

One rule so far: how vLLM counts its local prefix cache.

Before 0.26.0 the scheduler recorded ``vllm:prefix_cache_{queries,hits}_total`` at the lookup
(``KVCacheManager.get_computed_blocks``). A waiting request with nothing computed yet is looked
up again at every scheduler step that does not admit it: no free blocks, no token budget, or a
KV connector that defers it. So it was counted once per step it waited (vLLM#43736). vLLM#48860
moved the recording to admission, after ``allocate_slots`` succeeds, so each request counts once.
It was merged on 2026-07-16, after 0.25.1, so 0.26.0 is the first release with it.

The connector's counters (``vllm:external_prefix_cache_*``) were always recorded at admission.
So was the per-request ``prompt_tokens_details.cached_tokens``, the local plus external hit.
"""
from __future__ import annotations

from packaging.version import InvalidVersion, Version

COUNTED_ONCE_FROM = (0, 26)
"""The first vLLM release that counts a request's prefix cache lookup once, at admission."""


def parse(version: str) -> Version:
    """``version`` as a PEP 440 version (``0.24.0``, ``0.26.0rc1``, ``0.26.0+adev.emulator``);
    :class:`ValueError` naming it when it is not one."""
    try:
        return Version(version)
    except InvalidVersion:
        raise ValueError(f"{version!r} is not a vLLM release (PEP 440, e.g. '0.24.0')") from None


def counts_waiting_lookups(version: str | None) -> bool | None:
    """Whether the vLLM release ``version`` (what ``GET /version`` answers) adds a waiting
    request's repeated lookups to ``vllm:prefix_cache_{queries,hits}_total``.

    True for a release before 0.26.0, False from 0.26.0, None when the version is unknown or
    not a release. The rule reads only the release numbers. So a pre-release of 0.26.0 counts
    once, and a development build between 0.25.1 and 0.26.0 is taken as counting every lookup.
    The emulator's ``+adev.emulator`` answers follow the same rule: it counts as the release it
    names (``stack.vllm_version``)."""
    if not version:
        return None
    try:
        release = parse(version).release
    except ValueError:
        return None
    return release[:2] < COUNTED_ONCE_FROM
