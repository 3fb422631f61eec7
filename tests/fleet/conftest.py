"""Fixtures shared by the fleet tests on the real embedded stack."""
from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest


@pytest.fixture
def state_dir():
    """A fresh stack state directory; whatever a (killed) fleet left running in it is stopped."""
    d = Path(tempfile.mkdtemp(prefix="adev-fleet-", dir=os.environ.get("ADEV_TEST_TMP", "/tmp")))
    yield d
    from adev.stack import stop_stack
    stop_stack(str(d))
    shutil.rmtree(d, ignore_errors=True)
