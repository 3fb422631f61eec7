import os

import pytest

from kvblock.device import BLOCK_SIZE, AlignmentError, BlockDevice, DeviceError


def test_roundtrip_aligned(dev):
    data = bytes(range(256)) * (BLOCK_SIZE // 256) * 2
    dev.write(BLOCK_SIZE * 3, data)
    assert dev.read(BLOCK_SIZE * 3, len(data)) == data
    assert dev.read(BLOCK_SIZE * 4, BLOCK_SIZE) == data[BLOCK_SIZE:]


def test_misaligned_requests_rejected(dev):
    with pytest.raises(AlignmentError):
        dev.read(100, BLOCK_SIZE)
    with pytest.raises(AlignmentError):
        dev.read(0, 100)
    with pytest.raises(AlignmentError):
        dev.write(BLOCK_SIZE, b"x" * 10)
    assert issubclass(AlignmentError, ValueError)
    assert issubclass(AlignmentError, DeviceError)


def test_out_of_window_rejected(dev):
    with pytest.raises(DeviceError):
        dev.read(dev.size, BLOCK_SIZE)
    with pytest.raises(DeviceError):
        dev.write(dev.size - BLOCK_SIZE, bytes(2 * BLOCK_SIZE))


def test_window_offset_maps_to_device(device_path, region_offset):
    with BlockDevice(device_path, offset=region_offset + BLOCK_SIZE, length=4 * BLOCK_SIZE) as d:
        assert d.size == 4 * BLOCK_SIZE
        d.write(0, b"A" * BLOCK_SIZE)
        d.flush()
    fd = os.open(device_path, os.O_RDONLY)
    try:
        assert os.pread(fd, BLOCK_SIZE, region_offset + BLOCK_SIZE) == b"A" * BLOCK_SIZE
    finally:
        os.close(fd)


def test_closed_device(device_path, region_offset):
    d = BlockDevice(device_path, offset=region_offset, length=BLOCK_SIZE * 2)
    d.close()
    d.close()
    assert d.closed
    with pytest.raises(DeviceError):
        d.read(0, BLOCK_SIZE)
