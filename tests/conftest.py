"""Shared pytest fixtures. Keep this file small: one section per stage, fixtures documented.

Stack fixtures (owner: the stack):

``embedded_stack``: a factory; ``embedded_stack(**overrides) -> StackInfo`` starts a small, fast
embedded stack (real Mooncake master + emulator processes; length policy, time scale 10, 2 GB RAM
tier at model scale, store-ram) in a fresh temp state dir on free ports, and stops it at the end
of the test. ``overrides`` are :func:`adev.stack.small_config` arguments, e.g.
``embedded_stack(configuration="store-ram+disk", store={"lease_ttl_s": 1.0}, endpoints=["coder"])``.

``session_stack``: one such stack (default settings) shared by every test of the session that
asks for it; do not change its state in ways other tests would notice.

Suite budget: with ``ADEV_SUITE_BUDGET_S`` set (``.ci/run`` sets it), a test that would start
after that many wall seconds of the session fails at once instead of running, so a suite that
outruns its CI limit still ends with its summary and slowest tests printed, rather than being
killed without them.
"""
from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

_SESSION_T0 = time.monotonic()


def pytest_runtest_setup(item: pytest.Item) -> None:
    budget = os.environ.get("ADEV_SUITE_BUDGET_S")
    if budget and time.monotonic() - _SESSION_T0 > float(budget):
        pytest.fail(f"not run: the suite has used its ADEV_SUITE_BUDGET_S={budget} wall seconds "
                    "(see the slowest tests below)", pytrace=False)


def _tmp_state_dir(prefix: str) -> Path:
    # Short paths: Mooncake and unix sockets dislike long ones; /tmp keeps them short.
    return Path(tempfile.mkdtemp(prefix=prefix, dir=os.environ.get("ADEV_TEST_TMP", "/tmp")))


@pytest.fixture
def embedded_stack() -> Iterator[Callable[..., Any]]:
    import shutil

    from adev.stack import small_config, start_stack, stop_stack
    started: list[tuple[Any, Path]] = []

    def start(**overrides: Any):
        sdir = _tmp_state_dir("adev-stack-")
        try:
            info = start_stack(small_config(sdir, **overrides))
        except BaseException:
            shutil.rmtree(sdir, ignore_errors=True)
            raise
        started.append((info, sdir))
        return info

    yield start
    for info, sdir in reversed(started):
        stop_stack(info)
        shutil.rmtree(sdir, ignore_errors=True)


@pytest.fixture(scope="session")
def session_stack():
    import shutil

    from adev.stack import small_config, start_stack, stop_stack
    sdir = _tmp_state_dir("adev-sstack-")
    info = start_stack(small_config(sdir))
    yield info
    stop_stack(info)
    shutil.rmtree(sdir, ignore_errors=True)
