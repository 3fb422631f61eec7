"""Shared fixtures: a window of the block device named by ADEV_BLOCK_DEVICE.

Without ADEV_BLOCK_DEVICE (a developer machine) a 64 MiB sparse file stands in for the device.
ADEV_BLOCK_DEVICE_OFFSET (bytes, a multiple of 4096, default 0) moves the window.
"""
import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from kvblock.device import BlockDevice  # noqa: E402

REGION = 2 * 1024 * 1024


@pytest.fixture
def device_path(tmp_path):
    path = os.environ.get("ADEV_BLOCK_DEVICE")
    if not path:
        path = str(tmp_path / "disk.img")
        with open(path, "wb") as fh:
            fh.truncate(64 * 1024 * 1024)
    return path


@pytest.fixture
def region_offset():
    return int(os.environ.get("ADEV_BLOCK_DEVICE_OFFSET", "0"))


@pytest.fixture
def dev(device_path, region_offset):
    d = BlockDevice(device_path, offset=region_offset, length=REGION)
    yield d
    d.close()


@pytest.fixture
def reopen(device_path, region_offset):
    """Open a fresh BlockDevice on the same window (as a restarted process would)."""
    opened = []

    def _open(readonly=False):
        d = BlockDevice(device_path, offset=region_offset, length=REGION, readonly=readonly)
        opened.append(d)
        return d

    yield _open
    for d in opened:
        d.close()
