"""The shared disk device (adev.emulator.disk_device): a FIFO fluid queue on busy time, worked by
hand, in memory and through its file between processes."""
from __future__ import annotations

import multiprocessing

import pytest

from adev.emulator.disk_device import DEVICE_FILE, DiskDevice, reset_device


def test_fifo_on_busy_time():
    d = DiskDevice()
    assert d.reserve(10.0, 2.0) == 12.0       # idle: starts at its arrival
    assert d.reserve(11.0, 3.0) == 15.0       # arrives while busy: waits until 12
    assert d.reserve(20.0, 1.0) == 21.0       # device idle again at 15: no wait
    assert d.reserve(5.0, 1.0) == 22.0        # reaches it later with an earlier arrival: queued
    assert d.reserve(30.0, 0.0) == 30.0       # no work: no reservation
    assert d.reserve(21.5, 1.0) == 23.0


def test_two_endpoints_share_the_device_through_its_file(tmp_path):
    a, b = DiskDevice(tmp_path / DEVICE_FILE), DiskDevice(tmp_path / DEVICE_FILE)
    assert a.reserve(100.0, 4.0) == 104.0
    assert b.reserve(101.0, 2.0) == 106.0     # b queues behind a's read
    assert a.reserve(105.0, 1.0) == 107.0
    reset_device(tmp_path)                    # a new stack: the device starts idle
    c = DiskDevice(tmp_path / DEVICE_FILE)
    assert c.reserve(50.0, 1.0) == 51.0
    for d in (a, b, c):
        d.close()


def _reserve_many(path: str, n: int) -> None:
    d = DiskDevice(path)
    for _ in range(n):
        d.reserve(0.0, 0.5)
    d.close()


def test_concurrent_processes_lose_no_reservation(tmp_path):
    """Four processes queue 200 reads of 0.5 s each at time 0: the device ends at 400 s only if
    every read-modify-write of the shared free time ran under the lock."""
    path = str(tmp_path / DEVICE_FILE)
    procs = [multiprocessing.get_context("spawn").Process(target=_reserve_many, args=(path, 200))
             for _ in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    assert DiskDevice(path).reserve(0.0, 1.0) == pytest.approx(401.0)
